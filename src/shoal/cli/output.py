"""Output for people (aligned tables, short ages) and for scripts (JSON)."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any


def out(line: str = "") -> None:
    sys.stdout.write(line + "\n")


def print_json(obj: Any) -> None:
    out(json.dumps(obj, indent=2, sort_keys=False))


def table(rows: Sequence[Sequence[Any]], headers: Sequence[str]) -> None:
    """Columns padded to their widest cell; numeric columns right-aligned, None as '-'."""
    cells = [[("-" if v is None else str(v)) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    numeric = [
        all(isinstance(r[i], int | float) or r[i] is None for r in rows) and bool(rows)
        for i in range(len(headers))
    ]

    def fmt(row: Sequence[str]) -> str:
        parts = [
            c.rjust(w) if num else c.ljust(w)
            for c, w, num in zip(row, widths, numeric, strict=True)
        ]
        return "  ".join(parts).rstrip()

    out(fmt(list(headers)))
    for row in cells:
        out(fmt(row))


def age(ms: Any) -> str | None:
    """Milliseconds as the largest sensible unit: 999ms, 1.5s, 1m01s, 2h03m."""
    if ms is None:
        return None
    ms = int(ms)
    if ms < 1000:
        return f"{ms}ms"
    s = ms / 1000
    if s < 60:
        return f"{s:.1f}s"
    if s < 3600:
        return f"{int(s // 60)}m{int(s % 60):02d}s"
    return f"{int(s // 3600)}h{int(s % 3600 // 60):02d}m"
