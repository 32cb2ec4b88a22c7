"""Prometheus metrics in the text exposition format (version 0.0.4).

Gauges and counters are read from the core at scrape time. Two histograms
are kept as observations arrive:

- ``shoal_delivery_latency_seconds``: time from the broker accepting a
  message to handing it to a consumer, fed by the server's flush through
  :meth:`Metrics.observe_deliveries` (a few bisects per flush).
- ``shoal_journal_fsync_seconds``: duration of each journal fsync, taken
  from the sync pipeline's recent durations at scrape time
  (:meth:`Metrics.absorb_fsyncs`).

Pure: no clock, no I/O; time is always an argument. The ``/metrics``
handler that reads the broker and renders is in ``scrape.py``.
"""

from __future__ import annotations

import math
import operator
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from itertools import repeat
from typing import Any

from shoal.broker.model import GROUP_STATES
from shoal.management.broker_port import SessionView

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

FSYNC_BUCKETS = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
)
LATENCY_BUCKETS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    300.0,
)


class Histogram:
    """Cumulative-bucket histogram with Prometheus semantics (le = upper bound)."""

    __slots__ = ("bounds", "counts", "count", "sum")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(sorted(bounds))
        self.counts = [0] * (len(self.bounds) + 1)  # last one is +Inf
        self.count = 0
        self.sum = 0.0

    def observe(self, value: float) -> None:
        if value != value:  # NaN
            return
        if value < 0:
            value = 0.0
        self.counts[bisect_left(self.bounds, value)] += 1
        self.count += 1
        self.sum += value

    def cumulative(self) -> list[tuple[str, int]]:
        out = []
        running = 0
        for bound, n in zip(self.bounds, self.counts, strict=False):
            running += n
            out.append((_fmt(bound), running))
        out.append(("+Inf", self.count))
        return out


class Metrics:
    """The broker's metric registry: the two histograms and the scrape rendering.

    The server owns one (``BrokerServer.metrics``) so that its flush can feed
    delivery latencies; management falls back to its own when it is absent.
    """

    def __init__(self) -> None:
        self.delivery_latency = Histogram(LATENCY_BUCKETS)
        self.fsync = Histogram(FSYNC_BUCKETS)
        # cluster nodes only: seconds from a group's first SEND to its binding
        self.decision_latency = Histogram(LATENCY_BUCKETS)
        self._fsyncs_seen = 0

    def observe_deliveries(self, now_ms: float, timestamps_ms: Sequence[float]) -> None:
        """Many deliveries written at ``now_ms`` (the server's flush): one call."""
        h = self.delivery_latency
        bounds = h.bounds
        counts = h.counts
        n = len(timestamps_ms)
        if not n:
            return
        # A flush's deliveries mostly share one bucket: then three passes in C
        # (oldest, newest, sum) count them all, without a loop in Python.
        slowest = max((now_ms - min(timestamps_ms)) / 1000.0, 0.0)
        fastest = max((now_ms - max(timestamps_ms)) / 1000.0, 0.0)
        i = bisect_left(bounds, slowest)
        if i == bisect_left(bounds, fastest):
            counts[i] += n
            h.count += n
            h.sum += self._latency_sum(now_ms, timestamps_ms, fastest > 0.0)
            return

        # Spread over buckets j..i: sorted newest first, the latencies ascend,
        # so each bound cuts them with one bisect (a few per flush, rather
        # than a Python step per delivery).
        def latency(ts: float) -> float:
            return max((now_ms - ts) / 1000.0, 0.0)

        newest_first = sorted(timestamps_ms, reverse=True)
        below = 0  # deliveries in the buckets before k
        for k in range(bisect_left(bounds, fastest), i):
            upto = bisect_right(newest_first, bounds[k], key=latency)
            counts[k] += upto - below
            below = upto
        counts[i] += n - below
        h.count += n
        h.sum += self._latency_sum(now_ms, timestamps_ms, fastest > 0.0)

    @staticmethod
    def _latency_sum(now_ms: float, timestamps_ms: Sequence[float], all_positive: bool) -> float:
        """Seconds, summed. Each difference is taken first (in C, through
        map): ``n * now - sum(ts)`` on epoch milliseconds would lose ~10 us
        to rounding. Deliveries "before" their send (clock skew) count as 0."""
        if all_positive:
            total: float = sum(map(operator.sub, repeat(now_ms), timestamps_ms))
            return total / 1000.0
        return sum(max(now_ms - ts, 0.0) for ts in timestamps_ms) / 1000.0

    def absorb_fsyncs(self, sync_count: int, recent: Sequence[float]) -> None:
        """Catch up with a pipeline that counts syncs and keeps recent durations.

        ``recent`` holds the latest durations (oldest first, possibly trimmed);
        only the ones not seen before are observed.
        """
        new = sync_count - self._fsyncs_seen
        if new <= 0:
            if new < 0:  # a different pipeline (restart): start counting afresh
                self._fsyncs_seen = sync_count
            return
        for seconds in list(recent)[-new:] if new < len(recent) else list(recent):
            self.fsync.observe(seconds)
        self._fsyncs_seen = sync_count


