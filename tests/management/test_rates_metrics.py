"""Rate sampling and the Prometheus exposition, as pure code."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.management.metrics import LATENCY_BUCKETS, Exposition, Histogram, Metrics, render
from shoal.management.rates import RateSampler


def q(name: str, enq: int, deliv: int = 0, acked: int = 0, depth: int = 0) -> dict:
    return {"name": name, "enqueued": enq, "delivered": deliv, "acked": acked, "depth": depth}


def test_rates_unknown_until_two_samples_then_counter_change_over_time():
    r = RateSampler(window=10.0)
    r.observe(100.0, [q("a", 0)])
    assert r.rates("a", 100.0) == {"enqueue": None, "deliver": None, "ack": None}
    r.observe(102.0, [q("a", 50, 40, 30)])
    assert r.rates("a", 102.0) == {"enqueue": 25.0, "deliver": 20.0, "ack": 15.0}


def test_rates_use_the_last_window_only():
    r = RateSampler(window=10.0, min_interval=0.5)
    r.observe(0.0, [q("a", 0)])
    r.observe(10.0, [q("a", 1000)])  # a burst long ago
    for t in range(11, 31):
        r.observe(float(t), [q("a", 1000 + 5 * (t - 10))])
    assert r.rates("a", 30.0)["enqueue"] == pytest.approx(5.0)


def test_frequent_reads_do_not_shrink_the_window_to_nothing():
    r = RateSampler(window=10.0, min_interval=1.0)
    r.observe(0.0, [q("a", 0)])
    for i in range(1, 41):  # a read every 50 ms
        r.observe(i * 0.05, [q("a", i)])
    assert r.rates("a", 2.0)["enqueue"] == pytest.approx(20.0)


def test_recreated_queue_and_deleted_queue_restart_the_ring():
    r = RateSampler()
    r.observe(0.0, [q("a", 100), q("b", 10)])
    r.observe(1.0, [q("a", 5)])  # 'a' re-created with fresh counters, 'b' deleted
    assert r.rates("a", 1.0)["enqueue"] is None
    assert r.rates("b", 1.0)["enqueue"] is None
    r.observe(2.0, [q("a", 15)])
    assert r.rates("a", 2.0)["enqueue"] == pytest.approx(10.0)


def test_history_and_sparklines_are_bounded():
    r = RateSampler(history_interval=2.0, history_points=5, sparkline_points=3)
    for t in range(0, 40, 2):
        r.observe(float(t), [q("a", t * 10, depth=t)])
    assert len(r.history) == 5
    assert r.history[-1]["enqueue"] == pytest.approx(10.0)
    assert r.depth_history("a") == [34, 36, 38]


def test_history_points_sit_on_the_declared_interval_whatever_reads_come_between():
    r = RateSampler(history_interval=2.0)
    timer = [0.0, 1.999, 4.0, 5.95, 8.01]  # the server's samples, a little early or late
    reads = [0.3, 0.7, 2.5, 3.1, 3.7, 6.5, 7.7]  # console polls and scrapes in between
    for t in sorted(timer + reads):
        r.observe(t, [q("a", int(t * 100), depth=1)])
    assert [p["t"] for p in r.history] == timer
    assert r.next_point_at == pytest.approx(10.0)
    assert r.history[-1]["enqueue"] == pytest.approx(100.0)
    assert r.depth_history("a") == [1] * len(timer)


def test_a_gap_without_samples_starts_the_grid_again():
    r = RateSampler(history_interval=2.0)
    for t in (0.0, 2.0, 9.3, 11.3):
        r.observe(t, [q("a", 0)])
    assert [p["t"] for p in r.history] == [0.0, 2.0, 9.3, 11.3]
    assert r.next_point_at == pytest.approx(13.3)


def test_the_servers_tick_alone_makes_the_rates_and_chart_of_unwatched_traffic():
    from shoal.broker.core import Broker
    from shoal.broker.settings import AddressSettings
    from shoal.management.sampling import ManagementState
    from shoal.server.management_port import ServerPort
    from support import PortServer

    broker = Broker(AddressSettings(), 0.0)
    port = ServerPort(PortServer(broker))
    state = ManagementState()
    assert state.tick(port, 0.0) == pytest.approx(state.rates.history_interval)
    broker.connect(1, 0.5)
    for _ in range(100):  # a burst between two ticks, nobody reading
        broker.send(1, "/queue/orders", {}, b"x", 0.5)
    assert state.tick(port, 2.0) == pytest.approx(4.0)
    assert state.rates.history[-1]["enqueue"] == pytest.approx(50.0)
    assert state.rates.rates("orders", 2.0)["enqueue"] is None  # one sample of it yet
    state.tick(port, 4.0)
    assert state.rates.total_rates(4.0)["enqueue"] == pytest.approx(25.0)


@given(st.lists(st.tuples(st.floats(0.0, 5.0), st.integers(0, 1000)), max_size=50))
def test_rates_are_never_negative_or_nan(steps):
    r = RateSampler()
    t, total = 0.0, 0
    for dt, inc in steps:
        t += dt
        total += inc
        r.observe(t, [q("a", total, total, total)])
        for v in r.rates("a", t).values():
            assert v is None or (v >= 0 and v == v)


def test_histogram_buckets_are_cumulative_with_inf():
    hist = Histogram([0.1, 1.0])
    for v in (0.05, 0.1, 0.5, 2.0, -1.0):
        hist.observe(v)
    assert hist.cumulative() == [("0.1", 3), ("1", 4), ("+Inf", 5)]
    assert hist.count == 5 and hist.sum == pytest.approx(2.65)


def test_delivery_latency_and_fsync_absorption():
    m = Metrics()
    m.observe_deliveries(10_500.0, [10_000])
    assert m.delivery_latency.count == 1 and m.delivery_latency.sum == pytest.approx(0.5)
    m.absorb_fsyncs(3, [0.001, 0.002, 0.003])
    m.absorb_fsyncs(3, [0.001, 0.002, 0.003])  # nothing new
    m.absorb_fsyncs(5, [0.002, 0.003, 0.004, 0.005])  # trimmed list, two new
    assert m.fsync.count == 5
    assert m.fsync.sum == pytest.approx(0.015)


LINE = re.compile(
    r'^[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\\\|\\"|\\n)*",?)*\})? '
    r"(-?[0-9.e+-]+|\+Inf|-Inf|NaN)$"
)


def test_exposition_is_well_formed_and_escapes_labels():
    queues = [
        {
            "name": 'we"ird\\name\n',
            "depth": 1,
            "in_flight": 0,
            "consumers": 0,
            "bytes": 3,
            "enqueued": 1,
            "delivered": 0,
            "acked": 0,
            "redelivered": 0,
            "dead_lettered": 0,
            "expired": 0,
            "oldest_age_ms": 1500,
        }
    ]
    text = render(
        Metrics(),
        info={"version": "1", "uptime_s": 2.5, "journal": {"bytes": 10}},
        queues=queues,
        group_states={'we"ird\\name\n': {"ready": 1}},
        consumers=0,
        connections=0,
    )
    assert text.endswith("\n")
    seen_types: set[str] = set()
    for line in text.splitlines():
        if line.startswith("# TYPE"):
            name = line.split()[2]
            assert name not in seen_types
            seen_types.add(name)
        elif not line.startswith("# HELP"):
            assert LINE.match(line), line
    assert 'shoal_queue_depth{queue="we\\"ird\\\\name\\n"} 1' in text
    assert "shoal_queue_oldest_message_age_seconds" in text and " 1.5\n" in text
    assert "shoal_journal_bytes 10" in text


def test_exposition_family_lines():
    out = Exposition()
    out.family("x_total", "counter", "help", [({"a": "1"}, 2), (None, 3.5)])
    assert (
        out.text() == '# HELP x_total help\n# TYPE x_total counter\nx_total{a="1"} 2\nx_total 3.5\n'
    )


@settings(max_examples=300, deadline=None)
@given(
    st.floats(0, 1e7, allow_nan=False),
    st.lists(st.floats(0, 1e7, allow_nan=False), max_size=40),
)
def test_observe_deliveries_counts_as_one_observe_per_delivery(now_ms, stamps):
    """Both paths (one bucket, and cut per bucket) agree with observe()."""
    got, one_by_one = _flush_and_one_by_one(now_ms, stamps)
    assert got.counts == one_by_one.counts
    assert got.count == one_by_one.count == len(stamps)
    assert got.sum == pytest.approx(one_by_one.sum, rel=1e-9, abs=1e-9)


def _flush_and_one_by_one(now_ms: float, stamps: list[float]) -> tuple[Histogram, Histogram]:
    """The latency histogram of one observe_deliveries() call, and the same
    deliveries observed one at a time."""
    batch = Metrics()
    batch.observe_deliveries(now_ms, stamps)
    one_by_one = Histogram(LATENCY_BUCKETS)
    for ts in stamps:
        one_by_one.observe(max(now_ms - ts, 0.0) / 1000.0)
    return batch.delivery_latency, one_by_one


def test_observe_deliveries_of_one_flush_land_in_their_bucket():
    now = 1_795_000_000_000.0  # epoch ms, as the server passes them
    m = Metrics()
    m.observe_deliveries(now, [now - 3, now - 4, now - 3.5])  # one bucket: 2.5-5 ms
    m.observe_deliveries(now, [now + 1])  # a producer's clock ahead: counts as 0
    m.observe_deliveries(now, [])
    hist = m.delivery_latency
    assert hist.count == 4
    assert hist.sum == pytest.approx(0.0105)
    assert dict(hist.cumulative())["0.0005"] == 1
    assert dict(hist.cumulative())["0.005"] == 4


@pytest.mark.parametrize("spread_ms", [0.1, 400.0], ids=["one-bucket", "many-buckets"])
def test_latency_sum_keeps_its_precision_on_epoch_milliseconds(spread_ms):
    """The server passes epoch milliseconds (~1.8e12): a sum taken as
    ``n * now - sum(ts)`` rounds away tens of microseconds; each difference
    first keeps the sum to what observe() adds up one by one."""
    now = 1_795_000_000_000.7
    stamps = [now - 3.1 - spread_ms * i / 50 for i in range(50)]
    got, one_by_one = _flush_and_one_by_one(now, stamps)
    assert got.counts == one_by_one.counts
    assert got.sum == pytest.approx(one_by_one.sum, rel=1e-12)
