"""``fairctl simulate --report``: one self-contained HTML page with the comparison's plots.

The plots are drawn by matplotlib (a maintained plotting library, not hand-made SVG) and inlined
as SVG, so the page needs no network, no JavaScript and no other file: it can be attached to an
incident review as it is. Per policy: each class's oldest age against its SLO, the realised share
against the weight, the quiet tenants' oldest age against the noisy ones', and the alert timeline.
"""

from __future__ import annotations

import html
import io
import math
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("svg")  # no display, no GUI toolkit: the figures only become SVG text
from matplotlib.figure import Figure  # noqa: E402  (after choosing the backend)

from fairness_core.ages import human  # noqa: E402

from .policies import Outcome, alert_label  # noqa: E402
from .scenario import Scenario  # noqa: E402
from .simulator import PolicyRun  # noqa: E402

COLOURS = ("#d62728", "#ff7f0e", "#1f77b4", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")
SHARE_SMOOTHING = 20  # scrapes averaged in the realised-share plot (5 minutes at 15 s)
PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #222; }}
h1 {{ font-size: 1.5em; }} h2 {{ border-top: 1px solid #ccc; padding-top: 1em; }}
table {{ border-collapse: collapse; margin: 0.5em 0 1em; }}
td, th {{ padding: 2px 10px; text-align: right; border-bottom: 1px solid #eee; }}
td:first-child, th:first-child {{ text-align: left; }}
.bad {{ color: #b00; font-weight: bold; }} .ok {{ color: #070; }}
figure {{ margin: 0 0 1em; }} svg {{ max-width: 100%; height: auto; }}
</style></head><body>
<h1>{title}</h1>
<p>{description}</p>
{body}
</body></html>
"""


def _svg(fig: Figure) -> str:
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", bbox_inches="tight")
    text = buffer.getvalue()
    return text[text.index("<svg"):]


def _minutes(times_s: Sequence[float]) -> list[float]:
    return [t / 60.0 for t in times_s]


def _smoothed(values: Sequence[float], window: int) -> list[float]:
    """Trailing mean over ``window`` points, ignoring NaN (no completions in that scrape)."""
    out = []
    for i in range(len(values)):
        part = [v for v in values[max(0, i - window + 1):i + 1] if not math.isnan(v)]
        out.append(sum(part) / len(part) if part else math.nan)
    return out


def _per_class_figure(scenario: Scenario, run: PolicyRun) -> Figure:
    """Oldest age against the SLO (top row) and quiet against noisy tenants' age (bottom row)."""
    classes = scenario.config.classes
    fig = Figure(figsize=(4 * len(classes), 6.4), layout="constrained")
    axes = fig.subplots(2, len(classes), squeeze=False)
    minutes = _minutes(run.timeline.times_s)
    for col, c in enumerate(classes):
        colour = COLOURS[col % len(COLOURS)]
        top, bottom = axes[0][col], axes[1][col]
        top.plot(minutes, run.timeline.oldest_age[c.name], color=colour, label="oldest age")
        top.axhline(c.max_age, color="black", linestyle="--", linewidth=1, label=f"SLO {human(c.max_age)}")
        top.set_title(f"{c.name}: oldest job's age (s)", fontsize=10)
        bottom.plot(minutes, run.timeline.quiet_age[c.name], color=colour, label="quiet tenants")
        bottom.plot(minutes, run.timeline.noisy_age[c.name], color="grey", linestyle=":", label="noisy tenants")
        bottom.axhline(c.max_age, color="black", linestyle="--", linewidth=1, label="SLO")
        bottom.set_title(f"{c.name}: oldest age by tenant group (s)", fontsize=10)
        bottom.set_xlabel("simulated minutes")
        for ax in (top, bottom):
            ax.set_ylim(bottom=0)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8, loc="upper left")
    return fig


def _share_figure(scenario: Scenario, run: PolicyRun) -> Figure:
    fig = Figure(figsize=(12, 3.2), layout="constrained")
    ax = fig.subplots()
    minutes = _minutes(run.timeline.times_s)
    total = scenario.config.total_weight
    for col, c in enumerate(scenario.config.classes):
        colour = COLOURS[col % len(COLOURS)]
        ax.plot(minutes, _smoothed(run.timeline.share[c.name], SHARE_SMOOTHING), color=colour, label=f"{c.name} realised")
        ax.axhline(c.weight / total, color=colour, linestyle="--", linewidth=1, label=f"{c.name} weight")
    ax.set_ylim(0, 1)
    ax.set_title(f"share of completions per class ({SHARE_SMOOTHING}-scrape mean) against the weights", fontsize=10)
    ax.set_xlabel("simulated minutes")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, ncol=len(scenario.config.classes), loc="upper right")
    return fig


def _alert_figure(outcome: Outcome, duration_s: float) -> Figure | None:
    if not outcome.alerts:
        return None
    fig = Figure(figsize=(12, 0.8 + 0.35 * len(outcome.alerts)), layout="constrained")
    ax = fig.subplots()
    for row, alert in enumerate(outcome.alerts):
        severity = alert.labels.get("severity", "")
        colour = "#d62728" if severity in ("page", "critical") else "#ff7f0e"
        ax.broken_barh([(start / 60, (end - start) / 60) for start, end in alert.periods], (row - 0.35, 0.7), color=colour)
    ax.set_yticks(range(len(outcome.alerts)), [alert_label(a) for a in outcome.alerts], fontsize=8)
    ax.set_xlim(0, duration_s / 60)
    ax.invert_yaxis()
    ax.set_xlabel("simulated minutes")
    ax.set_title("alerts firing (red: paging, orange: other)", fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    return fig


def _summary_table(scenario: Scenario, outcome: Outcome) -> str:
    total = scenario.config.total_weight
    head = "".join(f"<th>{h}</th>" for h in ("class", "jobs", "wait mean", "p50", "p99", "max", "max oldest age", "SLO",
                                              "realised share", "weight"))
    rows = []
    for c in scenario.config.classes:
        r = outcome.run.classes[c.name]
        cells = (c.name, f"{r.jobs:,}", human(r.wait_mean_s), human(r.wait_p50_s), human(r.wait_p99_s), human(r.wait_max_s),
                 human(r.max_oldest_age_s), human(c.max_age), f"{r.realised_share:.1%}", f"{c.weight / total:.0%}")
        bad = ' class="bad"' if r.max_oldest_age_s > c.max_age else ""
        rows.append("<tr>" + "".join(f"<td{bad if i == 6 else ''}>{html.escape(v)}</td>" for i, v in enumerate(cells)) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(rows)}</table>"


def _alerts_html(scenario: Scenario, outcome: Outcome) -> str:
    if outcome.alerts is None:
        return "<p>Alerts were not evaluated (promtool or the rules were missing).</p>"
    fired = "".join(f"<li>{html.escape(alert_label(a))}: first firing at {human(a.first_firing_s)}</li>"
                    for a in outcome.alerts)
    parts = [f"<ul>{fired}</ul>" if fired else "<p>No alert fired.</p>"]
    problems = outcome.violations(scenario)
    if problems:
        parts.append("".join(f'<p class="bad">Expectation failed: {html.escape(p)}</p>' for p in problems))
    elif problems is not None:
        parts.append('<p class="ok">Every alert fired or stayed silent as the scenario expects.</p>')
    return "".join(parts)


def write_report(path: Path, scenario: Scenario, outcomes: Sequence[Outcome]) -> None:
    """Write the page for ``outcomes`` of ``scenario`` to ``path``."""
    sections = []
    for outcome in outcomes:
        run = outcome.run
        figures = [_per_class_figure(scenario, run), _share_figure(scenario, run)]
        timeline = _alert_figure(outcome, scenario.duration)
        if timeline is not None:
            figures.append(timeline)
        plots = "".join(f"<figure>{_svg(fig)}</figure>" for fig in figures)
        sections.append(f"<h2>policy {html.escape(run.policy)}</h2>{_summary_table(scenario, outcome)}"
                        f"{_alerts_html(scenario, outcome)}{plots}")
    page = PAGE.format(
        title=html.escape(f"fairctl simulate: {scenario.name} ({human(scenario.duration)}, seed {scenario.seed})"),
        description=html.escape(scenario.description), body="".join(sections))
    path.write_text(page, encoding="utf-8")
