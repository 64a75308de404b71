"""A mutation run of the generated rules: how much of each rule the promtool unit tests pin down.

Each mutant is one small change to one rule's ``expr`` or ``for:`` (a comparison flipped or made
(non-)strict, a threshold scaled, a ``for:`` moved by one evaluation interval, an ``and``/``unless``/
``or`` clause dropped, a ``by``/``without``/``on``/``ignoring`` list changed, a range window
halved). Each is written into a scratch copy of the generated set and only the test files that can
see the mutated rule run against it. A mutant the tests still pass ("survives") is a change of
behaviour nobody would notice: a missing boundary case, or a truly equivalent rewrite, which goes
on :data:`EQUIVALENTS` with the argument why.

``python -m tests.alert_mutation [--jobs N] [--only RULE] [--list]``; exit code 1 when a mutant not
listed as equivalent survives.
"""

from __future__ import annotations

import argparse
import copy
import fnmatch
import functools
import os
import re
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from exporter import metrics as m
from fairness_core.config import format_duration, parse_duration
from fairness_core.generated import yaml_text

from alerts import promtool
from alerts import recording as rec
from alerts.layout import GENERATED_DIR, RULES_FILE, TESTS_DIR
from alerts.promql import number

# Mutant id (or fnmatch pattern over ids) -> why that change cannot alter any alert or recording.
# Only rigorous arguments belong here: a survivor is a missing test until proven otherwise.
# QueueShardStalled is "this shard stalls (A) unless the whole queue does (B)"; B's depth clauses
# are implied by A's own on the shard A names (depths are never negative, so a shard's depth over 0
# makes the shards' sum over 0), so wherever A holds they hold too, as written or mutated.
_IMPLIED = "implied by the shard's own clause wherever the shard's part holds (depths are never negative)"
EQUIVALENTS: dict[str, str] = {
    "QueueShardStalled:comparison:10": f"the queue's 'sum of window minima > 0' as '>= 0': {_IMPLIED}",
    "QueueShardStalled:comparison:12": f"the queue's 'depth a window ago > 0' as '>= 0': {_IMPLIED}",
    "QueueShardStalled:clause:5": f"the queue's 'depth a window ago > 0' dropped: {_IMPLIED}",
    "QueueShardStalled:window:4": f"the queue's window minima over half the window: {_IMPLIED}",
    "fairctl:jobs_enqueued:reason_share_baseline:grouping:14": (
        "'and ignoring (reason)' against the day-ago rates per reason instead of their sum: rates are "
        "never negative, so one of them is over 0 exactly when their sum is"),
    "QueueConfigSplit:number:2": "count() is a whole number: '> 1.25' holds for the same counts as '> 1' (2 and up)",
    "RedisMasterChanged:number:2": "count() is a whole number: '> 1.25' holds for the same counts as '> 1' (2 and up)",
    # TenantDominatingQueue, or AccountDominatingQueue in its place under accounts.
    "*DominatingQueue:number:9": (f"{rec.ACTIVE_TENANTS} (under accounts {rec.ACTIVE_ACCOUNTS}) is a sum of "
                                  "maxima of counts, a whole number: '>= 1.6' holds for the same values as '>= 2'"),
}

EVALUATION_INTERVAL_S = 60.0  # a test file's evaluation_interval unless it sets one: a for: moves by one step
SCALES = (0.8, 1.25)
RECORDING_TESTS = "recording.yml"
PROGRESS_EVERY = 50  # mutants between two progress lines on stderr: a full run takes minutes

# PromQL's binary operators by precedence (higher binds tighter); all left-associative but ``^``.
PRECEDENCE = {"or": 1, "and": 2, "unless": 2, "==": 3, "!=": 3, ">": 3, "<": 3, ">=": 3, "<=": 3,
              "+": 4, "-": 4, "*": 5, "/": 5, "%": 5, "atan2": 5, "^": 6}
