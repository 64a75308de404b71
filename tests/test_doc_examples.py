"""Every code block a user would paste from README.md and docs/*.md runs as written.

Each document's blocks run in order in one fresh directory, as a user following the page would,
against a throwaway redis-server: the directory holds a ``fairness.yaml`` (the example config with
``redis.url`` pointing at that server and the exporter on a free loopback port), and
``FAIRCTL_REDIS_URL`` names the server too. What runs:

- ``sh``/``bash``/``shell`` blocks: each command (a line; ``\\`` continues it) with bash, fairctl on
  PATH; it must exit 0. ``fairctl worker`` and ``fairctl exporter`` run until stopped: they must
  still be running after a few seconds and exit 0 on SIGTERM, as the docs promise.
- ``python`` blocks: executed as a script; ``python file=PATH`` blocks are written to ``PATH``
  (a module the next blocks use).
- ``yaml`` blocks with ``classes:`` are a ``fairness.yaml``: they must load.
- Other blocks (output, diagrams, PromQL, Prometheus config) are not commands.

A block that cannot run here (docker, kubectl, the test suite itself, minutes-long runs) is marked
on the line right before it with ``<!-- not run: why -->``; an unmarked block that fails fails the
test. After each document no job may have failed (a handler that cannot run fails every job,
and after max_attempts dead-letters it).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
import yaml

from fairness_core import Queue, load_config
from fairness_stack.servers import RedisServer

from .conftest import EXAMPLE_CONFIG

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELLS = {"sh", "bash", "shell"}
MARKER = re.compile(r"^<!-- not run: (?P<why>\S.*?) -->$")
UNTIL_STOPPED = ("fairctl worker", "fairctl exporter")  # run until SIGTERM/SIGINT
RUNNING_FOR_S = 3.0
COMMAND_TIMEOUT_S = 120


@dataclass(frozen=True)
class Block:
    document: Path
    line: int  # of the opening fence, 1-based
    info: str
    text: str
    not_run: str | None  # the marker's reason

    @property
    def language(self) -> str:
        return self.info.split()[0] if self.info else ""

    @property
    def file(self) -> str | None:
        found = re.search(r"\bfile=(\S+)", self.info)
        return found.group(1) if found else None

    def where(self) -> str:
        return f"{self.document.relative_to(ROOT)}:{self.line}"


def blocks(document: Path) -> list[Block]:
    lines = document.read_text(encoding="utf-8").splitlines()
    out, i = [], 0
    while i < len(lines):
        opening = re.match(r"^```(.*)$", lines[i])
        if opening:
            end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
            marker = MARKER.match(lines[i - 1].strip()) if i else None
            out.append(Block(document, i + 1, opening.group(1).strip(), "\n".join(lines[i + 1:end]) + "\n",
                             marker.group("why") if marker else None))
            i = end
        i += 1
    return out


def commands(text: str) -> list[str]:
    """The block's commands: one a line, ``\\`` continuing it; blank and comment lines skipped."""
    out: list[str] = []
    pending = ""
    for line in text.splitlines():
        pending += line
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
            continue
        if pending.strip() and not pending.lstrip().startswith("#"):
            out.append(pending.strip())
        pending = ""
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def server() -> object:
    with RedisServer() as running:
        yield running


def _environment(url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "FAIRCTL_CONFIG"}
    fairctl = shutil.which("fairctl") or str(Path(sys.executable).parent / "fairctl")
    env["PATH"] = os.pathsep.join([str(Path(fairctl).parent), str(Path(sys.executable).parent), env.get("PATH", "")])
    env["FAIRCTL_REDIS_URL"] = url
    env["CELERY_BROKER_URL"] = url  # docs/watching.md's Celery app, as its users set it
    env["PYTHONUNBUFFERED"] = "1"
    env.pop("PYTHONPATH", None)  # the examples must not need it
    return env


def _run_until_stopped(command: str, cwd: Path, env: dict[str, str], where: str) -> None:
    proc = subprocess.Popen(["bash", "-c", f"exec {command}"], cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        time.sleep(RUNNING_FOR_S)
        early = proc.poll()
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert early is None, f"{where}: `{command}` exited {early} within {RUNNING_FOR_S}s:\n{output[-3000:]}"
    assert proc.returncode == 0, f"{where}: `{command}` exited {proc.returncode} on SIGTERM:\n{output[-3000:]}"


def _run(block: Block, cwd: Path, env: dict[str, str]) -> None:
    where = block.where()
    if block.file is not None:
        target = cwd / block.file
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(block.text, encoding="utf-8")
        return
    if block.language == "python":
        script = cwd / f"example_{block.line}.py"
        script.write_text(block.text, encoding="utf-8")
        proc = subprocess.run([sys.executable, script.name], cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=COMMAND_TIMEOUT_S, check=False)
        assert proc.returncode == 0, f"{where}: the Python example failed:\n{proc.stdout[-2000:]}{proc.stderr[-3000:]}"
        return
    if block.language == "yaml":
        if "classes:" in block.text:
            config = cwd / f"example_{block.line}.yaml"
            config.write_text(block.text, encoding="utf-8")
            load_config(config)
        return
    if block.language not in SHELLS:
        return
    for command in commands(block.text):
        if command.startswith(UNTIL_STOPPED):
            _run_until_stopped(command, cwd, env, where)
            continue
        proc = subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=COMMAND_TIMEOUT_S, check=False)
        assert proc.returncode == 0, (f"{where}: `{command}` exited {proc.returncode} (mark the block "
                                      f"<!-- not run: why --> if it cannot run here):\n"
                                      f"{proc.stdout[-2000:]}{proc.stderr[-3000:]}")


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_documents_code_blocks_run_as_written(document: Path, server: RedisServer, tmp_path: Path) -> None:
    client = redis.Redis.from_url(server.url)
    client.flushall()
    example = yaml.safe_load(EXAMPLE_CONFIG.read_text(encoding="utf-8"))
    example["redis"]["url"] = server.url
    example.setdefault("exporter", {})["listen"] = f"127.0.0.1:{free_port()}"
    (tmp_path / "fairness.yaml").write_text(yaml.safe_dump(example, sort_keys=False), encoding="utf-8")
    env = _environment(server.url)
    ran = 0
    for block in blocks(document):
        if block.not_run is None:
            _run(block, tmp_path, env)
            ran += 1
    scheduler = Queue(load_config(tmp_path / "fairness.yaml"), client)
    failed = {q: c.counters["failed"] + c.counters["dead"] for q, c in scheduler.snapshot().classes.items()}
    assert not any(failed.values()), (f"{document.name}: a handler failed jobs {failed}; dead letters: "
                                      f"{scheduler.dead_letters()}")


def test_markers_sit_on_blocks_and_give_a_reason() -> None:
    """A ``not run`` marker names why, and is followed by a block (a stray one would silently mark
    nothing); only blocks a user runs are marked."""
    for document in DOCUMENTS:
        lines = document.read_text(encoding="utf-8").splitlines()
        for i, line in enumerate(lines):
            if "<!-- not run" in line:
                assert MARKER.match(line.strip()), f"{document.name}:{i + 1}: write <!-- not run: why -->"
                assert lines[i + 1].startswith("```"), f"{document.name}:{i + 1}: the marker must sit right before a block"
        for block in blocks(document):
            if block.not_run is not None:
                assert block.language in SHELLS | {"python"}, f"{block.where()}: only commands need a marker"


def test_the_readme_set_up_commands_stay_as_they_are() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "bash scripts/setup.sh && .venv/bin/fairctl simulate\n" in text
    assert "bash scripts/setup.sh && .venv/bin/python -m pytest -q\n" in text
