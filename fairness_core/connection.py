"""Redis clients for fairctl, built in this one place: plain, TLS, ACL user/password, Cluster.

The URL says which (see :mod:`fairness_core.redis_url`); ``redis+cluster://`` and
``rediss+cluster://`` get redis-py's cluster client, which discovers the other nodes from the one
named. A queue group's keys share one hash tag, so every scheduler script runs on the one master
that owns its slot.

Clients never retry a command themselves: re-sending a script whose reply was lost could apply it
twice (a duplicate enqueue), so whole operations are retried by the caller (the worker does).
Errors name host and port only: the URL may hold a password, so it is never repeated.
"""

from __future__ import annotations

import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.crc import key_slot
from redis.exceptions import ClusterDownError, RedisClusterException
from redis.retry import Retry
from redis.sentinel import SentinelConnectionPool

from .jobs import RedisUnavailable
from .redis_url import check_url, is_cluster, is_sentinel, location, without_cluster
from .sentinel_client import sentinel_master


def redis_client(url: str, *, connect_timeout: float = 3.0, timeout: float = 10.0) -> redis.Redis | ClusterClient:
    """The client for ``url`` (see the module docstring), failing fast with no retries.

    No I/O happens here: a cluster is discovered on first use, so an exporter or worker can start
    while Redis is down. ValueError (without the URL) when the URL is unusable."""
    check_url(url)
    options: dict[str, Any] = {"socket_connect_timeout": connect_timeout, "socket_timeout": timeout,
                               "retry": Retry(NoBackoff(), 0)}
    if is_cluster(url):
        return ClusterClient(url, options)
    if is_sentinel(url):
        return sentinel_master(url, options)
    return redis.Redis.from_url(url, **options)


class _Cluster(RedisCluster):
    """redis-py's cluster client, finding a function call's slot from its keys itself, as it does
    for EVAL: for FCALL it asks the server (COMMAND GETKEYS, twice per call), which took half of
    a lone client's CPU per pop and ack (561 against 271 µs, measured) and a round trip each."""

    def determine_slot(self, *args: Any) -> int | None:
        if str(args[0]).upper() in ("FCALL", "FCALL_RO") and len(args) > 3 and int(args[2]) > 0:
            slots = {key_slot(self.encoder.encode(key)) for key in args[3:3 + int(args[2])]}
            if len(slots) == 1:
                return slots.pop()
        return super().determine_slot(*args)


class ClusterClient:
    """redis-py's :class:`RedisCluster`, created on first use rather than at construction (which
    contacts the cluster), so a process can start while the cluster is unreachable. Attribute
    access is forwarded to the cluster client."""

    def __init__(self, url: str, options: dict[str, Any]) -> None:
        self._url = without_cluster(url)
        self._options = options
        self._client: RedisCluster | None = None
        self._lock = threading.Lock()
        self.where = location(url)

    def cluster(self) -> RedisCluster:
        """The cluster client, discovering the cluster's nodes and slots the first time."""
        with self._lock:
            if self._client is None:
                self._client = _Cluster.from_url(self._url, **self._options)
            return self._client

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.cluster(), name)


# Failures of the connection or of the cluster's availability, as opposed to a command's error.
_UNAVAILABLE = (redis.ConnectionError, redis.TimeoutError, ClusterDownError, RedisClusterException)
# The reply to the SELECT a connection sends first when the URL's /<db> is not one of the
# server's databases (its ``databases`` setting, 16 by default); older servers said the second.
_DB_OUT_OF_RANGE = ("DB index is out of range", "invalid DB index")
# The refusal of every write (and of every script not flagged no-writes) by a master with fewer
# replicas in sync than its min-replicas-to-write.
_NO_REPLICAS = "NOREPLICAS"


class RedisDatabaseOutOfRange(RedisUnavailable):
    """The URL's database (its ``/<db>``) is not one of the server's: every connection fails, so
    nothing can run until the URL (or the server's ``databases`` setting) is fixed. ``databases``:
    how many the server has, when it says (``CONFIG GET databases`` may be refused), else None."""

    def __init__(self, message: str, db: int, databases: int | None) -> None:
        super().__init__(message)
        self.db = db
        self.databases = databases