SET_OPERATORS = ("and", "unless", "or")
# Each comparison's flipped and (non-)strict forms; == and != only swap.
COMPARISONS = {">": ("<", ">="), "<": (">", "<="), ">=": ("<=", ">"), "<=": (">=", "<"),
               "==": ("!=",), "!=": ("==",)}
GROUPING_SWAP = {"by": "without", "without": "by", "on": "ignoring", "ignoring": "on"}
MODIFIERS = {"bool", "on", "ignoring", "group_left", "group_right"}
KEYWORDS = MODIFIERS | {"by", "without", "offset"} | set(SET_OPERATORS) | {"atan2"}

_DURATION = r"(?:\d+(?:ms|[smhdwy]))+"
_QUOTED = r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|`[^`]*`'
_TOKEN = re.compile(rf"""
    (?P<space>\s+|\#[^\n]*)
  | (?P<string>{_QUOTED})
  | (?P<matchers>\{{(?:{_QUOTED}|[^}}"'`])*\}})
  | (?P<range>\[[^\]]*\])
  | (?P<duration>{_DURATION})(?![\w:.])
  | (?P<number>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)(?![\w:.])
  | (?P<ident>[A-Za-z_:][\w:]*)
  | (?P<op>==|!=|>=|<=|=~|!~|[-+*/%^<>(),=])
""", re.VERBOSE)


@dataclass(frozen=True)
class Token:
    kind: str  # string, matchers ({...} whole), range ([...] whole), duration, number, ident, op
    text: str
    start: int
    end: int


def tokenize(expr: str) -> list[Token]:
    """The expression's tokens without blanks; a label matcher block or a range is one token, so
    nothing inside ``{a="b"}`` or ``[10m]`` is ever taken for an operator or a number."""
    tokens: list[Token] = []
    pos = 0
    while pos < len(expr):
        match = _TOKEN.match(expr, pos)
        if match is None:
            raise ValueError(f"cannot tokenize PromQL at {pos}: {expr[pos:pos + 20]!r}")
        kind = match.lastgroup or ""
        if kind != "space":
            tokens.append(Token(kind, match.group(), match.start(), match.end()))
        pos = match.end()
    return tokens


def _ends_operand(token: Token | None) -> bool:
    """Whether an operand can end with ``token``: what follows it is then a binary operator."""
    if token is None:
        return False
    if token.kind == "ident":
        return token.text not in KEYWORDS
    return token.kind != "op" or token.text == ")"


def _binary(tokens: Sequence[Token], i: int) -> bool:
    """Whether token ``i`` is a binary operator (a ``-`` after an operator is a sign)."""
    return tokens[i].text in PRECEDENCE and _ends_operand(tokens[i - 1] if i else None)


def _skip_list(tokens: Sequence[Token], i: int) -> int:
    """The index after a parenthesised label list starting at ``i`` (or ``i`` when there is none)."""
    if i < len(tokens) and tokens[i].text == "(":
        while tokens[i].text != ")":
            i += 1
        return i + 1
    return i


def _operand_start(tokens: Sequence[Token], i: int) -> int:
    """The first token of the right operand of the binary operator at ``i``, past its modifiers."""
    i += 1
    while i < len(tokens) and tokens[i].text in MODIFIERS:
        i = _skip_list(tokens, i + 1)
    return i


def _operand_end(tokens: Sequence[Token], i: int) -> int:
    """The index of the last token of the right operand of the (left-associative) binary operator
    at ``i``: up to the next operator binding no tighter at the same depth, or the group's end."""
    precedence, start = PRECEDENCE[tokens[i].text], _operand_start(tokens, i)
    depth, last = 0, start
    for j in range(start, len(tokens)):
        text = tokens[j].text
        looser = j > start and _binary(tokens, j) and PRECEDENCE[text] <= precedence
        if depth == 0 and (text in (")", ",") or looser):
            break
        depth += {"(": 1, ")": -1}.get(text, 0)
        last = j
    return last


