"""``fairctl stack``: Redis, the workers, two exporters, Prometheus with the generated rules,
Alertmanager and a webhook receiver, run natively from the binaries on PATH, on loopback.

Everything lives under one directory: the config and rules each process reads, their data, their
logs, and ``stack.json``, the record of what was started (program, pid, port). ``down`` stops
exactly the processes in that record (a pid whose command line no longer matches is someone
else's and is left alone) and checks that their ports are free again.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path
from types import FrameType

from alerts.config import alert_settings
from alerts.output import rules_text
from exporter.config import serving
from fairness_core import open_queue, redis_client
from fairness_core.config import Config
from fairness_core.config_dump import config_to_yaml
from fairness_core.config_store import ConfigRefused, differences
from fairness_core.generated import yaml_text
from fairness_stack.servers import find_binary, free_port, redis_answers, wait_until

from . import configs as sc

STATE_FILE = "stack.json"
CONFIG_FILE = "fairness.yaml"
WEBHOOK_LOG = "webhook.jsonl"
PROMETHEUS_HINT = "install it with: apt-get install -y prometheus"
ALERTMANAGER_HINT = "install it with: apt-get install -y prometheus-alertmanager"
STOP_TIMEOUT_S = 10.0
READY_TIMEOUT_S = 60.0
PORT_TIMEOUT_S = 5.0  # for a stopped server's port to be free again
# Alertmanager: notify within a second of an alert firing; never repeat within a drill.
GROUP_WAIT_S, GROUP_INTERVAL_S, REPEAT_INTERVAL_S = 1.0, 1.0, 3600.0


class StackError(RuntimeError):
    """A service would not start, or the stack directory holds something else."""


class PortTaken(StackError):
    """A service could not bind its port: something took it after the port was seen free."""


class ChosenPortTaken(StackError):
    """A port of the ones the user chose (``port_base``) is taken: the stack takes no other."""


@dataclass(frozen=True)
class WorkerPool:
    """Worker processes of one pool: ``slots`` threads in all, serving ``classes`` (None: all)."""

    name: str
    slots: int
    classes: tuple[str, ...] | None = None


@dataclass
class Service:
    name: str
    pid: int
    argv: list[str]
    started: str
    port: int | None = None
    url: str | None = None
    log: str = ""


@dataclass
class StackState:
    directory: str
    interval: float
    redis_url: str
    prometheus_url: str
    alertmanager_url: str
    webhook_log: str
    services: list[Service] = field(default_factory=list)
    config_changes: list[str] = field(default_factory=list)  # what starting it applied (apply_config)

    def save(self) -> None:
        """Written whole, then renamed into place: `stack status` or `down` reading it while
        `up` writes never sees half a file."""
        path = Path(self.directory) / STATE_FILE
        partial = path.with_suffix(".json.partial")
        partial.write_text(json.dumps(asdict(self), indent=2) + "\n", encoding="utf-8")
        os.replace(partial, path)

    @classmethod
    def load(cls, directory: Path) -> StackState:
        path = directory / STATE_FILE
        if not path.is_file():
            raise StackError(f"{directory} holds no stack ({STATE_FILE} missing); start one with: fairctl stack up --dir {directory}")
        data = json.loads(path.read_text(encoding="utf-8"))
        return cls(**{**data, "services": [Service(**s) for s in data["services"]]})


def _port_free(port: int) -> bool:
    """Nothing listens on or holds ``port`` (a closed connection's TIME_WAIT does not count: the
    servers themselves rebind with SO_REUSEADDR)."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _listens(pid: int, port: int) -> bool:
    """Process ``pid`` holds a listening TCP socket on ``port``: a service answering on its port is
    ready only when the answer is its own, not another stack's server on a port it lost."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table, encoding="ascii") as rows:
                for row in list(rows)[1:]:
                    fields = row.split()  # sl, local address:port (hex), remote, state, ..., inode
                    if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                        inodes.add(f"socket:[{fields[9]}]")
        except OSError:
            continue
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") in inodes:
                return True
        except OSError:
            continue
    return False


def _port_taken(log_tail: list[str]) -> bool:
    """The words Redis, Prometheus, Alertmanager and Python all print when a bind fails on a port
    in use (errno EADDRINUSE)."""
    return any("address already in use" in line.lower() for line in log_tail)


def pick_port(preferred: int | None, taken: set[int]) -> int:
    """``preferred`` when free (None: none preferred), else any free loopback port."""
    port = preferred if preferred is not None and preferred not in taken and _port_free(preferred) else free_port()
    while port in taken:
        port = free_port()
    taken.add(port)
    return port


def proc_stat(pid: int) -> list[str]:
    """``/proc/PID/stat`` after the command name: state, ppid, pgrp, session, ... (empty: no such
    pid)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as stat:
            return stat.read().rpartition(")")[2].split()
    except OSError:
        return []


