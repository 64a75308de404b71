"""Start a throwaway ``redis-server`` on a free loopback port (tests, ``fairctl demo``, stacks), or
several of them joined into a Redis Cluster with ``redis-cli --cluster create``."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

INSTALL_HINT = "install it with: apt-get install -y redis-server"
# What a ready server answers to PING: PONG, or that it wants a password first (ACLs, requirepass).
READY_REPLIES = (b"+PONG", b"-NOAUTH")
SLOTS = 16384  # a Redis Cluster's hash slots


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until(condition: Callable[[], bool], timeout: float, every: float = 0.05) -> bool:
    """Poll ``condition`` every ``every`` s until it holds (True) or ``timeout`` s pass (False);
    the one wait loop of the servers this package starts and stops."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(every)
    return True


def redis_answers(port: int) -> bool:
    """A redis-server on loopback ``port`` answers PING as a ready server does."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(READY_REPLIES)
    except OSError:
        return False


def find_binary(name: str, hint: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise FileNotFoundError(f"{name} not found on PATH; {hint}")
    return path


def stop_process(process: subprocess.Popen[bytes] | None, *, timeout: float = 10.0, kill: bool = False) -> None:
    """Stop a child server: SIGTERM (or SIGKILL with ``kill``), then SIGKILL if it has not exited
    within ``timeout``; always reaped, so no zombie is left behind."""
    if process is None or process.poll() is not None:
        return
    if kill:
        process.kill()
    else:
        process.terminate()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


class RedisServer:
    """A redis-server child process with its own data directory, stopped on exit.

    ``appendonly`` turns on AOF (fsync every write) for durability tests; ``extra_args`` are more
    ``redis-server`` options (TLS ports, ACL users, cluster mode). The plain loopback ``port`` is
    always served: readiness is checked there. ``binary`` is the server to run (default: the
    ``redis-server`` on PATH), e.g. a ``valkey-server`` the benchmarks compare it with. With
    ``own_session`` it runs in a session of its own, out of reach of a terminal's Ctrl-C (which
    goes to the whole foreground process group), so a command that owns it stops it itself, after
    whatever uses it; others (tests, the benchmarks) keep it in their group, where killing the group
    kills it too.
    """

    def __init__(self, *, port: int | None = None, appendonly: bool = False, directory: str | None = None,
                 extra_args: tuple[str, ...] = (), binary: str | None = None, own_session: bool = False) -> None:
        self.binary = binary or find_binary("redis-server", INSTALL_HINT)
        self.port = port or free_port()
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if directory:
            self.directory = Path(directory)
        else:
            self._tmp = tempfile.TemporaryDirectory(prefix="fairctl-redis-")
            self.directory = Path(self._tmp.name)
        self.appendonly = appendonly
        self.extra_args = extra_args
        self.own_session = own_session
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10.0) -> "RedisServer":
        args = [
            self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.directory),
            "--save", "", "--appendonly", "yes" if self.appendonly else "no", "--appendfsync", "always",
            "--daemonize", "no", "--logfile", str(self.directory / "redis.log"), *self.extra_args,
        ]
        process = self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                                  start_new_session=self.own_session)

        def ready() -> bool:
            if process.poll() is not None:
                err = process.stderr.read().decode(errors="replace") if process.stderr else ""
                log = (self.directory / "redis.log")
                raise RuntimeError(f"redis-server exited: {err or (log.read_text() if log.exists() else '')}")
            return redis_answers(self.port)

        if wait_until(ready, timeout, every=0.02):
            return self
        self.stop()
        raise RuntimeError(f"redis-server did not answer on port {self.port} within {timeout:.0f}s")

    def stop(self, *, kill: bool = False) -> None:
        stop_process(self.process, kill=kill)
        self.process = None

    def close(self) -> None:
        self.stop()
        if self._tmp is not None:
            self._tmp.cleanup()

    def __enter__(self) -> "RedisServer":
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


class RedisClusterServers:
    """``masters`` redis-servers in cluster mode (no replicas), the slots split evenly among them; :attr:`url` names the first as the seed node.
    ``appendonly``: each with an AOF fsynced before every reply (a master can be killed and
    restarted with its data)."""

    NODE_TIMEOUT_MS = 2000  # a short failure-detection time: these clusters are throwaway

    def __init__(self, masters: int = 3, *, appendonly: bool = False) -> None:
        self.cli = find_binary("redis-cli", INSTALL_HINT)
        # The bus port is given: the default, port + 10000, does not exist for free ports above 55535.
        self.nodes = [
            RedisServer(appendonly=appendonly, extra_args=("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                                    "--cluster-port", str(free_port()),
                                    "--cluster-node-timeout", str(self.NODE_TIMEOUT_MS)))
            for _ in range(masters)
        ]

    @property
    def url(self) -> str:
        return f"redis+cluster://127.0.0.1:{self.nodes[0].port}"

    def start(self, timeout: float = 60.0) -> "RedisClusterServers":
        """Each node takes an even share of the slots (CLUSTER ADDSLOTSRANGE), then the first
        meets the others: ``redis-cli --cluster create`` does the same but refuses fewer than 3
        masters, and the benchmarks compare 1, 2 and 3."""
        try:
            for node in self.nodes:
                node.start()
            count = len(self.nodes)
            for k, node in enumerate(self.nodes):
                self._cluster(node, "ADDSLOTSRANGE", k * SLOTS // count, (k + 1) * SLOTS // count - 1)
            for node in self.nodes[1:]:
                bus = node.extra_args[node.extra_args.index("--cluster-port") + 1]
                self._cluster(self.nodes[0], "MEET", "127.0.0.1", node.port, bus)
            if not wait_until(lambda: all(self._cluster_ok(node) for node in self.nodes), timeout, every=0.1):
                raise RuntimeError(f"the cluster was not ok on every node within {timeout:.0f}s")
        except BaseException:
            self.close()
            raise
        return self

    def _cluster(self, node: RedisServer, *args: object) -> None:
        subprocess.run([self.cli, "-p", str(node.port), "cluster", *map(str, args)], check=True,
                       capture_output=True, timeout=10)

    def _cluster_ok(self, node: RedisServer) -> bool:
        info = subprocess.run([self.cli, "-p", str(node.port), "cluster", "info"],
                              capture_output=True, text=True, timeout=10).stdout
        return "cluster_state:ok" in info

    def close(self) -> None:
        for node in self.nodes:
            node.close()

    def __enter__(self) -> "RedisClusterServers":
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