@dataclass(frozen=True)
class Edit:
    """One change of an expression: ``expr[start:end]`` becomes ``text``; ``context`` is the span
    shown in the description (it contains the change)."""

    kind: str
    start: int
    end: int
    text: str
    context: tuple[int, int]

    def apply(self, expr: str) -> str:
        return expr[:self.start] + self.text + expr[self.end:]

    def describe(self, expr: str) -> str:
        lo, hi = self.context
        before = " ".join(expr[lo:hi].split())
        if self.kind == "clause":
            return f"drop '{before}'"
        after = " ".join((expr[lo:self.start] + self.text + expr[self.end:hi]).split())
        return f"'{before}' -> '{after}'"


def _comparisons(tokens: Sequence[Token]) -> Iterator[Edit]:
    for i, token in enumerate(tokens):
        if token.kind == "op" and token.text in COMPARISONS and _binary(tokens, i):
            shown = tokens[min(_operand_start(tokens, i), len(tokens) - 1)]
            for text in COMPARISONS[token.text]:
                yield Edit("comparison", token.start, token.end, text, (token.start, shown.end))


def _numbers(tokens: Sequence[Token]) -> Iterator[Edit]:
    for i, token in enumerate(tokens):
        if token.kind != "number" or float(token.text) == 0:  # 0 scales to itself; its comparisons mutate
            continue
        lo = i - 1 if i else i
        if lo > 0 and tokens[lo].text == "(" and tokens[lo - 1].kind == "ident":
            lo -= 1
        for scale in SCALES:
            scaled = number(float(token.text) * scale)
            yield Edit("number", token.start, token.end, scaled, (tokens[lo].start, token.end))


def _clauses(tokens: Sequence[Token]) -> Iterator[Edit]:
    for i, token in enumerate(tokens):
        if token.text in SET_OPERATORS and _binary(tokens, i):
            end = tokens[_operand_end(tokens, i)].end
            yield Edit("clause", tokens[i - 1].end, end, "", (token.start, end))


def _label_lists(tokens: Sequence[Token]) -> Iterator[Edit]:
    """``by``/``without`` (kind grouping) and ``on``/``ignoring`` (kind matching): each label
    dropped in turn, and the keyword swapped."""
    for i, token in enumerate(tokens):
        if token.text not in GROUPING_SWAP or i + 1 >= len(tokens) or tokens[i + 1].text != "(":
            continue
        kind = "grouping" if token.text in ("by", "without") else "matching"
        close = _skip_list(tokens, i + 1) - 1
        labels = [t for t in tokens[i + 2:close] if t.kind == "ident"]
        span = (token.start, tokens[close].end)
        yield Edit(kind, token.start, token.end, GROUPING_SWAP[token.text], span)
        for dropped in labels:
            kept = ", ".join(t.text for t in labels if t is not dropped)
            yield Edit(kind, tokens[i + 1].start, tokens[close].end, f"({kept})", span)


def _windows(tokens: Sequence[Token]) -> Iterator[Edit]:
    for i, token in enumerate(tokens):
        if token.kind != "range":
            continue
        window, colon, step = token.text[1:-1].partition(":")
        half = format_duration(parse_duration(window.strip(), "range") / 2)
        shown = tokens[i - 1].start if i else token.start
        yield Edit("window", token.start, token.end, f"[{half}{colon}{step}]", (shown, token.end))


EXPR_KINDS = (_comparisons, _numbers, _clauses, _label_lists, _windows)
KINDS = ("comparison", "number", "for", "clause", "grouping", "matching", "window")


def expression_edits(expr: str) -> list[Edit]:
    """Every single-change mutation of one expression, in text order within each kind."""
    tokens = tokenize(expr)
    return [edit for generate in EXPR_KINDS for edit in generate(tokens)]


@dataclass(frozen=True)
class Rule:
    index: int  # position in the file's only group
    name: str  # record or alert name
    label: str  # name, plus the class when several rules share the name (QueueStarving's)
    body: Mapping[str, Any]


