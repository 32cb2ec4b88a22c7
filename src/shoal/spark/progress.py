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
    """Prints one line every ``interval`` s: batches, rows/s, lags, generator."""

    def __init__(self, http: Any, queries: dict[str, Any], generated: list[int], total: int,
                 interval: float, out: Any = None) -> None:
        self.http = http
        self.queries = queries
        self.generated = generated
        self.total = total
        self.interval = interval
        self.out = out or sys.stdout
        self.t0 = time.monotonic()

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
    return not log_view(http, ORDERS_ARCHIVE_QUEUE)["lag"] and not log_view(
        http, TRADES_ARCHIVE_QUEUE
    )["lag"]
