"""A throwaway Sentinel group on loopback: a master, a replica and three sentinels, each its own
``redis-server`` process (``redis-server CONF --sentinel``, as Debian's ``redis-sentinel`` package
runs it). ``fairctl drill --failover`` and the tests kill and stop its parts for real.

Failure detection is fast on purpose (``DOWN_AFTER_MS``, ``FAILOVER_TIMEOUT_MS``): a production
group keeps Redis's defaults (30 s and 3 min), which docs/deployment.md discusses.
"""

from __future__ import annotations

import signal
import subprocess
import tempfile
from pathlib import Path
from types import TracebackType
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from .servers import INSTALL_HINT, RedisServer, find_binary, free_port, redis_answers, stop_process, wait_until

SERVICE = "fairctl-master"
SENTINELS = 3
QUORUM = 2
DOWN_AFTER_MS = 1000
FAILOVER_TIMEOUT_MS = 4000


def _client(port: int) -> redis.Redis:
    """One try per call: a server or sentinel that is down answers no sooner for being asked again
    (redis-py's default retries made asking a killed server take 3 s)."""
    return redis.Redis(port=port, socket_timeout=2, socket_connect_timeout=1, retry=Retry(NoBackoff(), 0))


def _replication(port: int) -> dict[str, object]:
    try:
        return dict(_client(port).info("replication"))
    except redis.RedisError:
        return {}


class Sentinel:
    """One sentinel process; it can be stopped and started again on the same port and config."""

    def __init__(self, directory: Path, master_port: int) -> None:
        self.binary = find_binary("redis-server", INSTALL_HINT)
        self.port = free_port()
        self.conf = directory / f"sentinel-{self.port}.conf"
        self.conf.write_text(f"port {self.port}\nbind 127.0.0.1\ndir {directory}\n"
                             f"logfile {directory / f'sentinel-{self.port}.log'}\n"
                             f"sentinel monitor {SERVICE} 127.0.0.1 {master_port} {QUORUM}\n"
                             f"sentinel down-after-milliseconds {SERVICE} {DOWN_AFTER_MS}\n"
                             f"sentinel failover-timeout {SERVICE} {FAILOVER_TIMEOUT_MS}\n", encoding="utf-8")
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 10.0) -> None:
        """Start (again): a sentinel rewrites its config file with what it learnt, so a restarted
        one knows the current master and replicas."""
        self.process = subprocess.Popen([self.binary, str(self.conf), "--sentinel"],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if not wait_until(lambda: redis_answers(self.port), timeout):
            raise RuntimeError(f"the sentinel on port {self.port} did not answer within {timeout:.0f}s")

    def stop(self) -> None:
        stop_process(self.process, kill=True)
        self.process = None


class SentinelGroup:
    """A master, one replica and three sentinels watching them; :attr:`url` is the
    ``redis+sentinel://`` URL a queue uses. ``servers`` are both data servers, in start order: which
    is master changes with each failover (:meth:`master_port`)."""

    def __init__(self, *, db: int = 0) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="fairctl-sentinel-")
        self.directory = Path(self._tmp.name)
        self.db = db
        first = RedisServer()
        self.servers = [first, RedisServer(extra_args=("--replicaof", "127.0.0.1", str(first.port)))]
        self.sentinels = [Sentinel(self.directory, first.port) for _ in range(SENTINELS)]

    @property
    def url(self) -> str:
        return "redis+sentinel://" + ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels) + f"/{SERVICE}/{self.db}"

    def start(self, timeout: float = 30.0) -> "SentinelGroup":
        try:
            for server in self.servers:
                server.start()
            if not wait_until(lambda: self.replica_in_sync(self.servers[1].port), timeout):
                raise RuntimeError(f"the replica did not link to its master within {timeout:.0f}s")
            for sentinel in self.sentinels:
                sentinel.start()
            if not wait_until(self._replica_known, timeout, every=0.1):
                raise RuntimeError(f"the sentinels did not find the replica within {timeout:.0f}s")
        except BaseException:
            self.close()
            raise
        return self

    def _replica_known(self) -> bool:
        try:
            state: dict[str, Any] = dict(_client(self.sentinels[0].port).sentinel_master(SERVICE))  # type: ignore[arg-type]
            return int(state.get("num-slaves", 0)) >= 1
        except redis.RedisError:
            return False

    def master_port(self) -> int | None:
        """The master's port as the first sentinel that answers names it."""
        for sentinel in self.sentinels:
            try:
                reply: Any = _client(sentinel.port).sentinel_get_master_addr_by_name(SERVICE)
            except redis.RedisError:
                continue
            return int(reply[1]) if reply else None
        return None

    def master_port_of_servers(self) -> int:
        """The port of the data server that says it is a master (sentinels may be stopped)."""
        (port,) = [s.port for s in self.servers if s.process is not None and _replication(s.port).get("role") == "master"]
        return port

    def server(self, port: int) -> RedisServer:
        (found,) = [s for s in self.servers if s.port == port]
        return found

    def replica_in_sync(self, port: int) -> bool:
        """The server on ``port`` replicates a master, its link up and its offset caught up."""
        mine = _replication(port)
        if mine.get("role") != "slave" or mine.get("master_link_status") != "up":
            return False
        theirs = _replication(int(str(mine.get("master_port"))))
        return mine.get("slave_repl_offset") == theirs.get("master_repl_offset")

    def kill_master(self) -> int:
        """SIGKILL the current master (no shutdown save, no goodbye to its clients); its port."""
        port = self.master_port()
        if port is None:
            raise RuntimeError("no sentinel names a master")
        process = self.server(port).process
        assert process is not None
        process.send_signal(signal.SIGKILL)
        process.wait()
        return port

    def close(self) -> None:
        for sentinel in self.sentinels:
            sentinel.stop()
        for server in self.servers:
            server.close()
        self._tmp.cleanup()

    def __enter__(self) -> "SentinelGroup":
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