@dataclass(frozen=True)
class Mutant:
    id: str  # rule label, kind and ordinal within both: stable while the rule's text is
    rule: Rule
    kind: str
    description: str
    body: Mapping[str, Any]  # the rule as mutated


def rule_name(body: Mapping[str, Any]) -> str:
    """A rule's record or alert name."""
    return str(body.get("record") or body["alert"])


def load_rules(rules_text: str) -> tuple[dict[str, Any], list[Rule]]:
    """The parsed file (to write mutants from) and its rules, in order."""
    document = yaml.safe_load(rules_text)
    (group,) = document["groups"]
    bodies = group["rules"]
    names = Counter(rule_name(body) for body in bodies)
    rules = []
    for index, body in enumerate(bodies):
        name = rule_name(body)
        label = name
        if names[name] > 1:
            label += f"[{body.get('labels', {}).get(m.QUEUE) or index}]"
        rules.append(Rule(index, name, label, body))
    return document, rules


def _for_changes(body: Mapping[str, Any], step: float) -> Iterator[tuple[str, str]]:
    text = str(body.get("for", "0s"))
    seconds = parse_duration(text, "for") if re.search(r"[1-9]", text) else 0.0  # it refuses 0s
    for delta in (-step, step):
        if seconds + delta >= 0:
            yield text, format_duration(seconds + delta) if seconds + delta else "0s"


def rule_mutants(rule: Rule, step: float = EVALUATION_INTERVAL_S) -> list[Mutant]:
    """Every mutant of one rule, with ids ``label:kind:n`` counted per rule and kind; its ``for:``
    moves by ``step``, the evaluation interval of the alert's test file."""
    changes: list[tuple[str, str, dict[str, Any]]] = []
    expr = rule.body["expr"]
    for edit in expression_edits(expr):
        changes.append((edit.kind, edit.describe(expr), {**rule.body, "expr": edit.apply(expr)}))
    if "alert" in rule.body:
        for old, new in _for_changes(rule.body, step):
            changes.append(("for", f"'for: {old}' -> 'for: {new}'", {**rule.body, "for": new}))
    counts: Counter[str] = Counter()
    found = []
    for kind, description, body in sorted(changes, key=lambda change: KINDS.index(change[0])):
        counts[kind] += 1
        found.append(Mutant(f"{rule.label}:{kind}:{counts[kind]}", rule, kind, f"{rule.label}: {description}", body))
    return found


def mutants(rules_text: str, steps: Mapping[str, float] | None = None) -> list[Mutant]:
    """Every mutant of a rules file, rule by rule in file order; ``steps``: an alert's test file's
    evaluation interval, when not :data:`EVALUATION_INTERVAL_S`."""
    return [mutant for rule in load_rules(rules_text)[1]
            for mutant in rule_mutants(rule, (steps or {}).get(rule.name, EVALUATION_INTERVAL_S))]


def evaluation_intervals(tests: Mapping[str, Mapping[str, Any]]) -> dict[str, float]:
    """Each alert's test file's evaluation interval (in seconds), by alert name."""
    return {Path(file).stem: parse_duration(str(document.get("evaluation_interval", "1m")), "evaluation_interval")
            for file, document in tests.items()}


def mutated(document: Mapping[str, Any], mutant: Mutant) -> dict[str, Any]:
    """The rules file with only the mutant's rule changed."""
    changed = copy.deepcopy(dict(document))
    changed["groups"][0]["rules"][mutant.rule.index] = dict(mutant.body)
    return changed


def equivalence(mutant_id: str, equivalents: Mapping[str, str] = EQUIVALENTS) -> str | None:
    """The reason the mutant is listed as equivalent, if it is."""
    return next((why for pattern, why in equivalents.items() if fnmatch.fnmatchcase(mutant_id, pattern)), None)


# Which test files can see which rule.

_ALERTS_OF = re.compile(r'\bALERTS\{[^}]*alertname="([^"]+)"')


