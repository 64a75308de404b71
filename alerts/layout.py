"""Where the generated files go, relative to the output root (the repository by default)."""

from __future__ import annotations

from pathlib import PurePosixPath

GENERATED_DIR = PurePosixPath("alerts/generated")
RULES_FILE = PurePosixPath("fairctl-rules.yml")
TESTS_DIR = PurePosixPath("tests")
RUNBOOKS_DIR = PurePosixPath("runbooks")


def runbook_file(alert: str) -> PurePosixPath:
    return RUNBOOKS_DIR / f"{alert}.md"


# The Grafana dashboards the alerts link to (dashboards/ builds them under these uids): the
# overview, with its class variable, and the runbooks, one panel per alert.
OVERVIEW_UID = "fairctl-overview"
RUNBOOKS_UID = "fairctl-runbooks"
QUEUE_VAR = "queue"
GROUP_VAR = "group"  # the dashboards' queue group variable, which alert links set too
