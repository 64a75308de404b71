"""Plain-text tables for the terminal, logs and tickets: each column padded to its widest cell."""

from __future__ import annotations

from collections.abc import Sequence


def text_table(rows: Sequence[Sequence[str]], *, numbers_right: bool = False, indent: str = "") -> list[str]:
    """One line per row, columns two spaces apart; ``numbers_right`` right-aligns every column
    but the first (a name column, then figures), and no line ends in padding."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [(indent + "  ".join(cell.rjust(w) if numbers_right and i else cell.ljust(w)
                                for i, (cell, w) in enumerate(zip(row, widths, strict=True)))).rstrip()
            for row in rows]
