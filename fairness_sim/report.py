"""``fairctl simulate --report``: one self-contained HTML page to show in an incident review.

First a verdict table across the policies (did the interactive classes meet their SLO, each class's
worst oldest age against its SLO, the alerts fired, a one-word verdict and whether it matches the
scenario's expectation), then per policy every figure the terminal prints and the plots: each
class's oldest age against its SLO, the quiet tenants' oldest age against the noisy ones', the
realised share against the weight, the tenant fairness index, the starts per second of each
tenant with a dispatch limit in the scenario, and the alert timeline. Ages are on one log scale
shared by every policy (so the policies compare by eye), time is in minutes.

The plots are drawn by matplotlib (a maintained plotting library, not hand-made SVG) and inlined
as SVG, so the page needs no network, no JavaScript and no other file: it can be attached to an
incident review as it is. :func:`verdict` is also what the terminal prints per policy.
"""

from __future__ import annotations

import html
import io
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from fairness_core.ages import human
from fairness_core.config import Config

from .alert_evaluation import FiredAlert
from .policies import Outcome, alert_label
from .scenario import Scenario
from .simulator import PolicyRun

if TYPE_CHECKING:  # matplotlib is imported by the plots alone (the 'report' extra): the terminal's text needs none
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

COLOURS = ("#d62728", "#ff7f0e", "#1f77b4", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")
SHARE_SMOOTHING = 20  # scrapes averaged in the realised-share plot (5 minutes at 15 s)
AGE_FLOOR_S = 0.1  # ages below this sit on the log scale's floor (an idle class's oldest age is 0)
AGE_TICKS = ((0.1, "0.1s"), (1, "1s"), (10, "10s"), (60, "1m"), (600, "10m"), (3600, "1h"), (6 * 3600, "6h"),
             (86400, "1d"), (7 * 86400, "7d"))
INSET = 0.04  # margin around the 0..1 range of the share and fairness plots, so lines at 0 and 1 show
PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #222; padding: 0 1em; }}
h1 {{ font-size: 1.5em; }} h2 {{ border-top: 1px solid #ccc; padding-top: 1em; }}
table {{ border-collapse: collapse; margin: 0.5em 0 1em; }}
td, th {{ padding: 3px 10px; text-align: right; border-bottom: 1px solid #e4e4e4; vertical-align: top; }}
th {{ background: #f4f4f4; }}
td:first-child, th:first-child {{ text-align: left; }}
table.verdicts td, table.verdicts th {{ text-align: left; }}
.bad {{ color: #b00; font-weight: bold; }} .ok {{ color: #070; }} .note {{ color: #666; font-size: 0.9em; }}
.word {{ font-weight: bold; white-space: nowrap; }} small {{ color: #666; }}
ul.alerts {{ margin: 0.3em 0; }}
figure {{ margin: 0 0 1em; }} svg {{ max-width: 100%; height: auto; }}
</style></head><body>
<h1>{title}</h1>
<p>{description}</p>
{body}
</body></html>
"""


# ------------------------------------------------------------------ the verdict


@dataclass(frozen=True)
class ClassVerdict:
    name: str
    slo_s: float
    max_oldest_s: float
    quiet_max_s: float
    jobs: int
    status: str  # met, noisy only, unfair, late, starved (see verdict)


@dataclass(frozen=True)
class Verdict:
    word: str  # the worst class status, as one word: "met SLOs", "late", "unfair", "starved"
    classes: tuple[ClassVerdict, ...]
    interactive: tuple[str, ...]

    @property
    def interactive_met(self) -> bool:
        return all(c.status == "met" for c in self.classes if c.name in self.interactive)

    @property
    def missed(self) -> tuple[ClassVerdict, ...]:
        """The classes whose oldest job went over the SLO, whoever's it was."""
        return tuple(c for c in self.classes if c.status != "met")

    def summary(self, alerts: Sequence[FiredAlert] | None = None) -> str:
        """One line for the terminal: the word, each class that missed its SLO (its oldest age
        against the SLO, and why) and, given the run's ``alerts`` (None: not evaluated), which fired."""
        why = {"noisy only": "noisy tenant only"}
        line = self.word
        if self.missed:
            line += ": missed the SLO of " + ", ".join(
                f"{c.name} (oldest {human(c.max_oldest_s)}, SLO {human(c.slo_s)}; {why.get(c.status, c.status)})"
                for c in self.missed)
        if alerts:
            line += f"; {', '.join(dict.fromkeys(a.alert for a in alerts))} fired"
        elif alerts is not None and self.missed:
            line += "; no alert fired"
        return line


# noisy only counts as late: the class's oldest job was over the SLO, whoever's it was
STATUS_RANK = {"met": 0, "noisy only": 1, "late": 1, "unfair": 2, "starved": 3}
WORDS = {0: "met SLOs", 1: "late", 2: "unfair", 3: "starved"}
STATUS_HELP = {
    "met": "oldest job within the SLO",
    "noisy only": "over the SLO (a miss: the verdict reads late), but only the noisy tenant's own backlog; the "
                  "other tenants' oldest job within it",
    "late": "over the SLO (no noisy tenant to blame)",
    "unfair": "started jobs, but quiet tenants waited beyond the SLO behind a noisy one",
    "starved": "over the SLO while served below its weight's share (or not at all)",
}


def interactive_classes(config: Config) -> tuple[str, ...]:
    """The classes a human waits on: those a ``user_waiting: true`` rule classifies into (else the
    first class, the one with the tightest promise by convention)."""
    named = tuple(dict.fromkeys(r.queue for r in config.classification if r.user_waiting))
    return named or (config.classes[0].name,)


def verdict(scenario: Scenario, run: PolicyRun) -> Verdict:
    """Per class, how the policy kept its SLO: ``met``; ``noisy only`` (the oldest job is over the
    SLO but the quiet tenants' is not: the flooding tenant waits behind itself); ``unfair`` (quiet
    tenants waited beyond the SLO behind a noisy tenant); ``late`` (over the SLO, no noisy tenant);
    ``starved`` (over the SLO while served below its weight, or not at all). The policy's word is
    its worst class's (``noisy only`` is a miss and reads ``late``). A class is judged by the config
    in force at the end (see :meth:`Scenario.class_settings`)."""
    out = []
    for c, weight_share in scenario.class_settings().values():
        r = run.classes[c.name]
        quiet = run.quiet_max_age_s[c.name]
        noisy_seen = any(not math.isnan(v) for v in run.timeline.noisy_age[c.name])
        if r.max_oldest_age_s <= c.max_age:
            status = "met"
        elif r.jobs == 0 or r.realised_share < weight_share:
            status = "starved"
        elif quiet <= c.max_age:
            status = "noisy only"
        elif noisy_seen:
            status = "unfair"
        else:
            status = "late"
        out.append(ClassVerdict(c.name, c.max_age, r.max_oldest_age_s, quiet, r.jobs, status))
    worst = max(STATUS_RANK[c.status] for c in out)
    return Verdict(WORDS[worst], tuple(out), interactive_classes(scenario.final_config))


# ------------------------------------------------------------------ plots


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


def _floored(ages: Sequence[float]) -> list[float]:
    return [v if math.isnan(v) else max(v, AGE_FLOOR_S) for v in ages]


def age_ceiling(scenario: Scenario, outcomes: Sequence[Outcome]) -> float:
    """The top of every age plot: one scale across policies, above every age and every SLO."""
    top = max([c.max_age for c, _ in scenario.class_settings().values()]
              + [r.max_oldest_age_s for o in outcomes for r in o.run.classes.values()])
    return top * 2.0


def _age_axis(ax: Axes, ceiling: float, duration_s: float) -> None:
    ax.set_yscale("log")
    ax.set_ylim(AGE_FLOOR_S * 0.7, ceiling)  # the floor a little above the frame, so it shows
    ticks = [(v, label) for v, label in AGE_TICKS if v <= ceiling]
    ax.set_yticks([v for v, _ in ticks], [label for _, label in ticks])
    ax.minorticks_off()
    ax.set_ylabel("age (log scale)")
    _time_axis(ax, duration_s)


def _time_axis(ax: Axes, duration_s: float) -> None:
    ax.set_xlim(0, duration_s / 60.0)
    ax.set_xlabel("simulated time (minutes)")
    ax.grid(alpha=0.3)


def _mark_changes(ax: Axes, run: PolicyRun) -> None:
    """A vertical line where each config change was applied."""
    for change in run.config_changes:
        if change.refused is None:
            ax.axvline(change.at_s / 60.0, color="#9467bd", linestyle="-.", linewidth=1.2, zorder=2)


def _per_class_figure(scenario: Scenario, run: PolicyRun, ceiling: float) -> Figure:
    """Oldest age against the SLO (top row) and quiet against noisy tenants' age (bottom row)."""
    from matplotlib.figure import Figure

    classes = [c for c, _ in scenario.class_settings().values()]
    fig = Figure(figsize=(4 * len(classes), 6.6), layout="constrained")
    axes = fig.subplots(2, len(classes), squeeze=False)
    minutes = _minutes(run.timeline.times_s)
    for col, c in enumerate(classes):
        colour = COLOURS[col % len(COLOURS)]
        top, bottom = axes[0][col], axes[1][col]
        top.plot(minutes, _floored(run.timeline.oldest_age[c.name]), color=colour, linewidth=1.6, label="oldest job")
        top.set_title(f"{c.name}: oldest job's age", fontsize=10)
        bottom.plot(minutes, _floored(run.timeline.quiet_age[c.name]), color=colour, linewidth=1.6, label="quiet tenants")
        bottom.plot(minutes, _floored(run.timeline.noisy_age[c.name]), color="#555", linestyle=":", linewidth=1.6,
                    label="noisy tenants")
        bottom.set_title(f"{c.name}: oldest age by tenant group", fontsize=10)
        for ax in (top, bottom):
            ax.axhline(c.max_age, color="black", linestyle="--", linewidth=1.4, label=f"SLO {human(c.max_age)}", zorder=3)
            _age_axis(ax, ceiling, scenario.duration)
            _mark_changes(ax, run)
            ax.legend(fontsize=8, loc="upper left")
    applied = ", dash-dot: config applied" if run.config_changes else ""
    fig.suptitle(f"{run.policy}: ages on one log scale for every policy (below {AGE_TICKS[0][1]}: on the floor"
                 f"{applied})", fontsize=10)
    return fig


def _share_fairness_figure(scenario: Scenario, run: PolicyRun) -> Figure:
    from matplotlib.figure import Figure
    from matplotlib.ticker import PercentFormatter

    fig = Figure(figsize=(12, 3.4), layout="constrained")
    share_ax, fair_ax = fig.subplots(1, 2)
    minutes = _minutes(run.timeline.times_s)
    for col, (c, weight_share) in enumerate(scenario.class_settings().values()):
        colour = COLOURS[col % len(COLOURS)]
        share_ax.plot(minutes, _smoothed(run.timeline.share[c.name], SHARE_SMOOTHING), color=colour, linewidth=1.6,
                      label=f"{c.name} realised")
        share_ax.axhline(weight_share, color=colour, linestyle="--", linewidth=1.2, label=f"{c.name} weight")
        fair_ax.plot(minutes, run.timeline.fairness[c.name], color=colour, linewidth=1.2, label=c.name)
    share_ax.set_title(f"share of completions per class ({SHARE_SMOOTHING}-scrape mean) against the weight", fontsize=10)
    share_ax.set_ylabel("share of completions")
    fair_ax.set_title("tenant fairness index (gaps: the class served nothing)", fontsize=10)
    fair_ax.set_ylabel("Jain's index (1 = fair)")
    for ax in (share_ax, fair_ax):
        ax.set_ylim(-INSET, 1 + INSET)
        _time_axis(ax, scenario.duration)
        _mark_changes(ax, run)
    share_ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    share_ax.legend(fontsize=7, ncol=2, loc="center right")
    fair_ax.legend(fontsize=7, loc="center right")
    return fig


def starts_ceiling(scenario: Scenario, outcomes: Sequence[Outcome]) -> float:
    """The top of every starts plot: one scale across runs, above every run's busiest second."""
    if not scenario.watched_tenants:
        return 1.0
    peaks = [t.peak for o in outcomes if o.run.starts is not None for t in o.run.starts.tenants.values()]
    return max(peaks, default=1) * 1.1 + 1


def _starts_figure(scenario: Scenario, run: PolicyRun, ceiling: float) -> Figure | None:
    """The watched tenants' starts in each second against the dispatch rate the scenario gives them."""
    if not scenario.watched_tenants or run.starts is None:
        return None
    from matplotlib.figure import Figure

    fig = Figure(figsize=(12, 3.0), layout="constrained")
    ax = fig.subplots()
    for col, (tenant, starts) in enumerate(run.starts.tenants.items()):
        colour = COLOURS[col % len(COLOURS)]
        ax.step(_minutes([float(k) for k in range(len(starts.per_second))]), starts.per_second, where="post",
                color=colour, linewidth=1.2, label=f"{tenant} ({starts.limit or 'no limit'})")
        rate = scenario.downstream_rate(tenant)
        if rate is not None:
            ax.axhline(rate, color=colour, linestyle="--", linewidth=1.2, label=f"{tenant}'s dispatch_rate {rate:g}/s")
    ax.set_ylim(0, ceiling)
    ax.set_ylabel("jobs started per second")
    _time_axis(ax, scenario.duration)
    _mark_changes(ax, run)
    ax.legend(fontsize=8, loc="upper right")
    ax.set_title("jobs started per second by each tenant with a dispatch limit in the scenario, against its "
                 "dispatch_rate (one scale for every run)", fontsize=10)
    return fig


def _alert_figure(outcome: Outcome, duration_s: float) -> Figure | None:
    if not outcome.alerts:
        return None
    from matplotlib.figure import Figure

    fig = Figure(figsize=(12, 1.0 + 0.3 * len(outcome.alerts)), layout="constrained")
    ax = fig.subplots()
    for row, alert in enumerate(outcome.alerts):
        severity = alert.labels.get("severity", "")
        colour = "#d62728" if severity in ("page", "critical") else "#ff7f0e"
        ax.broken_barh([(start / 60, (end - start) / 60) for start, end in alert.periods], (row - 0.35, 0.7), color=colour)
    ax.set_yticks(range(len(outcome.alerts)), [alert_label(a) for a in outcome.alerts], fontsize=8)
    ax.set_ylim(len(outcome.alerts) - 0.5, -0.5)
    _time_axis(ax, duration_s)
    _mark_changes(ax, outcome.run)
    ax.grid(axis="y", visible=False)
    ax.set_title("alerts firing (red: paging/critical, orange: other)", fontsize=10)
    return fig


# ------------------------------------------------------------------ tables


def _cell(text: str, cls: str = "") -> str:
    return f'<td class="{cls}">{text}</td>' if cls else f"<td>{text}</td>"


def _expectation(scenario: Scenario, outcome: Outcome, outcomes: Sequence[Outcome]) -> tuple[str, str]:
    problems = outcome.violations(scenario, outcomes)
    if problems is None:
        why = (scenario.unchecked_because or
               ("alerts not evaluated" if outcome.alerts is None else "the scenario expects nothing of this policy"))
        return f"n/a <small>({why})</small>", ""
    if problems:
        return "NO: " + "; ".join(html.escape(p) for p in problems), "bad"
    return "yes", "ok"


def _verdict_table(scenario: Scenario, outcomes: Sequence[Outcome]) -> str:
    interactive = interactive_classes(scenario.final_config)
    head = ["policy", "verdict", f"interactive SLO met<br><small>{html.escape(', '.join(interactive))}</small>"]
    head += [f"{html.escape(name)}<br><small>worst oldest age / SLO</small>" for name in scenario.class_settings()]
    head += ["alerts fired", "as the scenario expects?"]
    rows = []
    for outcome in outcomes:
        v = verdict(scenario, outcome.run)
        cells = [_cell(f"<b>{html.escape(outcome.run.title)}</b>"),
                 _cell(html.escape(v.word), "word " + ("ok" if v.word == "met SLOs" else "bad")),
                 _cell("yes" if v.interactive_met else "no", "ok" if v.interactive_met else "bad")]
        for c in v.classes:
            text = f"{human(c.max_oldest_s)} / {human(c.slo_s)}<br><small>{html.escape(c.status)}"
            if c.status == "noisy only":
                text += f"; quiet {outcome.run.party}s {human(c.quiet_max_s)}"
            cells.append(_cell(text + "</small>", "ok" if c.status == "met" else "bad"))
        if outcome.alerts is None:
            cells.append(_cell("not evaluated"))
        else:
            paging = [a for a in outcome.alerts if a.labels.get("severity") in ("page", "critical")]
            text = f"{len(outcome.alerts)}" + (
                f", {len(paging)} paging (first at {human(min(a.first_firing_s for a in paging))})" if paging
                else ", none paging")
            cells.append(_cell(text if outcome.alerts else "none"))
        cells.append(_cell(*_expectation(scenario, outcome, outcomes)))
        rows.append("<tr>" + "".join(cells) + "</tr>")
    legend = "; ".join(f"<b>{html.escape(k)}</b>: {html.escape(v)}" for k, v in STATUS_HELP.items())
    return (f'<h2>Verdict</h2><table class="verdicts"><tr>{"".join(f"<th>{h}</th>" for h in head)}</tr>'
            f'{"".join(rows)}</table><p class="note">Class status: {legend}. The verdict is the worst class\'s '
            f"status; interactive classes are those a <code>user_waiting: true</code> rule classifies into.</p>")


def _summary_table(scenario: Scenario, outcome: Outcome) -> str:
    run = outcome.run
    head = "".join(f"<th>{h}</th>" for h in (
        "class", "jobs started", "wait mean", "p50", "p99", "max", "max oldest age", "SLO", f"quiet {run.party}s' oldest: max",
        "p95 of scrapes", "fairness index", "realised share", "weight"))
    rows = []
    for c, weight_share in scenario.class_settings().values():
        r = run.classes[c.name]
        waits = [human(w) if w is not None else "-" for w in (r.wait_mean_s, r.wait_p50_s, r.wait_p99_s, r.wait_max_s)]
        cells = [_cell(html.escape(c.name)), _cell(f"{r.jobs:,}")]
        cells += [_cell(w) for w in waits]
        cells.append(_cell(human(r.max_oldest_age_s), "bad" if r.max_oldest_age_s > c.max_age else ""))
        cells.append(_cell(human(c.max_age)))
        quiet = run.quiet_max_age_s[c.name]
        cells.append(_cell(human(quiet), "bad" if quiet > c.max_age else ""))
        cells.append(_cell(human(run.quiet_p95_age_s[c.name])))
        cells.append(_cell(html.escape(fairness_text(run, c.name))))
        cells += [_cell(f"{r.realised_share:.1%}"), _cell(f"{weight_share:.0%}")]
        rows.append("<tr>" + "".join(cells) + "</tr>")
    note = ("jobs started: first leases; waits: enqueue to start, of the jobs that started (- when none did); "
            f"fairness index: Jain's index of the backlogged {run.party}s' service, mean while 2+ {run.party}s waited "
            f"and the class served something (1 = fair, 1/n = one {run.party} takes all; none served: {run.party}s "
            f"waited and the class served nothing; -: never two {run.party}s waiting at once).")
    changes = "".join(f"<li>{html.escape(str(change))}</li>" for change in run.config_changes)
    shown = ((worker_time_lines(scenario, run) if scenario.reports_worker_time else [])
             + (account_lines(run) if scenario.account_separator is not None else []) + start_lines(scenario, run)
             + shard_lines(scenario, run))
    worker_time = "".join(f"<p>{html.escape(line)}</p>" for line in shown)
    return (f"<p>{run.jobs_started:,} jobs started of {run.jobs_enqueued:,} enqueued.</p>"
            + ('<p>Config changes (SLOs and weights below: the config in force at the end):</p>'
               f'<ul class="alerts">{changes}</ul>' if changes else "") +
            f'<table><tr>{head}</tr>{"".join(rows)}</table><p class="note">{html.escape(note)}</p>{worker_time}')


def fairness_text(run: PolicyRun, name: str) -> str:
    """The fairness index as the terminal and the report print it: the value, ``none served`` when
    tenants waited and the class served nothing (starvation, not fairness), ``-`` when never two
    tenants waited at once."""
    index, unserved = run.fairness_index[name], run.fairness_unserved[name]
    if unserved is None:
        return "-"
    if index is None:
        return "none served"
    return f"{index:.2f}" + (f" (none served {unserved:.0%} of the time)" if unserved >= 0.005 else "")


HEAVIEST_SHOWN = 3  # tenants named per class in the worker-time lines


def worker_time_lines(scenario: Scenario, run: PolicyRun) -> list[str]:
    """Worker time as the terminal and the report state it: each class's share of all worker time
    against its weight, the heaviest tenants' shares of their class's against their fair shares,
    and each stream's p99 wait (the figures a ``charge: runtime`` comparison is about)."""
    worker_time = run.worker_time
    if worker_time is None:
        return []
    settings = scenario.class_settings()
    busy = [name for name in settings if worker_time.total(name) > 0]
    lines = ["worker time per class (weight): " + ", ".join(
        f"{name} {worker_time.class_share(name):.1%} ({settings[name][1]:.0%})" for name in busy)]
    for name in busy:
        rows = worker_time.tenants(name)
        heaviest = ", ".join(f"{row.tenant} {row.share:.1%}" + (f" (fair {row.fair_share:.1%})" if row.fair_share is not None
                                                                else "") for row in rows[:HEAVIEST_SHOWN])
        whom = "accounts" if run.accounts is not None else "tenants"
        line = f"{name} worker time ({human(worker_time.total(name))}), heaviest {whom}: {heaviest}"
        worst = worker_time.furthest_from_fair(name)
        if worst is not None and worst.fair_share is not None:
            line += (f"; {len(worker_time.backlogged[name]):,} backlogged throughout, furthest from its fair share: "
                     f"{worst.tenant} by {abs(worst.share - worst.fair_share) * 100:.1f} points")
        lines.append(line)
    lines.append("p99 wait per stream: " + ", ".join(
        f"{name} {'-' if p99 is None else human(p99)}" for name, p99 in run.stream_wait_p99_s.items()))
    return lines


def account_lines(run: PolicyRun) -> list[str]:
    """Waits per account, as the terminal and the report state them (scenarios with accounts): each
    account of several keys (the most keys first), then the one-key accounts together and the worst
    of them, so a flat run and a two-level one compare account by account."""
    figures = run.accounts
    if figures is None:
        return []
    spread = sorted((a for a, n in figures.keys.items() if n > 1), key=lambda a: (-figures.keys[a], a))
    parts = [f"{a} {_wait(figures.wait_p99_s[a])} ({figures.keys[a]:,} keys)" for a in spread[:HEAVIEST_SHOWN]]
    single = [a for a, n in figures.keys.items() if n == 1]
    if single:
        worst = max(single, key=lambda a: (figures.wait_p99_s[a] or 0.0, a))
        parts.append(f"{len(single):,} one-key account{'s' if len(single) != 1 else ''} {_wait(figures.single_key_p99_s)}, the worst {worst} "
                     f"{_wait(figures.wait_p99_s[worst])}")
    return ["p99 wait per account: " + "; ".join(parts)]


def _wait(seconds: float | None) -> str:
    return "-" if seconds is None else human(seconds)


def start_lines(scenario: Scenario, run: PolicyRun) -> list[str]:
    """Starts of the tenants the scenario watches, as the terminal and the report state them: each
    one's dispatch limits in this run, its starts per second (mean, and the most in one second of
    the clock), the most of its jobs running at once, and how often it started more than the
    dispatch rate the scenario gives it somewhere (what its downstream takes); then the waits of
    every other tenant's jobs beside it."""
    figures = run.starts if scenario.watched_tenants else None
    if figures is None:
        return []
    lines = []
    for tenant, starts in figures.tenants.items():
        line = (f"starts of {tenant} ({starts.limit or 'no limit'}): {starts.started:,} in {human(starts.span_s)}, "
                f"{starts.mean_rate:.1f}/s; peak {starts.peak:,} in a second, {starts.peak_in_flight:,} at once")
        rate = scenario.downstream_rate(tenant)
        if rate is not None:
            seconds, beyond = starts.over(rate)
            line += (f"; over {rate:g}/s (its dispatch_rate in the scenario) in {seconds:,} of "
                     f"{starts.span_s:,} seconds" + (f", by {beyond:,} jobs" if beyond else ""))
        lines.append(line)
    lines.append(f"other tenants' waits ({figures.others:,} tenants beside {', '.join(figures.tenants)}): "
                 f"p95 {_wait(figures.others_wait_p95_s)}, p99 {_wait(figures.others_wait_p99_s)}")
    return lines


FEW_WAITING = 2.0  # parties waiting per shard, on average, at most which a policy has little to order


def shard_lines(scenario: Scenario, run: PolicyRun) -> list[str]:
    """A sharded run's own figures, as the terminal and the report state them: each class's share
    of the fleet's completions against its weight (the drift, in points), and the flood cost: the
    service per tenant of the heaviest tenant's shard-mates against the other tenants of its class."""
    figures = run.shards
    if figures is None:
        return []
    drift = ", ".join(f"{name} {run.classes[name].realised_share:.1%} ({share:.0%}, "
                      f"{(run.classes[name].realised_share - share) * 100:+.1f} points)"
                      for name, (_, share) in scenario.class_settings().items())
    lines = [f"{figures.shards} shards, hands of {figures.hand}; class shares fleet-wide (weight, drift): {drift}"]
    cost = figures.flood_cost()
    if cost is not None:
        percent = cost.percent
        served = f"{cost.mates_served:,.1f} against {cost.others_served:,.1f} jobs each"
        lines.append(f"flood cost: {cost.tenant}'s {cost.mates:,} shard-mates in {cost.queue} got " + (
            f"{percent:.0f}% of the service per tenant of its {cost.others:,} other tenants ({served})"
            if percent is not None else f"no service to compare with its {cost.others:,} other tenants' ({served})"))
    if figures.waiting:
        waiting = ", ".join(f"{name} {figures.waiting[name]:.1f}" for name in scenario.class_settings()
                            if name in figures.waiting)
        few = max(figures.waiting.values()) <= FEW_WAITING
        lines.append(f"{run.party}s waiting per shard (mean, where any wait): {waiting}" + (
            f"; with so few to a shard a policy has little to order, and each shard's fairness index is over "
            f"those few (the fleet's averages the shards' by their waiting {run.party}s)" if few else ""))
    return lines


def same_starts_note(outcomes: Sequence[Outcome]) -> list[str]:
    """Sharded runs whose policies started the same jobs in every class, said plainly: sharding,
    not a fault, leaves their orders nothing to decide (``shard_lines`` gives the figures)."""
    alike: dict[tuple[int, ...], list[PolicyRun]] = {}
    for run in (o.run for o in outcomes):
        if run.shards is not None:
            alike.setdefault(tuple(r.jobs for r in run.classes.values()), []).append(run)
    return [f"{', '.join(run.title for run in runs)}: the same jobs started in every class. On {figures.shards} "
            f"shards with hands of {figures.hand} few {runs[0].party}s wait on any one shard (\"waiting per shard\" "
            "above), so these policies ordered the pops alike"
            for runs in alike.values() if len(runs) > 1 and (figures := runs[0].shards) is not None]


def _alerts_html(scenario: Scenario, outcome: Outcome, outcomes: Sequence[Outcome]) -> str:
    checks = "".join(f'<p class="{"ok" if c.ok else "bad"}">{html.escape(str(c))}</p>'
                     for c in outcome.checks(scenario, outcomes))
    if outcome.alerts is None:
        return "<p>Alerts were not evaluated (promtool or the rules were missing).</p>" + checks
    fired = "".join(f"<li>{html.escape(alert_label(a))}: first firing at {human(a.first_firing_s)}</li>"
                    for a in outcome.alerts)
    parts = [f'<p>Alerts fired:</p><ul class="alerts">{fired}</ul>' if fired else "<p>No alert fired.</p>", checks]
    problems = outcome.alert_violations(scenario)
    if problems:
        parts.append("".join(f'<p class="bad">Expectation failed: {html.escape(p)}</p>' for p in problems))
    elif problems is not None:
        parts.append(f'<p class="ok">Every alert fired or stayed silent as the scenario expects of '
                     f"{html.escape(outcome.run.title)}.</p>")
    return "".join(parts)


def write_report(path: Path, scenario: Scenario, outcomes: Sequence[Outcome]) -> None:
    """Write the page for ``outcomes`` of ``scenario`` to ``path``."""
    import matplotlib

    matplotlib.use("svg")  # no display, no GUI toolkit: the figures only become SVG text
    ceiling = age_ceiling(scenario, outcomes)
    most_starts = starts_ceiling(scenario, outcomes)
    sections = [_verdict_table(scenario, outcomes)]
    for outcome in outcomes:
        run = outcome.run
        v = verdict(scenario, run)
        figures = [_per_class_figure(scenario, run, ceiling), _share_fairness_figure(scenario, run)]
        for extra in (_starts_figure(scenario, run, most_starts), _alert_figure(outcome, scenario.duration)):
            if extra is not None:
                figures.append(extra)
        plots = "".join(f"<figure>{_svg(fig)}</figure>" for fig in figures)
        sections.append(f'<h2 id="{html.escape(run.name)}">policy {html.escape(run.title)}: '
                        f'<span class="{"ok" if v.word == "met SLOs" else "bad"}">{html.escape(v.word)}</span></h2>'
                        f"{_summary_table(scenario, outcome)}{_alerts_html(scenario, outcome, outcomes)}{plots}")
    page = PAGE.format(
        title=html.escape(f"fairctl simulate: {scenario.name} ({human(scenario.duration)}, seed {scenario.seed})"),
        description=html.escape(scenario.description), body="".join(sections))
    path.write_text(page, encoding="utf-8")
