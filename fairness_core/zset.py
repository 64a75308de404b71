"""An in-memory sorted set with Redis's ordering (score, then member bytes), for the model."""

from __future__ import annotations

from typing import Iterator

from sortedcontainers import SortedList


class ZSet:
    """The handful of ZSET operations the reference model needs, each O(log n)."""

    __slots__ = ("_scores", "_order")

    def __init__(self) -> None:
        self._scores: dict[str, float] = {}
        self._order: SortedList = SortedList()

    def __len__(self) -> int:
        return len(self._scores)

    def __contains__(self, member: str) -> bool:
        return member in self._scores

    def score(self, member: str) -> float | None:
        return self._scores.get(member)

    def add(self, member: str, score: float, *, only_lower: bool = False, only_new: bool = False) -> None:
        """ZADD (``only_lower``: ZADD LT, update only when the new score is lower; ``only_new``:
        ZADD NX, add only a member not in the set)."""
        old = self._scores.get(member)
        if old is not None:
            if only_new or (only_lower and score >= old):
                return
            self._order.remove((old, member.encode("utf-8"), member))
        self._scores[member] = score
        self._order.add((score, member.encode("utf-8"), member))

    def incr(self, member: str, delta: float) -> float:
        score = self._scores.get(member, 0) + delta
        self.add(member, score)
        return score

    def remove(self, member: str) -> None:
        old = self._scores.pop(member, None)
        if old is not None:
            self._order.remove((old, member.encode("utf-8"), member))

    def first(self) -> tuple[str, float] | None:
        if not self._order:
            return None
        score, _, member = self._order[0]
        return member, score

    def up_to(self, max_score: float, limit: int) -> list[str]:
        """ZRANGEBYSCORE -inf max LIMIT 0 limit."""
        out = []
        for score, _, member in self._order.islice(0, limit):
            if score > max_score:
                break
            out.append(member)
        return out

    def head(self, k: int) -> list[tuple[str, float]]:
        """ZRANGE 0 k-1 WITHSCORES."""
        return [(m, s) for s, _, m in self._order.islice(0, k)]

    def top(self, k: int) -> list[tuple[str, float]]:
        """ZREVRANGE 0 k-1 WITHSCORES."""
        return [(m, s) for s, _, m in self._order.islice(max(0, len(self._order) - k), reverse=True)]

    def items(self) -> Iterator[tuple[str, float]]:
        return iter(self._scores.items())