# --- rendering --------------------------------------------------------------


def _fmt(value: float | int) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value != value:
        return "NaN"
    text = repr(float(value))
    return text[:-2] if text.endswith(".0") else text


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(labels: dict[str, str] | None) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{_escape(str(v))}"' for k, v in labels.items()) + "}"


class Exposition:
    """Builds the text format: one HELP/TYPE block per metric family."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def family(
        self,
        name: str,
        kind: str,
        help_text: str,
        samples: Iterable[tuple[dict[str, str] | None, float | int]],
    ) -> None:
        self.lines.append(f"# HELP {name} {help_text}")
        self.lines.append(f"# TYPE {name} {kind}")
        for labels, value in samples:
            self.lines.append(f"{name}{_labels(labels)} {_fmt(value)}")

    def histogram(self, name: str, help_text: str, hist: Histogram) -> None:
        self.lines.append(f"# HELP {name} {help_text}")
        self.lines.append(f"# TYPE {name} histogram")
        for le, n in hist.cumulative():
            self.lines.append(f'{name}_bucket{{le="{le}"}} {n}')
        self.lines.append(f"{name}_sum {_fmt(hist.sum)}")
        self.lines.append(f"{name}_count {hist.count}")

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


QUEUE_GAUGES = (
    ("depth", "shoal_queue_depth", "Messages waiting in the queue, not yet delivered."),
    ("in_flight", "shoal_queue_in_flight", "Messages delivered and not yet settled."),
    ("consumers", "shoal_queue_consumers", "Consumers attached to the queue."),
    ("bytes", "shoal_queue_bytes", "Bytes of message bodies the queue holds in memory."),
    (
        "paged_bytes",
        "shoal_queue_paged_bytes",
        "Bytes of message bodies paged out to the journal (address-full-policy page).",
    ),
)
QUEUE_COUNTERS = (
    ("enqueued", "shoal_queue_enqueued_total", "Messages accepted into the queue."),
    ("delivered", "shoal_queue_delivered_total", "Deliveries to consumers, redeliveries included."),
    ("acked", "shoal_queue_acked_total", "Messages acknowledged by consumers."),
    (
        "redelivered",
        "shoal_queue_redelivered_total",
        "Messages delivered again after NACK or loss.",
    ),
    (
        "dead_lettered",
        "shoal_queue_dead_lettered_total",
        "Messages moved to the dead-letter address.",
    ),
    ("expired", "shoal_queue_expired_total", "Messages that expired in the queue."),
)


def render(
    metrics: Metrics,
    *,
    info: dict[str, Any],
    queues: list[dict[str, Any]],
    group_states: dict[str, dict[str, int]],
    consumers: int,
    connections: int,
    cluster: dict[str, Any] | None = None,
    protocols: dict[str, dict[str, int]] | None = None,
) -> str:
    """The whole scrape. ``queues`` are ``Broker.queue_infos()`` items;
    ``cluster`` is ``/api/cluster``'s status on a cluster node."""
    out = Exposition()
    out.family(
        "shoal_build_info",
        "gauge",
        "Shoal version running; always 1.",
        [({"version": str(info.get("version", "unknown"))}, 1)],
    )
    if "uptime_s" in info:
        out.family(
            "shoal_uptime_seconds",
            "gauge",
            "Seconds since the broker started.",
            [(None, float(info["uptime_s"]))],
        )
    out.family(
        "shoal_connections",
        "gauge",
        "Open client connections, all protocols.",
        [(None, connections)],
    )
    if protocols is not None:
        out.family(
            "shoal_protocol_connections",
            "gauge",
            "Open connections by protocol.",
            [({"protocol": p}, v["connections"]) for p, v in sorted(protocols.items())],
        )
        out.family(
            "shoal_protocol_messages_delivered_total",
            "counter",
            "Messages delivered to the open connections of a protocol.",
            [({"protocol": p}, v["delivered"]) for p, v in sorted(protocols.items())],
        )
    out.family(
        "shoal_consumers",
        "gauge",
        "Subscriptions (consumers) across all queues.",
        [(None, consumers)],
    )
    out.family("shoal_queues", "gauge", "Queues, log queues included.", [(None, len(queues))])
    for key, name, help_text in QUEUE_GAUGES:
        out.family(
            name,
            "gauge",
            help_text,
            [({"queue": q["name"]}, q[key]) for q in queues if isinstance(q.get(key), int | float)],
        )
    out.family(
        "shoal_queue_oldest_message_age_seconds",
        "gauge",
        "Age of the oldest message waiting in the queue (0 when empty).",
        [({"queue": q["name"]}, (q.get("oldest_age_ms") or 0) / 1000.0) for q in queues],
    )
    for key, name, help_text in QUEUE_COUNTERS:
        out.family(
            name,
            "counter",
            help_text,
            [({"queue": q["name"]}, q[key]) for q in queues if isinstance(q.get(key), int | float)],
        )
    out.family(
        "shoal_queue_groups",
        "gauge",
        "Message groups of a queue by state.",
        [
            ({"queue": queue, "state": state}, counts.get(state, 0))
            for queue, counts in group_states.items()
            for state in GROUP_STATES
        ],
    )
    journal = info.get("journal") or {}
    for key, value in sorted(journal.items()):
        if (
            key.startswith(("syncs", "receipts"))
            or isinstance(value, bool)
            or not isinstance(value, int | float)
        ):
            continue
        metric = "shoal_journal_" + "".join(c if c.isalnum() else "_" for c in key)
        out.family(metric, "gauge", f"Journal statistic '{key}'.", [(None, value)])
    if "syncs_io_uring" in journal:
        out.family(
            "shoal_journal_syncs_io_uring_total",
            "counter",
            "Journal sync rounds written through io_uring (the rest: the sync thread).",
            [(None, journal["syncs_io_uring"])],
        )
    out.histogram("shoal_journal_fsync_seconds", "Duration of journal fsyncs.", metrics.fsync)
    out.histogram(
        "shoal_delivery_latency_seconds",
        "Time from the broker accepting a message to delivering it to a consumer.",
        metrics.delivery_latency,
    )
    if cluster is not None:
        _render_cluster(out, metrics, cluster)
    return out.text()