@contextmanager
def redis_errors(client: Any) -> Iterator[None]:
    """Turn connection failures into :class:`RedisUnavailable` naming host and port only."""
    try:
        yield
    except _UNAVAILABLE as exc:
        kind, place = describe(client)
        tls = exc.__cause__ or exc.__context__
        if isinstance(exc, redis.AuthenticationError):
            raise RedisUnavailable(f"{kind} at {place} refused the user name or password ({type(exc).__name__})") from None
        if isinstance(tls, ssl.SSLError):  # its reason names the TLS failure, never a credential
            raise RedisUnavailable(f"{kind} at {place}: TLS failed ({tls.reason or type(tls).__name__}); for a "
                                   "private CA give ?ssl_ca_certs=PATH in the rediss:// URL") from None
        raise RedisUnavailable(f"{kind} at {place} is unavailable ({type(exc).__name__})") from None
    except redis.ResponseError as exc:
        if str(exc).startswith(_NO_REPLICAS):  # a refusal the master lifts by itself: an outage
            kind, place = describe(client)
            raise RedisUnavailable(f"{kind} at {place} refuses writes: fewer replicas than its min-replicas-to-write "
                                   "are in sync (NOREPLICAS); calls go through again once one is") from None
        if not str(exc).startswith(_DB_OUT_OF_RANGE):
            raise
        raise database_out_of_range(client) from None


def database_out_of_range(client: Any) -> RedisDatabaseOutOfRange:
    """The error for a client whose database the server does not have, saying how many it has
    when a connection to database 0 may ask (CONFIG GET databases)."""
    kind, place = describe(client)
    pool = getattr(client, "connection_pool", None)
    kwargs = dict(getattr(pool, "connection_kwargs", {}))
    db = int(kwargs.get("db", 0) or 0)
    databases = None
    if pool is not None:
        probe = redis.Redis(connection_pool=redis.ConnectionPool(connection_class=pool.connection_class,
                                                                 **{**kwargs, "db": 0}))
        try:
            reply = probe.config_get("databases").get("databases")  # absent or None: the server did not say
            databases = None if reply is None else int(reply)
        except (redis.RedisError, ValueError):  # CONFIG refused (ACL, renamed command) or unreadable
            pass
        finally:
            probe.close()
    if databases is None:
        what = f"{kind} at {place} has no database {db} (out of range for the server)"
    else:
        what = f"{kind} at {place} has {databases} databases (0 to {databases - 1}), so no database {db}"
    return RedisDatabaseOutOfRange(f"{what}: fix the /<db> at the end of the URL", db, databases)


def describe(client: Any) -> tuple[str, str]:
    """What and where (host:port, or a socket path) a client talks to; its kwargs hold no URL."""
    if isinstance(client, ClusterClient):
        return "Redis Cluster", client.where
    if isinstance(client, RedisCluster):
        return "Redis Cluster", client.get_default_node().name
    pool = getattr(client, "connection_pool", None)
    if isinstance(pool, SentinelConnectionPool):
        sentinels = ",".join(f"{s.connection_pool.connection_kwargs.get('host')}:"
                             f"{s.connection_pool.connection_kwargs.get('port')}" for s in pool.sentinel_manager.sentinels)
        return "Redis", f"{pool.service_name} via sentinel {sentinels}"
    kwargs = getattr(pool, "connection_kwargs", {})
    return "Redis", f"{kwargs.get('host', kwargs.get('path', 'redis'))}:{kwargs.get('port', '')}".rstrip(":")


def server_of(client: Any, key: str) -> str:
    """The server (``host:port``) holding ``key``: on a Cluster, the master of its slot as the
    client's slot map says now (no round trip once the map is known); under Sentinel, the master
    the sentinels named at the client's last connect (before any, see :func:`describe`); else the
    one Redis."""
    if isinstance(client, ClusterClient):
        node = client.cluster().get_node_from_key(key)
        return f"{node.host}:{node.port}"
    pool = getattr(client, "connection_pool", None)
    if isinstance(pool, SentinelConnectionPool) and pool.master_address:
        host, port = pool.master_address
        return f"{host}:{port}"
    return describe(client)[1]
