"""scripts/setup.sh, run in a copy of the repository with stand-ins for apt-get, fuser, sleep and
Python on an otherwise bare PATH: what it would run, and what it says, when it installs packages."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RECORDER = '#!/bin/sh\necho "$(basename "$0") $*" >> "{log}"\n'


def run_setup(tmp_path: Path, *, held: int | None) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """Run setup.sh with none of its packages installed; ``held``: how many fuser checks find the
    package locks held (None: no fuser on PATH)."""
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "setup.sh", repo / "scripts" / "setup.sh")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls.log"
    log.touch()
    for tool in ("dirname", "id", "env", "ln", "basename", "cat"):
        (bin_dir / tool).symlink_to(shutil.which(tool))
    recorder = RECORDER.format(log=log)
    for name in ("apt-get", "sleep"):
        (bin_dir / name).write_text(recorder)
    (bin_dir / "python3").write_text("#!/bin/sh\nexit 0\n")  # passes the version check
    if held is not None:
        count = tmp_path / "fuser.count"
        count.write_text("0")
        (bin_dir / "fuser").write_text(
            f'#!/bin/sh\necho "fuser $*" >> "{log}"\n'
            f'n=$(cat "{count}"); echo $((n + 1)) > "{count}"\n'
            f'[ "$n" -lt {held} ]\n')
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text(recorder)
    for path in bin_dir.iterdir():
        path.chmod(0o755)
    (venv / "bin" / "python").chmod(0o755)
    env = {"PATH": str(bin_dir), "VIRTUAL_ENV": str(venv), "HOME": str(tmp_path)}
    if os.getuid() != 0:  # setup.sh runs apt-get through sudo: a stand-in that runs it
        (bin_dir / "sudo").write_text('#!/bin/sh\nexec "$@"\n')
        (bin_dir / "sudo").chmod(0o755)
    result = subprocess.run([shutil.which("bash"), str(repo / "scripts" / "setup.sh")], env=env,
                            capture_output=True, text=True, timeout=60)
    return result, log.read_text().splitlines()


def apt_calls(calls: list[str]) -> list[str]:
    return [c for c in calls if c.startswith("apt-get ")]


def test_apt_get_waits_for_the_package_locks(tmp_path: Path) -> None:
    result, calls = run_setup(tmp_path, held=None)
    assert result.returncode == 0, result.stderr
    update, install = apt_calls(calls)
    for call in (update, install):
        assert "-o DPkg::Lock::Timeout=600" in call, call
    assert " update -q" in update and " install -y" in install and "redis-server" in install
    assert "waiting" not in result.stderr


def test_a_held_lock_is_waited_for_with_a_message(tmp_path: Path) -> None:
    result, calls = run_setup(tmp_path, held=3)
    assert result.returncode == 0, result.stderr
    assert ("setup: waiting for another apt-get/dpkg to finish (up to 10 minutes)...\n"
            in result.stderr), result.stderr
    assert result.stderr.count("setup: waiting") == 1
    first_apt = calls.index(apt_calls(calls)[0])
    assert [c.split()[0] for c in calls[:first_apt]] == ["fuser", "sleep", "fuser", "sleep", "fuser", "sleep",
                                                          "fuser"]
    assert "/var/lib/dpkg/lock-frontend" in calls[0]
    assert len(apt_calls(calls)) == 2
    assert calls[-1].startswith("python -m pip install")


def test_a_lock_held_for_ten_minutes_gives_up_with_one_line(tmp_path: Path) -> None:
    result, calls = run_setup(tmp_path, held=10_000)
    assert result.returncode == 1
    assert not apt_calls(calls)
    assert sum(1 for c in calls if c.startswith("sleep")) == 120  # 5 s each
    assert result.stderr.splitlines()[-1] == (
        "setup: another apt-get/dpkg still holds the package locks after 10 minutes; "
        "run this again when it is done")
