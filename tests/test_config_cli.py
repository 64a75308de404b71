"""fairctl config show|diff|apply against a real redis-server: outputs and exit codes, a live
refusal that changes nothing, a move that loses no job and keeps ids and ages, tier moves, and an
apply that lost a race to another one."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml
from click.testing import CliRunner, Result

from fairctl import config_commands
from fairctl.cli import app
from fairness_core import load_config
from fairness_core.scheduler import Scheduler
from fairness_core.config_store import Applied, shared_text
from fairness_stack.servers import RedisServer

from .support import write_config

runner = CliRunner()


def invoke(*args: str | Path) -> Result:
    return runner.invoke(app, [str(a) for a in args])


@pytest.fixture
def config_a(redis_server: RedisServer, tmp_path: Path) -> Path:
    return write_config(tmp_path, redis_server.url)[0]


def variant(path: Path, name: str, change: Any) -> Path:
    """``path``'s config with ``change(data)`` made, written beside it as ``name``."""
    data = yaml.safe_load(path.read_text())
    change(data)
    out = path.with_name(name)
    out.write_text(yaml.safe_dump(data))
    return out


def without_low(data: dict[str, Any]) -> None:
    """No jobs:low: its tasks fall through to the catch-all rule."""
    data["classes"] = [c for c in data["classes"] if c["name"] != "jobs:low"]
    data["classification"] = [r for r in data["classification"] if r["class"] != "jobs:low"]


def without_pro(data: dict[str, Any]) -> None:
    del data["tenants"]["tiers"]["pro"]


def reweighted(data: dict[str, Any]) -> None:
    data["classes"][0]["weight"] = 60


def test_show_diff_and_apply_outputs_and_exit_codes(config_a: Path, client: redis.Redis) -> None:
    none = invoke("config", "show", "--config", config_a)
    assert none.exit_code == 1 and "has no applied config yet" in none.output

    first = invoke("config", "diff", config_a)
    assert first.exit_code == 1 and "would be its first and start the group" in first.stdout

    applied = invoke("config", "apply", config_a)
    assert applied.exit_code == 0, applied.output
    assert "would be its first" in applied.stdout and "applied v1 to queue group" in applied.stdout

    shown = invoke("config", "show", "--config", config_a)
    assert shown.exit_code == 0, shown.output
    config = load_config(config_a)
    assert f"# queue group: {config.redis.prefix}\n# version: 1\n# fingerprint: " in shown.stdout
    assert "# moves: none\n# names stored as codes: 17\n" in shown.stdout and shown.stdout.endswith(shared_text(config))
    assert "redis://" not in shown.stdout  # redis.url is process-local: never stored

    same = invoke("config", "diff", config_a)
    assert same.exit_code == 0 and same.stdout.rstrip().endswith("no changes")
    assert "nothing to apply" in invoke("config", "apply", config_a).stdout
    assert Scheduler(config, client).read_applied().version == 1  # type: ignore[union-attr]

    heavier = variant(config_a, "heavier.yaml", reweighted)
    differs = invoke("config", "diff", heavier)
    assert differs.exit_code == 1 and "1 change(s)\n  classes.jobs:high.weight: 70 -> 60\n" in differs.stdout
    dry = invoke("config", "apply", heavier, "--dry-run")
    assert dry.exit_code == 0 and "dry run: nothing applied" in dry.stdout
    assert Scheduler(config, client).read_applied().version == 1  # type: ignore[union-attr]
    done = invoke("config", "apply", heavier)
    assert done.exit_code == 0 and "applied v2" in done.stdout and "moved 0 job(s)" in done.stdout
    assert Scheduler(config, client).sync().config.classes[0].weight == 60

    other = variant(config_a, "other.yaml", lambda d: d["redis"].update(prefix=d["redis"]["prefix"] + "-other"))
    assert "would be its first" in invoke("config", "diff", other).stdout  # another prefix, another group