def _render_cluster(out: Exposition, metrics: Metrics, cluster: dict[str, Any]) -> None:
    """C10: forwarding, decisions and timeouts, per peer node where it has one."""
    for key, name, help_text in (
        (
            "forwarded",
            "shoal_cluster_forwarded_total",
            "Messages put in forward queues for the node holding their group.",
        ),
        (
            "duplicates_dropped",
            "shoal_cluster_duplicates_dropped_total",
            "Forwarded messages received again and dropped (dedup at the target).",
        ),
        ("decisions", "shoal_cluster_decisions_total", "Grouping decisions this node waited for."),
        (
            "decision_timeouts",
            "shoal_cluster_decision_timeouts_total",
            "Grouping decisions not made within the timeout (their SENDs got an ERROR).",
        ),
    ):
        out.family(name, "counter", help_text, [(None, cluster.get(key, 0))])
    out.family(
        "shoal_cluster_decisions_pending",
        "gauge",
        "Groups waiting for a grouping decision.",
        [(None, cluster["decisions_pending"])],
    )
    out.family(
        "shoal_cluster_fenced",
        "gauge",
        "1 while this node delivers none of its groups (no confirmed ZooKeeper session).",
        [(None, 1 if cluster.get("fenced") else 0)],
    )
    out.family(
        "shoal_cluster_fences_total",
        "counter",
        "Times this node fenced itself since start-up (docs/cluster.md).",
        [(None, cluster.get("fences", 0))],
    )
    peers = [n for n in cluster["nodes"] if not n["self"]]
    out.family(
        "shoal_cluster_forward_backlog",
        "gauge",
        "Messages waiting in the forward queue to a node.",
        [({"node": n["node"]}, n.get("forward_backlog", 0)) for n in peers],
    )
    out.family(
        "shoal_cluster_link_up",
        "gauge",
        "1 when the link to a node is connected.",
        [({"node": n["node"]}, 1 if n["state"] == "up" else 0) for n in peers],
    )
    out.histogram(
        "shoal_cluster_decision_latency_seconds",
        "Time from a new group's first SEND to its binding.",
        metrics.decision_latency,
    )


def protocol_counts(sessions: Iterable[SessionView]) -> dict[str, dict[str, int]]:
    """Open connections and their deliveries, by the sessions' protocol (stomp, amqp)."""
    out = {p: {"connections": 0, "delivered": 0} for p in ("amqp", "stomp")}
    for s in sessions:
        row = out.setdefault(s.protocol or "stomp", {"connections": 0, "delivered": 0})
        row["connections"] += 1
        row["delivered"] += int(s.messages_out or 0)
    return out
