"""Redis URLs: which forms fairctl accepts, and how to name one without its secrets.

``redis://`` (TCP), ``rediss://`` (TLS; ``?ssl_ca_certs=PATH`` and redis-py's other ``ssl_*``
query options), ``unix://`` (a socket), each with optional ``user:password@``; ``redis+cluster://``
and ``rediss+cluster://`` name one seed node of a Redis Cluster. A URL may hold a password, so no
message built here ever quotes one.
"""

from __future__ import annotations

import inspect
import re
from urllib.parse import urlsplit

from redis import connection
from redis.connection import parse_url

CLUSTER_SUFFIX = "+cluster"
URL_SCHEMES = ("redis", "rediss", "unix", "redis+cluster", "rediss+cluster")
URL_HINT = "expected a redis://, rediss://, unix://, redis+cluster:// or rediss+cluster:// URL"
_SCHEME = re.compile(r"^([a-z+]+)://")
# What a URL may set: the keyword arguments of redis-py's connection pool and connections.
_OPTIONS = frozenset(
    name for cls in (connection.ConnectionPool, connection.Connection, connection.SSLConnection,
                     connection.UnixDomainSocketConnection, connection.AbstractConnection)
    for name in inspect.signature(cls.__init__).parameters
) - {"self", "kwargs"}


def is_cluster(url: str) -> bool:
    return urlsplit(url).scheme.endswith(CLUSTER_SUFFIX)


def without_cluster(url: str) -> str:
    """The URL redis-py's own parser reads (it knows no ``+cluster`` schemes)."""
    return url.replace(CLUSTER_SUFFIX, "", 1) if is_cluster(url) else url


def check_url(url: str) -> None:
    """ValueError, never quoting the URL, unless redis-py can use it."""
    match = _SCHEME.match(url)
    if match is None or match.group(1) not in URL_SCHEMES:
        raise ValueError(URL_HINT)
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


def location(url: str) -> str:
    """``host:port`` (or the socket path) of a URL, for messages: never the user or password."""
    parts = urlsplit(without_cluster(url))
    try:
        port = parts.port
    except ValueError:
        port = None
    host = parts.hostname or parts.path or "redis"
    return f"{host}:{port}" if port else host
