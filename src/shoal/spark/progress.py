"""What ``shoal pipeline matching`` prints while it runs, and when it is done."""

from __future__ import annotations

import sys
import time
from typing import Any

from shoal.spark.client import log_view
from shoal.spark.jobs import LOG_QUEUES, MATCH_QUEUE, ORDERS_ARCHIVE_QUEUE, TRADES_ARCHIVE_QUEUE


def fmt(n: float) -> str:
    return f"{n:,.0f}"


class Progress:
    """Prints one line every ``interval`` s: batches, rows/s, lags, generator; totals at the end.

    The clock starts at ``started`` (the pipeline's start, Spark's start-up
    included). ``observe()`` counts every batch of every query, across
    restarts (a batch that runs again after a restart counts once).
    """

    def __init__(
        self,
        http: Any,
        queries: dict[str, Any],
        generated: list[int],
        total: int,
        interval: float,
        out: Any = None,
        *,
        started: float | None = None,
    ) -> None:
        self.http = http
        self.queries = queries
        self.generated = generated
        self.total = total
        self.interval = interval
        self.out = out or sys.stdout
        self.t0 = time.monotonic() if started is None else started
        self.batches: dict[str, dict[int, int]] = {}

    def observe(self) -> None:
        for name, q in self.queries.items():
            seen = self.batches.setdefault(name, {})
            for p in q.recentProgress:
                seen[int(p["batchId"])] = int(p["numInputRows"] or 0)  # a re-run replaces

    def totals(self) -> list[str]:
        elapsed = max(time.monotonic() - self.t0, 1e-9)
        out = [f"elapsed {elapsed:.1f} s"]
        for name, seen in self.batches.items():
            rows = sum(seen.values())
            batches = sum(1 for n in seen.values() if n)
            out.append(
                f"{name}: {fmt(rows)} rows in {batches} batches, {fmt(rows / elapsed)} rows/s"
            )
        return out

    def print_totals(self) -> None:
        print("; ".join(self.totals()), file=self.out, flush=True)

    def line(self) -> str:
        parts = [f"[{time.monotonic() - self.t0:6.1f}s]"]
        if self.generated[0] >= 0:
            parts.append(f"published {fmt(self.generated[0])}/{fmt(self.total)}")
        for name, q in self.queries.items():
            p = q.lastProgress
            if p:
                parts.append(
                    f"{name}: batch {p['batchId']} +{fmt(p['numInputRows'])} "
                    f"({fmt(p.get('processedRowsPerSecond') or 0)}/s)"
                )
        try:
            lags = [f"{q}={fmt(log_view(self.http, q)['lag'])}" for q in LOG_QUEUES]
            parts.append("lag " + " ".join(lags))
        except Exception as exc:  # the broker may be restarting; progress goes on
            parts.append(f"broker: {exc}")
        return "  ".join(parts)

    def print(self) -> None:
        print(self.line(), file=self.out, flush=True)


def done(http: Any, expected: int) -> bool:
    """Every expected order matched and archived, and every trade archived."""
    match = log_view(http, MATCH_QUEUE)  # read first: trades are published before its commit
    if sum(match["end"].values()) < expected or match["lag"]:
        return False
    return (
        not log_view(http, ORDERS_ARCHIVE_QUEUE)["lag"]
        and not log_view(http, TRADES_ARCHIVE_QUEUE)["lag"]
    )