def _reads(expr: str, names: set[str]) -> set[str]:
    """The rule names an expression reads: recordings by name, alerts through ``ALERTS``."""
    return {t.text for t in tokenize(expr) if t.kind == "ident" and t.text in names} | set(_ALERTS_OF.findall(expr))


def _closure(start: Iterable[str], reads: Mapping[str, set[str]]) -> set[str]:
    seen: set[str] = set()
    todo = list(start)
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(reads.get(name, ()))
    return seen


def _named(text: str, names: set[str]) -> set[str]:
    """The rule names a template text (an annotation's ``query``) mentions."""
    return {name for name in names if re.search(rf"(?<![\w:]){re.escape(name)}(?![\w:])", text)}


@functools.cache
def _rule_reads(expr: str, annotations: str, names: frozenset[str]) -> frozenset[str]:
    """The rule names an expression and its annotations' text read; cached, since a mutation run
    asks for the same unmutated rules' reads once per test file of every mutant."""
    return frozenset(_reads(expr, set(names)) | _named(annotations, set(names)))


def reads_of(bodies: Sequence[Mapping[str, Any]]) -> dict[str, set[str]]:
    """For each rule name, the other rules its expression and its annotations' queries read."""
    names = frozenset(rule_name(body) for body in bodies)
    reads: dict[str, set[str]] = {}
    for body in bodies:
        name = rule_name(body)
        annotations = " ".join(str(v) for v in body.get("annotations", {}).values())
        reads.setdefault(name, set()).update(_rule_reads(body["expr"], annotations, names) - {name})
    return reads


def direct_reads(document: Mapping[str, Any], names: set[str]) -> set[str]:
    """The rules a test file's checks read: alerts by name, recordings and ``ALERTS`` in expressions."""
    direct: set[str] = set()
    for case in document.get("tests", []):
        direct |= {test["alertname"] for test in case.get("alert_rule_test", [])}
        for test in case.get("promql_expr_test", []):
            direct |= _reads(test["expr"], names)
    return direct


def visibility(rules: Sequence[Rule], tests: Mapping[str, Mapping[str, Any]]) -> dict[str, list[str]]:
    """For each rule name, the test files (by name) that read it directly or through other rules;
    a recording's mutants also run ``recording.yml``, which tests the recordings themselves."""
    names = {rule.name for rule in rules}
    reads = reads_of([rule.body for rule in rules])
    seen_by: dict[str, list[str]] = {name: [] for name in names}
    for file, document in sorted(tests.items()):
        for name in _closure(direct_reads(document, names), reads):
            if name in seen_by:
                seen_by[name].append(file)
    for rule in rules:
        if "record" in rule.body and RECORDING_TESTS in tests and RECORDING_TESTS not in seen_by[rule.name]:
            seen_by[rule.name].append(RECORDING_TESTS)
    return seen_by


def pruned(document: Mapping[str, Any], test: Mapping[str, Any]) -> dict[str, Any]:
    """The rules file with only the rules ``test``'s checks read, directly or through other rules,
    in their order. promtool evaluates every rule of its rules file at every step, and a rule no
    check reads cannot change a check: the same verdicts, several times faster."""
    bodies = document["groups"][0]["rules"]
    needed = _closure(direct_reads(test, {rule_name(body) for body in bodies}), reads_of(bodies))
    changed = copy.deepcopy(dict(document))
    changed["groups"][0]["rules"] = [body for body in bodies if rule_name(body) in needed]
    return changed


def load_tests(generated: Path) -> dict[str, dict[str, Any]]:
    """The test files, after checking each loads the rules file by the relative name the scratch
    copies reproduce (``../fairctl-rules.yml`` from ``tests/``)."""
    tests = {}
    for path in sorted((generated / TESTS_DIR).glob("*.yml")):
        document = yaml.safe_load(path.read_text())
        targets = {(path.parent / name).resolve() for name in document.get("rule_files", [])}
        if targets != {(generated / RULES_FILE).resolve()}:
            raise SystemExit(f"{path}: rule_files {document.get('rule_files')} is not the rules file {RULES_FILE}")
        tests[path.name] = document
    return tests


