"""The Sentinel pool's asking thread: one per process, gone with its pool (a process that makes
many clients keeps no thread per client), and a connection to a server the sentinels no longer
name is told apart. No server is needed: nothing here connects."""

from __future__ import annotations

import gc
import threading
from types import SimpleNamespace

from fairness_core.connection import redis_client
from fairness_core.sentinel_client import FollowingSentinelPool

from .support import wait_for

URL = "redis+sentinel://127.0.0.1:1/lonely"


def askers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "sentinel-lonely"]


def test_one_asking_thread_per_pool_and_none_once_the_pool_is_gone() -> None:
    client = redis_client(URL)
    pool = client.connection_pool
    assert isinstance(pool, FollowingSentinelPool)
    pool.follow()
    pool.follow()
    assert len(askers()) == 1
    del client, pool
    gc.collect()
    wait_for(lambda: not askers(), 10, "the asking thread to end with its pool")


def test_a_connection_to_another_server_than_the_named_master_has_moved() -> None:
    pool = redis_client(URL).connection_pool
    assert isinstance(pool, FollowingSentinelPool)
    conn = SimpleNamespace(_sock=object(), host="10.0.0.1", port=6379)
    assert not pool.moved(conn)  # no master named yet: the first connect asks
    pool.proxy.master_address = ("10.0.0.2", 6379)
    assert pool.moved(conn)
    conn.host = "10.0.0.2"
    assert not pool.moved(conn)
    assert not pool.moved(SimpleNamespace(_sock=None, host="10.0.0.1", port=6379))  # not connected: connect asks
