"""A pop reply's records become the same leases through the worker's fast path as through the
generic field readers: every field, any payload (tabs, non-ASCII text), bytes or text replies."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from fairness_core.jobs import Envelope, Record, popped_lease

JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
                    max_leaves=8)
NAME = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x2FF, exclude_characters="\t"), min_size=1,
               max_size=12)


@given(job_id=st.integers(1, 10**15), enqueued_ms=st.integers(0, 10**13), attempts=st.integers(0, 50),
       tier=NAME, task=NAME, reason=NAME | st.just("user waiting"), payload=JSON, queue=NAME, tenant=NAME)
def test_the_fast_path_makes_the_lease_the_record_makes(job_id: int, enqueued_ms: int, attempts: int, tier: str,
                                                        task: str, reason: str, payload: object, queue: str,
                                                        tenant: str) -> None:
    text = json.dumps(payload, separators=(",", ":"), ensure_ascii=False)
    record = Record(queue, tenant, attempts + 1, Envelope(job_id, enqueued_ms, attempts, tier, task, reason, text))
    expected = record.lease()
    line = record.job.encode()
    assert popped_lease(queue, tenant, attempts + 1, line) == expected
    assert popped_lease(queue.encode(), tenant.encode(), attempts + 1, line.encode()) == expected