def _write_pruned(directory: Path, rules: Mapping[str, Any], name: str, test: Mapping[str, Any]) -> Path:
    """Write test file ``name`` under ``directory``'s tests, loading ``rules`` written beside it as
    its own rules file; returns the test file's path."""
    own_rules = directory / f"{Path(name).stem}.rules.yml"
    own_rules.write_text(yaml_text(rules))
    path = directory / TESTS_DIR / name
    path.write_text(yaml_text({**test, "rule_files": ["/".join([".."] * len(TESTS_DIR.parts) + [own_rules.name])]}))
    return path


def pruned_copies(generated: Path, directory: Path) -> list[Path]:
    """Copies of a generated set's test files under ``directory``, each against only the rules its
    checks read (:func:`pruned`): promtool passes and fails them as it does the originals, at about
    a quarter of the CPU (the committed set: 2.5 s against 9.9 s)."""
    document = yaml.safe_load((generated / RULES_FILE).read_text())
    (directory / TESTS_DIR).mkdir(parents=True, exist_ok=True)
    return [_write_pruned(directory, pruned(document, test), name, test)
            for name, test in load_tests(generated).items()]


# The run.

@dataclass(frozen=True)
class Outcome:
    mutant: Mutant
    status: str  # killed, survived, invalid or equivalent
    detail: str  # the test file that killed it, promtool's complaint, or the equivalence reason


def _run_in(directory: Path, document: Mapping[str, Any], tests: Mapping[str, Mapping[str, Any]],
            generated: Path, test_files: Sequence[str], rule: str | None = None) -> tuple[str, str]:
    """Write the rules file into ``directory`` (the generated set's layout) and check it, then run
    the given test files cheapest first up to the first failure, each against the rules it reads
    (:func:`pruned`); a file whose checks cannot read ``rule`` (the mutated one) is skipped."""
    (directory / TESTS_DIR).mkdir(parents=True)
    rules = directory / RULES_FILE
    rules.write_text(yaml_text(document))
    try:
        promtool.check_rules(rules)
    except promtool.PromtoolFailed as failed:
        return "invalid", failed.report.splitlines()[-1]
    ordered = sorted(test_files, key=lambda name: (generated / TESTS_DIR / name).stat().st_size)
    for name in ordered:
        own = pruned(document, tests[name])
        if rule is not None and rule not in {rule_name(b) for b in own["groups"][0]["rules"]}:
            continue
        path = _write_pruned(directory, own, name, tests[name])
        try:
            promtool.test_rules(path)
        except promtool.PromtoolFailed:
            return "killed", name
    return "survived", ""


def run(generated: Path, selected: Sequence[Mutant], jobs: int) -> list[Outcome]:
    """Run every selected mutant against the tests that see it, ``jobs`` promtool runs at a time,
    after checking the unmutated (re-serialised) rules pass those test files."""
    rules_text = (generated / RULES_FILE).read_text()
    document, rules = load_rules(rules_text)
    tests = load_tests(generated)
    seen_by = visibility(rules, tests)
    with tempfile.TemporaryDirectory(prefix="fairctl-mutation-") as scratch:

        def baseline(name: str) -> tuple[str, str]:
            return _run_in(Path(scratch) / f"baseline-{name}", document, tests, generated, [name])

        def one(numbered: tuple[int, Mutant]) -> Outcome:
            index, mutant = numbered
            directory = Path(scratch) / str(index)
            status, detail = _run_in(directory, mutated(document, mutant), tests, generated, seen_by[mutant.rule.name],
                                     mutant.rule.name)
            shutil.rmtree(directory)
            reason = equivalence(mutant.id)
            if status == "survived" and reason:
                return Outcome(mutant, "equivalent", reason)
            return Outcome(mutant, status, detail)

        with ThreadPoolExecutor(max_workers=jobs) as pool:
            needed = sorted({name for mutant in selected for name in seen_by[mutant.rule.name]})
            failing = [(s, d) for s, d in pool.map(baseline, needed) if s != "survived"]
            if failing:
                raise SystemExit(f"the unmutated rules fail ({failing[0][0]}: {failing[0][1]}); fix them first")
            outcomes = []
            for outcome in pool.map(one, enumerate(selected)):
                outcomes.append(outcome)
                if len(outcomes) % PROGRESS_EVERY == 0:
                    print(f"{len(outcomes)}/{len(selected)} mutants run", file=sys.stderr)
            return outcomes


