"""A pop reply's records become the same leases through the worker's fast path as through the
generic field readers: every field, any payload (tabs, non-ASCII text), bytes or text replies, names
stored as they are (as older releases stored every one) or as codes."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from fairness_core.jobs import CODE_MARK, Envelope, Record, named, popped_lease

JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
                    max_leaves=8)
NAME = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x2FF, exclude_characters="\t"), min_size=1,
               max_size=12)


NAMES = st.lists(NAME, min_size=1, max_size=5, unique=True)


@st.composite
def stored(draw: st.DrawFn, names: list[str]) -> str:
    """A name field as an envelope stores it: a name of its own, or the code of one of ``names``."""
    code = draw(st.integers(0, len(names)))
    return draw(NAME) if code == 0 else f"{CODE_MARK}{code}"


@given(job_id=st.integers(1, 10**15), enqueued_ms=st.integers(0, 10**13), attempts=st.integers(0, 50),
       names=NAMES, data=st.data(), payload=JSON, queue=NAME, tenant=NAME)
def test_the_fast_path_makes_the_lease_the_record_makes(job_id: int, enqueued_ms: int, attempts: int,
                                                        names: list[str], data: st.DataObject, payload: object,
                                                        queue: str, tenant: str) -> None:
    tier, task, reason = (data.draw(stored(names)) for _ in range(3))
    text = json.dumps(payload, separators=(",", ":"), ensure_ascii=False)
    record = Record(queue, tenant, attempts + 1, Envelope(job_id, enqueued_ms, attempts, tier, task, reason, text))
    expected = record.lease(names)
    assert (expected.task, expected.reason) == (named(task, names), named(reason, names))
    line = record.job.encode()
    assert popped_lease(names, queue, tenant, attempts + 1, line) == expected
    assert popped_lease(names, queue.encode(), tenant.encode(), attempts + 1, line.encode()) == expected


def test_a_code_reads_back_its_name_and_anything_else_reads_as_it_is() -> None:
    names = ["free", "password_reset", "a human is blocked on this"]
    assert [named(f"{CODE_MARK}{i}", names) for i in (1, 2, 3)] == names
    assert named("password_reset", names) == "password_reset"
    # A code past the list (only a group whose config key went under queued jobs holds one) shows.
    assert [named(f"{CODE_MARK}{text}", names) for text in ("4", "0", "x", "")] == [
        f"{CODE_MARK}4", f"{CODE_MARK}0", f"{CODE_MARK}x", CODE_MARK]
