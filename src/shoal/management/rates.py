"""Message rates from counters sampled over time. Pure: time is an argument.

The core keeps cumulative counters per queue (enqueued, delivered, acked).
Rates are what an operator wants to see, so the management layer samples
those counters: the server every ``history_interval`` seconds (``next_point_at``
says when the next sample is due), and every read besides (API calls, the
console's polling, Prometheus scrapes). It keeps a small ring of samples per
queue; a rate is the counter's change over the last ``window`` seconds.

It also keeps a broker-wide history for the console's chart (one point per
``history_interval`` seconds, for the last ``history_points`` points) and a
short depth history per queue for the sparklines. Points sit on a fixed grid:
a sample a little early for its slot (a timer's jitter) still makes its
point, and reads between slots make none.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

COUNTERS = ("enqueued", "delivered", "acked")
RATE_NAMES = {"enqueued": "enqueue", "delivered": "deliver", "acked": "ack"}
# A sample this early (as a share of history_interval) still takes its slot's point.
POINT_SLACK = 0.1


@dataclass(slots=True)
class _Ring:
    samples: deque[tuple[float, tuple[int, ...]]] = field(default_factory=deque)
    depths: deque[int] = field(default_factory=deque)


class RateSampler:
    def __init__(
        self,
        *,
        window: float = 10.0,
        min_interval: float = 0.5,
        history_interval: float = 2.0,
        history_points: int = 300,
        sparkline_points: int = 60,
        min_rate_span: float = 1.0,
    ) -> None:
        self.window = window
        self.min_rate_span = min_rate_span
        self.min_interval = min_interval
        self.history_interval = history_interval
        self.history_points = history_points
        self.sparkline_points = sparkline_points
        self._queues: dict[str, _Ring] = {}
        self._totals = _Ring()
        self.history: deque[dict[str, Any]] = deque(maxlen=history_points)
        self._last_point = float("-inf")
        #: when the next history point is due; None until the first sample
        self.next_point_at: float | None = None

    # --- sampling -----------------------------------------------------------

    def observe(self, now: float, infos: Iterable[dict[str, Any]]) -> None:
        """Record the counters of every queue (``Broker.queue_infos()`` items)."""
        point = self._point_due(now)
        seen: set[str] = set()
        totals = [0, 0, 0]
        depth_total = 0
        for info in infos:
            name = info.get("name")
            if not isinstance(name, str):
                continue
            seen.add(name)
            values = tuple(int(info.get(c) or 0) for c in COUNTERS)
            for i, v in enumerate(values):
                totals[i] += v
            depth = int(info.get("depth") or 0)
            depth_total += depth
            ring = self._queues.get(name)
            if ring is None:
                ring = self._queues[name] = _Ring(deque(), deque(maxlen=self.sparkline_points))
            self._add(ring, now, values)
            if point:
                ring.depths.append(depth)
        for gone in set(self._queues) - seen:
            del self._queues[gone]
        self._add(self._totals, now, tuple(totals))
        if point:
            rates = self._rates(self._totals, now)
            self.history.append(
                {
                    "t": round(now, 3),
                    "enqueue": rates["enqueue"],
                    "deliver": rates["deliver"],
                    "ack": rates["ack"],
                    "depth": depth_total,
                }
            )

    def _point_due(self, now: float) -> bool:
        """Whether this sample makes a history point; moves the grid on if so."""
        interval = self.history_interval
        due = self.next_point_at
        if due is not None and now >= self._last_point and now < due - interval * POINT_SLACK:
            return False
        # On the grid while samples keep up; after a gap (or the clock going
        # back) the grid starts again from now.
        on_grid = due is not None and self._last_point <= now < due + interval
        self.next_point_at = (due if on_grid and due is not None else now) + interval
        self._last_point = now
        return True

    def _add(self, ring: _Ring, now: float, values: tuple[int, ...]) -> None:
        """Append the current values; between older samples keep >= min_interval."""
        samples = ring.samples
        if samples:
            last_t, last_v = samples[-1]
            # Clock going backwards, or counters going down (a queue re-created,
            # or, for the totals, a queue deleted): start the ring over.
            if now < last_t or any(v < lv for v, lv in zip(values, last_v, strict=True)):
                samples.clear()
        samples.append((now, values))
        if len(samples) >= 3 and samples[-2][0] - samples[-3][0] < self.min_interval:
            del samples[-2]
        horizon = now - 2 * self.window
        while len(samples) > 2 and samples[1][0] <= horizon:
            samples.popleft()

    # --- reading ------------------------------------------------------------

    def _rates(self, ring: _Ring, now: float) -> dict[str, float | None]:
        samples = ring.samples
        if len(samples) < 2:
            return {RATE_NAMES[c]: None for c in COUNTERS}
        newest_t, newest_v = samples[-1]
        anchor_t, anchor_v = samples[0]
        for t, v in samples:  # the oldest sample inside the window
            if newest_t - t <= self.window:
                anchor_t, anchor_v = t, v
                break
        if anchor_t == newest_t:
            anchor_t, anchor_v = samples[-2]
        dt = newest_t - anchor_t
        if dt < self.min_rate_span:  # too short to say anything (several reads in one poll)
            return {RATE_NAMES[c]: None for c in COUNTERS}
        return {
            RATE_NAMES[c]: round(max(0, newest_v[i] - anchor_v[i]) / dt, 3)
            for i, c in enumerate(COUNTERS)
        }

    def rates(self, queue: str, now: float) -> dict[str, float | None]:
        """Per-second enqueue/deliver/ack rates of one queue; None until known."""
        ring = self._queues.get(queue)
        if ring is None:
            return {RATE_NAMES[c]: None for c in COUNTERS}
        return self._rates(ring, now)

    def total_rates(self, now: float) -> dict[str, float | None]:
        return self._rates(self._totals, now)

    def depth_history(self, queue: str) -> list[int]:
        ring = self._queues.get(queue)
        return list(ring.depths) if ring is not None else []
