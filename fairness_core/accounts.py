"""Accounts: the party that a tenant key belongs to, for two-level fair queuing.

With ``tenants.account_separator`` set, a tenant id names its account before the first separator:
``acme/ws-17`` is the key ``ws-17`` of the account ``acme``. Fair queuing then runs across the
accounts of a class, by each account's tier, and across each account's keys inside its share, so
an account that spreads its work over 200 keys gets one account's share, not 200 tenants'. An id
without the separator is an account of one key, named as itself. The Lua's ``account_of`` splits
ids the same way (byte for byte: a separator's UTF-8 bytes only ever match at a character).
"""

from __future__ import annotations


def account_of(tenant: str, separator: str | None) -> str:
    """The account ``tenant`` belongs to (itself when ``separator`` is None or not in it)."""
    if separator is None:
        return tenant
    account, found, _ = tenant.partition(separator)
    return account if found else tenant


def split_problem(tenant: str, separator: str | None) -> str | None:
    """Why ``tenant`` names no account and key (an empty side of the separator), else None."""
    if separator is None or separator not in tenant:
        return None
    account, _, key = tenant.partition(separator)
    if not account:
        return f"names no account before {separator!r} (tenants.account_separator)"
    if not key:
        return f"names no key after {separator!r} (tenants.account_separator)"
    return None
