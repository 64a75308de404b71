"""What ships reads on its own: no file a user gets or is shown cites documents that ship nowhere
(internal design documents, numbered documents, issue numbers), and every relative link of the
Markdown documentation points at a file that exists."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from .conftest import ROOT

# Tests and CI plumbing are not shown to users; everything else tracked by git is (sources, docs,
# generated rules, runbooks, dashboards, deployment files, scenarios, scripts).
NOT_SHIPPED = ("tests/", ".ci/")

FORBIDDEN = (
    (re.compile(r"DESIGN\.md"), "an internal design document"),
    (re.compile(r"document 00", re.IGNORECASE), "a numbered internal document"),
    (re.compile(r"[Dd]ocument [0-9]{3}"), "a numbered internal document"),
    (re.compile(r"issue #?[0-9]", re.IGNORECASE), "an issue number"),
)

DOCS = ("README.md", "SECURITY.md", "BENCHMARKS.md", "docs/*.md")
LINK = re.compile(r"\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
INLINE_CODE = re.compile(r"`[^`\n]*`")


def shipped_files() -> list[Path]:
    """Every file git tracks (or would track: new files not yet added count too) outside the
    tests and CI, that exists in the work tree and is not a link to another such file."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                                cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the shipped files cannot be listed")
    names = sorted({n for n in listed.decode().split("\0") if n and not n.startswith(NOT_SHIPPED)})
    return [ROOT / n for n in names if (ROOT / n).is_file() and not (ROOT / n).is_symlink()]


def test_the_walk_covers_what_ships() -> None:
    found = {p.relative_to(ROOT).as_posix() for p in shipped_files()}
    for expected in ("README.md", "Dockerfile", "pyproject.toml", "compose/docker-compose.yml",
                     "alerts/generated/fairctl-rules.yml", "alerts/templates/runbook.md.j2",
                     "fairness_core/keys.py", "fairness_sim/scenarios/marketing-storm.yaml", "scripts/setup.sh"):
        assert expected in found, f"{expected} is not among the files the scan reads"
    assert not any(name.startswith(NOT_SHIPPED) for name in found)


def test_nothing_shipped_cites_documents_or_issues_that_ship_nowhere() -> None:
    hits = []
    for path in shipped_files():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue  # binary: nothing a reader sees as text
        for number, line in enumerate(text.splitlines(), 1):
            for pattern, what in FORBIDDEN:
                if match := pattern.search(line):
                    hits.append(f"{path.relative_to(ROOT)}:{number}: {match.group(0)!r} cites {what}: {line.strip()}")
                    break
    assert not hits, "say it in the project's own words, or cite a public source:\n" + "\n".join(hits)


def markdown_links(path: Path) -> list[tuple[int, str]]:
    """(line, target) of every link in ``path`` outside code blocks and code spans."""
    text = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), path.read_text(encoding="utf-8"))
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        out.extend((number, m.group(1)) for m in LINK.finditer(INLINE_CODE.sub("``", line)))
    return out


def documentation() -> list[Path]:
    return sorted(p for pattern in DOCS for p in ROOT.glob(pattern))


def test_the_documentation_exists() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in documentation()}
    for page in ("README.md", "docs/scheduler.md", "docs/configuration.md", "docs/exporter.md", "docs/alerts.md",
                 "docs/dashboards.md", "docs/simulation.md", "docs/drills.md", "docs/deployment.md",
                 "docs/failure-semantics.md", "docs/benchmarks.md", "docs/architecture.md"):
        assert page in names


def test_every_relative_link_of_the_documentation_points_at_a_file() -> None:
    broken = []
    for page in documentation():
        for number, target in markdown_links(page):
            if re.match(r"[a-z][a-z0-9+.-]*:", target, re.IGNORECASE) or target.startswith("#"):
                continue  # a URL (https:, mailto:) or an anchor in the same page
            local = target.split("#", 1)[0]
            if not (page.parent / local).exists():
                broken.append(f"{page.relative_to(ROOT)}:{number}: {target}")
    assert not broken, "links to files that do not exist:\n" + "\n".join(broken)


def test_the_link_reader_finds_links_and_skips_code(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("See [a](a.md) and [`b`](../b.md#x).\n\n```\n[not](c.md)\n```\n`[nor](d.md)` [e](https://e/)\n")
    assert markdown_links(page) == [(1, "a.md"), (1, "../b.md#x"), (6, "https://e/")]