def not_killed(generated: Path, names: set[str]) -> dict[str, str]:
    """Run every mutant of the rules ``names`` of a generated set (each one must have some), one
    promtool at a time; the status of each that was neither killed nor listed equivalent, by id."""
    text = (generated / RULES_FILE).read_text()
    selected = [x for x in mutants(text, evaluation_intervals(load_tests(generated))) if x.rule.name in names]
    if {x.rule.name for x in selected} != names:
        raise ValueError(f"no mutant of {sorted(names - {x.rule.name for x in selected})}")
    return {o.mutant.id: o.status for o in run(generated, selected, jobs=1) if o.status not in ("killed", "equivalent")}


def report(outcomes: Sequence[Outcome], seconds: float, jobs: int) -> str:
    """Per-kind counts, the score (killed over mutants neither invalid nor equivalent), then every
    survivor, invalid mutant and wrongly listed equivalent, one line each."""
    statuses = ("killed", "survived", "invalid", "equivalent")
    by_kind = {kind: Counter(o.status for o in outcomes if o.mutant.kind == kind) for kind in KINDS}
    lines = [f"{'kind':<12}{'mutants':>8}" + "".join(f"{s:>11}" for s in statuses)]
    for kind, counts in [*by_kind.items(), ("total", Counter(o.status for o in outcomes))]:
        if counts:
            lines.append(f"{kind:<12}{sum(counts.values()):>8}" + "".join(f"{counts[s]:>11}" for s in statuses))
    totals = Counter(o.status for o in outcomes)
    judged = totals["killed"] + totals["survived"]
    score = f"{100 * totals['killed'] / judged:.1f}%" if judged else "n/a"
    lines.append(f"score: {totals['killed']}/{judged} killed = {score}   ({seconds:.0f}s wall, {jobs} jobs)")
    for status, title in (("survived", "survivors"), ("invalid", "invalid mutants (promtool check rules)")):
        chosen = [o for o in outcomes if o.status == status]
        if chosen:
            lines.append(f"{title}:")
            lines += [f"  {o.mutant.id}  {o.mutant.description}" + (f"  [{o.detail}]" if o.detail else "")
                      for o in chosen]
    wrong = [o for o in outcomes if o.status == "killed" and equivalence(o.mutant.id)]
    lines += [f"listed as equivalent but killed by {o.detail}: {o.mutant.id}" for o in wrong]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.alert_mutation",
                                     description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="promtool runs at a time")
    parser.add_argument("--only", action="append", metavar="RULE", help="record or alert name (repeatable)")
    parser.add_argument("--list", action="store_true", help="list the mutants without running them")
    parser.add_argument("--dir", type=Path, default=Path(GENERATED_DIR),
                        help="the generated set (default: %(default)s)")
    args = parser.parse_args(argv)
    every = mutants((args.dir / RULES_FILE).read_text(), evaluation_intervals(load_tests(args.dir)))
    selected = [x for x in every if not args.only or x.rule.name in args.only]
    if not selected:
        parser.error(f"no mutant of {', '.join(args.only or [])}")
    if args.list:
        print("\n".join(f"{x.id}  {x.description}" for x in selected))
        return 0
    start = time.monotonic()
    outcomes = run(args.dir, selected, max(1, args.jobs))
    print(report(outcomes, time.monotonic() - start, max(1, args.jobs)))
    return 1 if any(o.status == "survived" for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
