"""The suite's own parallelism holds: ``--dist loadgroup`` keeps a group on one worker with the
pytest and pytest-xdist installed. The suite's modules share module-scoped servers and the stack
modules share ports, so a pair of versions that splits groups silently (pytest-xdist 3.8 under
pytest 9.2 does) would start servers twice and race stacks; this fails first, naming the cause."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

GROUPED = '''
import pytest

pytestmark = pytest.mark.xdist_group("one")


@pytest.mark.parametrize("n", range(4))
def test_grouped(n):
    pass
'''


def test_a_group_runs_on_one_worker(tmp_path: Path) -> None:
    for name in ("test_a.py", "test_b.py"):
        (tmp_path / name).write_text(GROUPED)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-v", "-p", "no:cacheprovider",
         str(tmp_path)], check=False, capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert result.returncode == 0, result.stdout[-2000:]
    workers = set(re.findall(r"\[(gw\d+)\] .*PASSED", result.stdout))
    assert len(workers) == 1, ("tests of one xdist_group ran on several workers: this pytest and pytest-xdist "
                               "do not keep groups together (see the pin in pyproject.toml)\n" + result.stdout[-2000:])
