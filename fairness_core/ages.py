"""How fairctl writes an age or a wait for a person: short enough for a table column, exact
enough to act on. ``fairctl status``, ``simulate``, ``drill`` and the HTML report all use it."""

from __future__ import annotations


def format_age(seconds: float) -> str:
    """3.2s, 42s, 4m12s, 2h3m, 1d5h."""
    if seconds < 10:
        return f"{seconds:.1f}s"
    whole = int(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60}s"
    if whole < 86400:
        return f"{whole // 3600}h{whole % 3600 // 60}m"
    return f"{whole // 86400}d{whole % 86400 // 3600}h"


def human(seconds: float) -> str:
    """An age as :func:`format_age` writes it, with sub-second waits kept to the hundredth (an
    interactive job's wait is usually well under a second)."""
    return f"{seconds:.2f}s" if seconds < 1 else format_age(seconds)
