"""What the management layer remembers between requests: rate samples and
the metric registry. One per HTTP listener (built by ``routes.build_router``)."""

from __future__ import annotations

from typing import Any

from shoal.management.broker_port import BrokerPort
from shoal.management.http import Context
from shoal.management.metrics import Metrics
from shoal.management.rates import RateSampler


class ManagementState:
    def __init__(self) -> None:
        self.rates = RateSampler()
        self._metrics = Metrics()

    def metrics_for(self, ctx: Context) -> Metrics:
        """The server's registry when it keeps one (delivery latency), else ours."""
        registry = ctx.port.metrics()
        return registry if isinstance(registry, Metrics) else self._metrics

    def sample(
        self, ctx: Context, queues: list[dict[str, Any]] | None = None
    ) -> list[dict[str, Any]]:
        """Sample every queue's counters now; returns the queue infos used."""
        if queues is None:
            queues = ctx.port.queue_infos()
        self.rates.observe(ctx.now, queues)
        return queues

    def tick(self, port: BrokerPort, now: float) -> float:
        """The server's periodic sample, so rates and the chart do not depend
        on somebody reading them; returns when the next one is due."""
        self.rates.observe(now, port.queue_counters())
        due = self.rates.next_point_at
        return now + self.rates.history_interval if due is None else due
