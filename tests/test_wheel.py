"""An installed fairctl needs no checkout: the wheel, in a fresh virtualenv, simulates (on the base
install) and generates (with the generate extra).

The scenarios and the example config ship as package data, so this catches a file that only a
checkout has (a path built from ``__file__`` up into the repository, a data file left out of
``package-data``) before a user's ``pip install fairctl`` does.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from .conftest import ROOT
from .test_layers import INSTALLED_TOP_LEVEL

pytestmark = pytest.mark.slow  # builds the wheel and installs it in a fresh virtualenv


def run(args: list[str | Path], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{args} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def test_the_wheel_in_a_fresh_virtualenv_simulates_and_generates(tmp_path: Path) -> None:
    # Build from a copy of the checkout's files (git's, and new ones not ignored): the checkout is
    # not touched even if setup.py's scratch space ever lands back in the source tree.
    source = tmp_path / "source"
    files = run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], ROOT).stdout.split("\0")
    for name in filter(lambda n: n and (ROOT / n).exists(), files):
        target = source / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, target, follow_symlinks=False)
    dist = tmp_path / "dist"
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", dist, source], tmp_path)
    (wheel,) = dist.glob("fairctl-*.whl")
    with zipfile.ZipFile(wheel) as built:
        tops = {name.split("/")[0] for name in built.namelist()}
    assert sorted(t for t in tops if not t.endswith(".dist-info")) == INSTALLED_TOP_LEVEL
    left = [p.name for p in source.iterdir() if p.name == "build" or p.name.endswith(".egg-info")]
    assert left == [], f"the build left {left} in the source tree (setup.py puts setuptools' scratch elsewhere)"

    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check", wheel], tmp_path)

    elsewhere = tmp_path / "elsewhere"  # no fairness.yaml, no scenarios/, no checkout on sys.path
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FAIRCTL_", "PYTHON"))}
    env["PATH"] = f"{env_dir / 'bin'}{os.pathsep}{env['PATH']}"
    where = run([python, "-c", "import fairness_sim; print(fairness_sim.__file__)"], elsewhere, env).stdout
    assert str(env_dir) in where, f"fairness_sim imported from {where}, not from the virtualenv"

    simulated = run([env_dir / "bin" / "fairctl", "simulate", "--policy", "fifo", "--duration", "30m"], elsewhere, env)
    assert "policy fifo" in simulated.stdout and "jobs:high" in simulated.stdout
    assert "QueueStarving" in simulated.stdout  # promtool on PATH: the storm's alerts were evaluated

    # The base install has no runbook templating: generate names the extra, then works with it.
    bare = subprocess.run([env_dir / "bin" / "fairctl", "generate", "--out", elsewhere / "out"], cwd=elsewhere, env=env,
                          capture_output=True, text=True, timeout=600)
    assert bare.returncode == 1 and bare.stderr.strip().endswith("pip install 'fairctl[generate]'"), bare.stderr
    run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check", f"{wheel}[generate]"], tmp_path)
    generated = run([env_dir / "bin" / "fairctl", "generate", "--out", elsewhere / "out"], elsewhere, env)
    assert "example config" in generated.stderr  # said which config it used
    assert (elsewhere / "out" / "alerts" / "generated" / "fairctl-rules.yml").is_file()
    assert (elsewhere / "out" / "dashboards" / "generated").is_dir()