def scraped_in_time(config: Config, interval: float) -> Config:
    """``config`` as a stack scraping every ``interval`` seconds runs it: its exporters must
    answer within Prometheus's scrape timeout (one interval), so exporter.scrape_timeout is at most
    0.8 of it. A drill makes its configs so too, and its own processes then see no difference."""
    own = serving(config)
    return config.with_section("exporter", replace(own, scrape_timeout=min(own.scrape_timeout, interval * 0.8)))


def _alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie has finished: only its parent's wait is missing)."""
    fields = proc_stat(pid)
    return bool(fields) and fields[0] != "Z"


def started_at(pid: int) -> str:
    """The process's start time in clock ticks since boot: with the pid, it names one process
    for good (a pid alone can be reused after the process is gone)."""
    fields = proc_stat(pid)
    return fields[19] if len(fields) > 19 else ""


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1.0) as response:
            return bool(response.status == 200)
    except OSError:
        return False


class Stack:
    """Starts and stops one native stack under ``directory``."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory.resolve()
        self._children: dict[int, subprocess.Popen[bytes]] = {}
        self.stopped: list[str] = []  # what the last down() stopped

    # ------------------------------------------------------------------ up

    def up(self, config: Config, *, pools: Sequence[WorkerPool], interval: float = 1.0,
           threads_per_process: int = 16, usual_ports: bool = True, port_base: int | None = None) -> StackState:
        """Start every service for ``config`` (its redis.url is replaced by the stack's Redis)
        and wait until each answers; on any failure, stop what was started and raise.
        ``usual_ports`` False: free loopback ports only (a drill's throwaway stack, which no one
        browses to, so it never races anything else for 6379, 9090 or 9093). ``port_base``: the
        services on the ports :func:`~fairness_stack.configs.listening_ports` gives from it, and
        no other (ChosenPortTaken when one is taken).

        A usual port is free when chosen but may be taken before its service binds it (another
        stack starting at the same moment): then what had started is stopped and the whole stack
        starts again on free ports, since the files every service reads name the ports."""
        wanted = sc.listening_ports(port_base) if usual_ports else {}
        if port_base is not None:
            if busy := [f"{port} ({name})" for name, port in wanted.items() if not _port_free(port)]:
                raise ChosenPortTaken(f"port{'s' if len(busy) > 1 else ''} {', '.join(busy)} taken: choose another base")
            try:
                return self._up(config, pools, interval, threads_per_process, wanted)
            except PortTaken as exc:
                raise ChosenPortTaken(str(exc)) from None
        try:
            return self._up(config, pools, interval, threads_per_process, wanted)
        except PortTaken:
            if not wanted:
                raise
        return self._up(config, pools, interval, threads_per_process, {})

    def _up(self, config: Config, pools: Sequence[WorkerPool], interval: float,
            threads_per_process: int, wanted: dict[str, int]) -> StackState:
        if (self.directory / STATE_FILE).exists() and any(_alive(s.pid) for s in StackState.load(self.directory).services):
            raise StackError(f"a stack is already running under {self.directory}; stop it with: fairctl stack down --dir {self.directory}")
        for sub in ("logs", "data/redis", "data/prometheus", "data/alertmanager"):
            (self.directory / sub).mkdir(parents=True, exist_ok=True)
        binaries = {"redis": find_binary("redis-server", "install it with: apt-get install -y redis-server"),
                    "prometheus": find_binary("prometheus", PROMETHEUS_HINT),
                    "alertmanager": _alertmanager_binary()}
        taken: set[int] = set()
        ports = {name: pick_port(wanted.get(name), taken) for name in sc.listening_ports()}
        redis_url = f"redis://127.0.0.1:{ports[sc.REDIS]}/0"
        state = StackState(
            directory=str(self.directory), interval=interval, redis_url=redis_url,
            prometheus_url=f"http://127.0.0.1:{ports[sc.PROMETHEUS]}",
            alertmanager_url=f"http://127.0.0.1:{ports[sc.ALERTMANAGER]}",
            webhook_log=str(self.directory / WEBHOOK_LOG))
        live = scraped_in_time(replace(config, redis=replace(config.redis, url=redis_url)), interval)
        self._write_files(live, ports, interval)
        fairctl = [sys.executable, "-m", "fairctl"]
        config_file = str(self.directory / CONFIG_FILE)
        with self._stopped_on_failure(state):
            self._start(state, sc.REDIS, ports[sc.REDIS], [
                binaries["redis"], "--port", str(ports[sc.REDIS]), "--bind", "127.0.0.1",
                "--dir", str(self.directory / "data/redis"), "--save", "", "--appendonly", "yes",
                "--appendfsync", "everysec", "--daemonize", "no"], lambda: redis_answers(ports[sc.REDIS]))
            state.config_changes = apply_config(live)  # before any process of the stack reads it
            state.save()
            # Prometheus first: it learns its scrape targets some 5 s after it starts (its discovery
            # updates are throttled), time the other services take to start meanwhile.
            self._start(state, sc.PROMETHEUS, ports[sc.PROMETHEUS], [
                binaries["prometheus"], f"--config.file={self.directory / 'prometheus.yml'}",
                f"--storage.tsdb.path={self.directory / 'data/prometheus'}",
                f"--web.listen-address=127.0.0.1:{ports[sc.PROMETHEUS]}", "--rules.alert.resend-delay=1s"],
                lambda: _http_ok(f"{state.prometheus_url}/-/ready"))
            self._start(state, sc.WEBHOOK, ports[sc.WEBHOOK], [
                *fairctl, "stack", "webhook", "--listen", f"127.0.0.1:{ports[sc.WEBHOOK]}", "--log", state.webhook_log],
                lambda: _http_ok(f"http://127.0.0.1:{ports[sc.WEBHOOK]}/"))
            for name in sc.EXPORTERS:
                self._start(state, name, ports[name], [
                    *fairctl, "exporter", "--config", config_file, "--listen", f"127.0.0.1:{ports[name]}"],
                    partial(_http_ok, f"http://127.0.0.1:{ports[name]}/metrics"))
            self._start(state, sc.ALERTMANAGER, ports[sc.ALERTMANAGER], [
                binaries["alertmanager"], f"--config.file={self.directory / 'alertmanager.yml'}",
                f"--storage.path={self.directory / 'data/alertmanager'}",
                f"--web.listen-address=127.0.0.1:{ports[sc.ALERTMANAGER]}", "--cluster.listen-address="],
                lambda: _http_ok(f"{state.alertmanager_url}/-/ready"))
            self._start_pools(state, pools, threads_per_process)
        return state

    def up_workers(self, config: Config, *, pools: Sequence[WorkerPool], prometheus_url: str,
                   alertmanager_url: str | None, threads_per_process: int = 16) -> StackState:
        """Only the workers, on ``config``'s Redis: for drills against a team's own stack."""
        (self.directory / "logs").mkdir(parents=True, exist_ok=True)
        (self.directory / CONFIG_FILE).write_text(config_to_yaml(config, "Written by fairctl drill."), encoding="utf-8")
        state = StackState(directory=str(self.directory), interval=0.0, redis_url=config.redis.url,
                           prometheus_url=prometheus_url, alertmanager_url=alertmanager_url or "", webhook_log="",
                           config_changes=apply_config(config))
        with self._stopped_on_failure(state):
            self._start_pools(state, pools, threads_per_process)
        return state

    @contextmanager
    def _stopped_on_failure(self, state: StackState) -> Iterator[None]:
        """On any failure inside, stop what was started and raise; when stopping fails too, say
        what failed first, not only what stopping it found."""
        try:
            yield
        except BaseException as exc:
            try:
                self.down(state)
            except StackError as stopping:
                if isinstance(exc, Exception):
                    raise StackError(f"{exc}; then, stopping what had started: {stopping}") from exc
            raise

    def _start_pools(self, state: StackState, pools: Sequence[WorkerPool], threads_per_process: int) -> None:
        fairctl = [sys.executable, "-m", "fairctl"]
        for pool in pools:
            processes = max(1, -(-pool.slots // threads_per_process))
            for i in range(processes):
                threads = pool.slots // processes + (1 if i < pool.slots % processes else 0)
                argv = [*fairctl, "worker", "--config", str(self.directory / CONFIG_FILE),
                        "--concurrency", str(threads), "--grace", "0"]
                if pool.classes is not None:
                    argv += ["--classes", ",".join(pool.classes)]
                self._start(state, f"{sc.WORKERS}/{pool.name}/{i}", None, argv, None)

    def _write_files(self, live: Config, ports: dict[str, int], interval: float) -> None:
        files = {
            CONFIG_FILE: config_to_yaml(live, "Written by fairctl stack up: the config every process of this stack reads."),
            sc.RULES_FILE: rules_text(live),
            "prometheus.yml": yaml_text(sc.prometheus_config(
                exporters=[f"127.0.0.1:{ports[n]}" for n in sc.EXPORTERS],
                alertmanager=f"127.0.0.1:{ports[sc.ALERTMANAGER]}", rule_files=[sc.RULES_FILE],
                exporter_job=alert_settings(live).exporter_job, interval=interval), "Written by fairctl stack up."),
            "alertmanager.yml": yaml_text(sc.alertmanager_config(
                f"http://127.0.0.1:{ports[sc.WEBHOOK]}{sc.WEBHOOK_PATH}", group_wait=GROUP_WAIT_S,
                group_interval=GROUP_INTERVAL_S, repeat_interval=REPEAT_INTERVAL_S), "Written by fairctl stack up."),
        }
        for name, text in files.items():
            (self.directory / name).write_text(text, encoding="utf-8")

    def _start(self, state: StackState, name: str, port: int | None, argv: list[str],
               ready: Callable[[], bool] | None) -> None:
        log = self.directory / "logs" / f"{name.replace('/', '-')}.log"
        # A Ctrl-C between starting the process and recording it would leave it running unrecorded,
        # and no down() would stop it: the signal waits until the record is saved.
        with _signals_deferred(), log.open("ab") as out:
            process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                       start_new_session=True, cwd=self.directory)
            self._children[process.pid] = process
            scheme = "redis" if name == sc.REDIS else "http"
            url = None if port is None else f"{scheme}://127.0.0.1:{port}"
            state.services.append(Service(name, process.pid, argv, started_at(process.pid), port, url, str(log)))
            state.save()
        if ready is None:
            return

        def answers() -> bool:
            return ready() and (port is None or _listens(process.pid, port))
        if not wait_until(lambda: process.poll() is not None or answers(), READY_TIMEOUT_S) or process.poll() is not None:
            tail = log.read_text(errors="replace").strip().splitlines()[-5:]
            failure = PortTaken if process.poll() is not None and _port_taken(tail) else StackError
            raise failure(f"{name} did not start ({' | '.join(tail) or 'no output'}; log: {log})")

    # ------------------------------------------------------------------ down

    def down(self, state: StackState | None = None) -> list[str]:
        """Stop every recorded process and wait for their ports; returns what was stopped (in
        the order recorded). Raises StackError naming any port still held afterwards.

        Everything but Redis stops at once (SIGTERM to all, then waiting), Redis last: the workers
        unregister from it on their way out, and nothing else depends on another's stopping
        first. Stopping one by one took seconds; this takes as long as the slowest service."""
        state = state or StackState.load(self.directory)
        stopped: list[str] = []
        first = [s for s in state.services if s.name != sc.REDIS]
        for batch in (first, [s for s in state.services if s.name == sc.REDIS]):
            stopped += self._stop_all(batch)
        stopped.sort(key=[s.name for s in state.services].index)
        self.stopped = stopped
        held = [f"{s.name} :{s.port}" for s in state.services
                if s.port is not None and not wait_until(partial(_port_free, s.port), PORT_TIMEOUT_S)]
        state.services = [s for s in state.services if _alive(s.pid) and self._ours(s)]
        state.save()
        if held:
            raise StackError(f"ports still held after stopping the stack: {', '.join(held)}")
        return stopped

    def _ours(self, service: Service) -> bool:
        """The pid is still the process that was started (not a later one that reused the pid)."""
        return started_at(service.pid) == service.started

    def _stop_all(self, services: Sequence[Service]) -> list[str]:
        """SIGTERM to each service's process group, SIGKILL to those still running after
        STOP_TIMEOUT_S; returns the names of those that were running."""
        running = [s for s in services if _alive(s.pid) and self._ours(s)]
        for service in services:
            if service not in running:
                self._reap(service.pid)
        left = running
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for service in left:
                try:
                    os.killpg(service.pid, sig)
                except ProcessLookupError:
                    pass
            wait_until(lambda: all(self._gone(s.pid) for s in left), STOP_TIMEOUT_S)  # called before left changes
            left = [s for s in left if not self._gone(s.pid)]
            if not left:
                break
        return [s.name for s in running]

    def _gone(self, pid: int) -> bool:
        """The process has exited (and, if it is this process's child, is reaped)."""
        self._reap(pid)
        return not _alive(pid)

    def _reap(self, pid: int) -> None:
        """Collect a child of this process (a stack started and stopped by the same drill)."""
        child = self._children.pop(pid, None)
        if child is not None and child.poll() is None:
            self._children[pid] = child

    def status(self) -> list[tuple[Service, bool]]:
        """Every recorded service and whether it still runs."""
        state = StackState.load(self.directory)
        return [(s, _alive(s.pid) and self._ours(s)) for s in state.services]


@contextmanager
def _signals_deferred() -> Iterator[None]:
    """SIGINT and SIGTERM arriving inside the block are handled (by whatever handler was
    installed before) when it ends. Signal handlers can only be set from the main thread;
    elsewhere the block runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    arrived: list[tuple[int, FrameType | None]] = []
    previous = {sig: signal.signal(sig, lambda signum, frame: arrived.append((signum, frame)))
                for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for signum, frame in arrived:
            handler = previous[signal.Signals(signum)]
            if callable(handler):
                handler(signum, frame)
            elif handler == signal.SIG_DFL:
                os.kill(os.getpid(), signum)


def apply_config(config: Config) -> list[str]:
    """Make ``config`` its queue group's applied config on its Redis unless it already is; what
    that changed, one line per field (none when it already was). The group's processes follow the
    config applied in Redis, not their file, and a stack's Redis keeps it between runs: without
    this, an edited fairness.yaml would be ignored by the next ``stack up``. StackError with the
    refusal when the config would leave jobs under a class (or tier) it no longer names, or when
    it shards the queue (the stack runs one queue group)."""
    if config.redis.shards > 1:
        raise StackError(f"{config.source or 'the config'}: redis.shards is {config.redis.shards}, and fairctl stack "
                         "runs one queue group: drop redis.shards for the stack (docs/deployment.md runs a sharded "
                         "queue on your own Redis)")
    client = redis_client(config.redis.url)
    try:
        queue = open_queue(config, client)
        (group,) = queue.groups()
        applied = group.read_applied()
        if applied is not None and not differences(applied.config, config):
            return []
        (outcome,) = queue.apply(config, expect=applied.fingerprint if applied else "").shards.values()
    except ConfigRefused as exc:
        raise StackError(f"{config.source or 'the config'}: {exc}. The stack's Redis keeps its jobs between runs: "
                         "start the stack with the config it ran before, then apply this one with fairctl config "
                         "apply FILE --redis-url URL (the stack's Redis) and the moves it names") from None
    finally:
        client.close()
    first = "" if applied is not None else f" (the first of queue group {config.redis.prefix})"
    return [f"config v{outcome.version} applied{first}", *outcome.changes]


def _alertmanager_binary() -> str:
    """Debian names it prometheus-alertmanager; upstream archives, alertmanager."""
    try:
        return find_binary("prometheus-alertmanager", ALERTMANAGER_HINT)
    except FileNotFoundError:
        return find_binary("alertmanager", ALERTMANAGER_HINT)
