"""``fairctl explain JOB_ID`` and ``fairctl explain --tenant T``: where a job is and why it waits,
or where a tenant stands, in words and figures (:mod:`fairness_core.explain` reads them)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from fairness_core.explain import MAX_JOBS, MAX_KEYS, JobExplanation, TenantExplanation, explain_job, explain_tenant

from .commands import Command, argument
from .common import check_classes, clear_errors, config_option, connect, fail, load, redis_url_option


@click.command(cls=Command)
@argument("job_id", metavar="[JOB_ID]", required=False,
          help="Job id, as enqueue printed it (on a sharded queue, shard:id). Without it, --tenant is explained.")
@click.option("--tenant", metavar="TENANT",
              help="With JOB_ID: read only this tenant's sub-queues to find the job. Alone: the tenant's standing.")
@click.option("--class", "classes", metavar="CLASS", multiple=True,
              help="Only this class (repeat for more): the sub-queues read, or the classes shown.")
@click.option("--max-keys", metavar="N", type=click.IntRange(1, 10_000_000), default=MAX_KEYS,
              help="Tenant sub-queues the search of a queued job reads at most.")
@click.option("--max-jobs", metavar="N", type=click.IntRange(1, 1_000_000_000), default=MAX_JOBS,
              help="Queued, retrying and dead jobs the search reads at most.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@config_option
@redis_url_option
def explain(job_id: str | None, tenant: str | None, classes: tuple[str, ...], max_keys: int, max_jobs: int,
            as_json: bool, config: Path, redis_url: str | None) -> None:
    """Say where a job is and why it has not run yet, or where a tenant stands.

    A job is queued, delayed (waiting for its retry backoff), leased (by which worker, until when),
    dead (with its error), done (its id was issued and it is nowhere: acked, or its dead letter
    dropped) or unknown (never issued). While it waits, every reason that holds it is named with
    its figures: its class paused, its backoff, its tenant's or account's cap or dispatch rate (with
    the config field that sets it), another class's reserved_slots, a busy fleet, no live worker;
    else its place in its class's fair order and a rough estimate of its wait, with its basis.

    Queued jobs have no index by id: the search reads the sub-queues of the tenants queued in each
    class (never KEYS), from their tails, and stops at --max-keys sub-queues and --max-jobs jobs
    read, saying so. --tenant (or --class) reads only those sub-queues. Everything is read, nothing
    written; a job that moves while it is looked for may be reported as done: run it again."""
    if job_id is None and tenant is None:
        fail("JOB_ID", "give a job id, or --tenant T for a tenant's standing")
    cfg = load(config, redis_url)
    check_classes(cfg, list(classes), "--class")
    queue = connect(cfg)
    with clear_errors(**{"job id": "JOB_ID", "tenant": "--tenant", "class": "--class"}):
        if job_id is not None:
            found = explain_job(queue, job_id, tenant=tenant, classes=classes or None, max_keys=max_keys,
                                max_jobs=max_jobs)
            click.echo(json.dumps(found.as_json(), indent=2, ensure_ascii=False) if as_json else _job_text(found))
        else:
            assert tenant is not None
            standing = explain_tenant(queue, tenant, classes=classes or None)
            click.echo(json.dumps(standing.as_json(), indent=2, ensure_ascii=False) if as_json
                       else _tenant_text(standing))


def _job_text(found: JobExplanation) -> str:
    lines = [found.summary]
    job = found.job
    if job:
        lines.append(f"  task {job['task']}, tier {job['tier']}, reason {job['reason']!r}, attempts {job['attempts']}")
    if found.reasons:
        lines.append("why it waits:" if found.state in ("queued", "delayed") else "why:")
        lines += [f"  - {r.code}: {r.text}" for r in found.reasons]
    if found.place is not None and not any(r.code == "turn" for r in found.reasons):
        lines.append(f"fair order: {found.place.text}")
    if found.estimate is not None and not any(r.code == "turn" for r in found.reasons):
        lines.append(f"estimate, once nothing holds it: {found.estimate.text}")
    if found.search is not None and not found.search.complete and found.state != "not_found":
        lines.append(f"search: {found.search.text}")
    return "\n".join(lines)


def _tenant_text(standing: TenantExplanation) -> str:
    account = f" (account {standing.account})" if standing.account is not None else ""
    lines = [f"tenant {standing.tenant}{account}, tier {standing.tier}: {standing.running} leased, all classes"]
    lines.append("limits:")
    lines += [f"  {lim.name}: {lim.text} ({lim.field})" for lim in standing.limits]
    if not standing.classes:
        lines.append("nothing queued or leased in any class")
    for row in standing.classes:
        lines.append(f"{row.queue}{f' (group {row.group})' if row.group else ''}: {row.queued} queued, "
                     f"{row.inflight} leased")
        lines += [f"  - {r.code}: {r.text}" for r in row.reasons]
        if row.place is not None and not any(r.code == "turn" for r in row.reasons):
            lines.append(f"  fair order: {row.place.text}")
    return "\n".join(lines)