def test_bad_files_and_moves_exit_2_naming_the_argument(config_a: Path) -> None:
    broken = variant(config_a, "broken.yaml", lambda d: d["classes"][0].update(weight=0))
    bad = invoke("config", "apply", broken)
    assert bad.exit_code == 2 and "FILE:" in bad.stderr and "classes[0].weight" in bad.stderr
    for args, named in ((["--move", "jobs:low"], "--move: expected OLD=NEW"),
                        (["--move-tier", "=pro"], "--move-tier: expected OLD=NEW"),
                        (["--move", "jobs:high=jobs:medium"], "--move jobs:high=jobs:medium: 'jobs:high' is still")):
        result = invoke("config", "apply", config_a, *args)
        assert result.exit_code == 2 and named in result.stderr, result.output
        assert result.stdout == ""  # refused before reading or printing anything


def test_removed_class_is_refused_until_moved_and_no_job_is_lost(config_a: Path, client: redis.Redis,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    config = load_config(config_a)
    producer = Scheduler(config, client)
    ids = [producer.enqueue("newsletter", f"tenant-{i % 3}") for i in range(30)]
    time.sleep(0.3)
    before = producer.snapshot().classes["jobs:low"]
    assert before.depth == 30
    version = producer.read_applied().version  # type: ignore[union-attr]
    b = variant(config_a, "b.yaml", without_low)

    refused = invoke("config", "apply", b)
    assert refused.exit_code == 1
    assert "class 'jobs:low' still holds 30 job(s)" in refused.stderr and "--move jobs:low=CLASS" in refused.stderr
    assert producer.read_applied().version == version  # type: ignore[union-attr]
    assert producer.snapshot().classes["jobs:low"].depth == 30

    moved = invoke("config", "apply", b, "--move", "jobs:low=jobs:medium")
    assert moved.exit_code == 0, moved.output
    assert "moved 30 job(s) (jobs:low -> jobs:medium)" in moved.stdout
    caplog.clear()
    after = Scheduler(load_config(b), client)
    snapshot = after.snapshot()
    # The file is what is applied: the moves the group records are no difference to warn of.
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    assert snapshot.classes["jobs:medium"].depth == 30 and not snapshot.unconfigured
    assert snapshot.classes["jobs:medium"].oldest_age >= before.oldest_age
    assert sorted(lease.job_id for lease in after.pop(100)) == sorted(ids)
    assert "# moves: jobs:low -> jobs:medium" in invoke("config", "show", "--config", b).stdout


def test_a_move_out_of_a_paused_class_is_refused_unless_its_target_is_paused_too(
        config_a: Path, client: redis.Redis) -> None:
    """The pause does not carry over with the move (it would hold the target's own jobs too), and
    the moved jobs must not run at once behind the operator's back: the move waits for a choice."""
    config = load_config(config_a)
    producer = Scheduler(config, client)
    for i in range(5):
        producer.enqueue("newsletter", f"tenant-{i}")
    producer.pause("jobs:low")
    b = variant(config_a, "b.yaml", without_low)
    refused = invoke("config", "apply", b, "--move", "jobs:low=jobs:medium")
    assert refused.exit_code == 1, refused.output
    assert ("--move jobs:low=jobs:medium: jobs:low is paused and jobs:medium is not, so its jobs would run at once; "
            "resume jobs:low first to let them run, or pause jobs:medium too to keep them waiting") in refused.stderr
    assert producer.snapshot().classes["jobs:low"].depth == 5 and producer.pop(10) == []
    producer.pause("jobs:medium")
    moved = invoke("config", "apply", b, "--move", "jobs:low=jobs:medium")
    assert moved.exit_code == 0 and "moved 5 job(s)" in moved.stdout, moved.output
    after = Scheduler(load_config(b), client)
    assert after.pop(10) == [], "the target is paused: the moved jobs wait"
    after.resume("jobs:medium")
    assert len(after.pop(10)) == 5


def test_removed_tier_is_refused_until_moved(config_a: Path, client: redis.Redis) -> None:
    Scheduler(load_config(config_a), client).enqueue("newsletter", "acme", tier="pro")
    c = variant(config_a, "c.yaml", without_pro)

    refused = invoke("config", "apply", c)
    assert refused.exit_code == 1 and "tier 'pro'" in refused.stderr and "--move-tier pro=TIER" in refused.stderr
    unknown = invoke("config", "apply", c, "--move-tier", "pro=gold")
    assert unknown.exit_code == 2 and "'gold' is not in the config" in unknown.stderr
    moved = invoke("config", "apply", c, "--move-tier", "pro=enterprise")
    assert moved.exit_code == 0, moved.output
    assert "(tier pro -> enterprise)" in moved.stdout
    assert Scheduler(load_config(c), client).pop(1)[0].tenant == "acme"


def test_an_apply_between_the_diff_and_the_apply_wins(config_a: Path, client: redis.Redis,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The diff shown is the one applied, or nothing is: another apply in between is a conflict,
    and the loser names the config that won."""
    config = load_config(config_a)
    Scheduler(config, client).sync()
    heavier = variant(config_a, "heavier.yaml", reweighted)
    read = config_commands._read

    def read_then_someone_applies(scheduler: Scheduler) -> Applied | None:
        seen = read(scheduler)
        if seen is not None and seen.version == 1:  # once, between the diff and the apply
            theirs = variant(config_a, "theirs.yaml", lambda d: d["classes"][1].update(weight=25))
            Scheduler(config, client).apply(load_config(theirs))
        return seen

    monkeypatch.setattr(config_commands, "_read", read_then_someone_applies)
    lost = invoke("config", "apply", heavier)
    assert lost.exit_code == 1, lost.output
    won = Scheduler(config, client).read_applied()
    assert won is not None and won.version == 2
    assert (f"another apply won: config v2 (fingerprint {won.fingerprint}) is applied to queue group "
            f"{config.redis.prefix}; run `fairctl config diff` and apply again") in lost.stderr
    now = Scheduler(config, client).sync().config
    assert (now.classes[0].weight, now.classes[1].weight) == (70, 25)  # theirs, not ours


def test_a_move_takes_the_retries_waiting_in_the_removed_class_keeping_their_due_time(
        tmp_path: Path, redis_server: RedisServer, client: redis.Redis) -> None:
    """Retries waiting for their backoff move with the queued jobs: left behind they would show as
    an unserved class until their backoff ends (minutes at a long one)."""
    config_a, config = write_config(tmp_path, redis_server.url, leases={"retry_backoff": "10m"})
    producer = Scheduler(config, client)
    for i in range(6):
        producer.enqueue("newsletter", f"tenant-{i % 3}")
    producer.enqueue("newsletter", "tenant-0")  # stays queued
    leases = producer.pop(6, classes=["jobs:low"])
    assert len(leases) == 6 and all(producer.nack(lease, "boom") == "retry" for lease in leases)
    delayed = producer.keys.delayed
    due = sorted(score for _, score in client.zrange(delayed, 0, -1, withscores=True))
    b = variant(config_a, "b.yaml", without_low)
    assert "class 'jobs:low' still holds 7 job(s)" in invoke("config", "apply", b).stderr

    moved = invoke("config", "apply", b, "--move", "jobs:low=jobs:medium")
    assert moved.exit_code == 0, moved.output
    assert "moved 7 job(s) (jobs:low -> jobs:medium)" in moved.stdout
    after = Scheduler(load_config(b), client)
    snapshot = after.snapshot()
    assert not snapshot.unconfigured and snapshot.classes["jobs:medium"].delayed == 6
    kept = client.zrange(delayed, 0, -1, withscores=True)
    assert sorted(score for _, score in kept) == due  # each keeps its due time
    assert all(member.decode().startswith("jobs:medium") for member, _ in kept)
