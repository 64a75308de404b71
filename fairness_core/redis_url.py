"""Redis URLs: which forms fairctl accepts, and how to name one without its secrets.

``redis://`` (TCP), ``rediss://`` (TLS; ``?ssl_ca_certs=PATH`` and redis-py's other ``ssl_*``
query options), ``unix://`` (a socket), each with optional ``user:password@``; ``redis+cluster://``
and ``rediss+cluster://`` name one seed node of a Redis Cluster; ``redis+sentinel://`` and
``rediss+sentinel://`` name the sentinels of a Sentinel-managed master,
``HOST:PORT[,HOST:PORT...]/SERVICE[/DB]``, the user, password and TLS options being the master's.
A URL may hold a password, so no message built here ever quotes one.
"""

from __future__ import annotations

import inspect
import re
from contextlib import suppress
from dataclasses import dataclass
from urllib.parse import parse_qsl, unquote, urlsplit

from redis import connection
from redis.connection import parse_url

CLUSTER_SUFFIX = "+cluster"
SENTINEL_SUFFIX = "+sentinel"
URL_SCHEMES = ("redis", "rediss", "unix", "redis+cluster", "rediss+cluster", "redis+sentinel", "rediss+sentinel")
URL_HINT = ("expected a redis://, rediss://, unix://, redis+cluster://, rediss+cluster://, redis+sentinel:// or "
            "rediss+sentinel:// URL")
SENTINEL_PORT = 26379
MAX_DB = 2**31 - 2  # the last database of the most Redis can have (its ``databases`` setting is at most INT_MAX)
DB_HINT = (f"the URL's database (the /<db> after host:port, or ?db=) must be a number from 0 to {MAX_DB}; "
           "percent-encode characters such as / ? # @ : in the user name and password")
_SENTINEL = re.compile(r"^(rediss?)\+sentinel://(?:(?P<user>[^@/]*)@)?(?P<hosts>[^/?#@]+)/(?P<service>[^/?#]+)"
                       r"(?:/(?P<db>\d*))?/?(?P<query>\?[^#]*)?$")
_SCHEME = re.compile(r"^([a-z+]+)://")
# What a URL may set: the keyword arguments of redis-py's connection pool and connections.
_OPTIONS = frozenset(
    name for cls in (connection.ConnectionPool, connection.Connection, connection.SSLConnection,
                     connection.UnixDomainSocketConnection, connection.AbstractConnection)
    for name in inspect.signature(cls.__init__).parameters
) - {"self", "kwargs"}


def is_cluster(url: str) -> bool:
    return urlsplit(url).scheme.endswith(CLUSTER_SUFFIX)


def is_sentinel(url: str) -> bool:
    return urlsplit(url).scheme.endswith(SENTINEL_SUFFIX)


@dataclass(frozen=True)
class SentinelURL:
    """A Sentinel URL's parts: the sentinels, the master's service name, and the URL of one plain
    server with the master's user, password, database and TLS options (its host a placeholder)."""

    sentinels: tuple[tuple[str, int], ...]
    service: str
    master: str


def sentinel_parts(url: str) -> SentinelURL:
    """The parts of a ``redis+sentinel://`` URL; ValueError, never quoting it, when it is not one."""
    match = _SENTINEL.match(url)
    if match is None:
        raise ValueError("expected redis+sentinel://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...]/SERVICE[/DB]")
    sentinels = []
    for item in match.group("hosts").split(","):
        host, _, port = item.strip().rpartition(":") if ":" in item else (item.strip(), "", str(SENTINEL_PORT))
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError("each sentinel is HOST:PORT (port 1-65535), separated by commas")
        sentinels.append((host.strip("[]"), int(port)))
    user = f"{match.group('user')}@" if match.group("user") is not None else ""
    db = match.group("db") or "0"
    master = f"{match.group(1)}://{user}sentinel-master/{db}{match.group('query') or ''}"
    return SentinelURL(tuple(sentinels), match.group("service"), master)


def without_cluster(url: str) -> str:
    """The URL redis-py's own parser reads (it knows no ``+cluster`` schemes)."""
    return url.replace(CLUSTER_SUFFIX, "", 1) if is_cluster(url) else url


def check_url(url: str) -> None:
    """ValueError, never quoting the URL, unless redis-py can use it."""
    match = _SCHEME.match(url)
    if match is None or match.group(1) not in URL_SCHEMES:
        raise ValueError(URL_HINT)
    if is_sentinel(url):
        url = sentinel_parts(url).master
    _check_db(without_cluster(url))
    try:
        options = parse_url(without_cluster(url))
    except ValueError:  # redis-py's message may quote part of the URL (a "port" that is a password)
        raise ValueError("not a usable Redis URL: check host, port and query options, and percent-encode "
                         "characters such as / ? # @ : in the user name and password") from None
    if not set(options) <= _OPTIONS:  # redis-py would fail only at the first connection, with a TypeError
        raise ValueError("the URL's query has an option redis-py does not know; percent-encode a ? or # in the "
                         "password (%3F, %23)")
    if is_cluster(url) and options.get("db", 0) != 0:
        raise ValueError("a Redis Cluster has only database 0; drop the /<db> from the URL")
    host = options.get("host")
    try:  # what the socket does with it: a host such as "." (an unencoded @ in the password) fails there
        if isinstance(host, str):
            host.encode("idna")
    except UnicodeError:
        raise ValueError("the URL's host is not a host name; percent-encode characters such as / ? # @ : in "
                         "the user name and password") from None


def _check_db(url: str) -> None:
    """ValueError, never quoting the URL, for a database that is not a number Redis could have:
    redis-py reads ``/abc`` as database 0, ``/1/2`` as 12 and ``?db=-1`` as -1."""
    parts = urlsplit(url)
    given = [value for name, value in parse_qsl(parts.query, keep_blank_values=True) if name == "db"]
    if parts.scheme in ("redis", "rediss") and parts.path not in ("", "/"):
        given.append(unquote(parts.path).removeprefix("/"))
    if not all(db.isascii() and db.isdigit() and int(db) <= MAX_DB for db in given):
        raise ValueError(DB_HINT)


def location(url: str) -> str:
    """``host:port`` (or the socket path) of a URL, for messages: never the user or password."""
    if is_sentinel(url):
        with suppress(ValueError):
            named = sentinel_parts(url)
            return f"{named.service} via sentinel " + ",".join(f"{host}:{port}" for host, port in named.sentinels)
        return "sentinel"
    parts = urlsplit(without_cluster(url))
    try:
        port = parts.port
    except ValueError:
        port = None
    host = parts.hostname or parts.path or "redis"
    return f"{host}:{port}" if port else host
