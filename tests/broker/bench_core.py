"""Core micro-benchmark (not collected by pytest).

    .venv/bin/python tests/broker/bench_core.py            # all scenarios
    .venv/bin/python tests/broker/bench_core.py --quick

Measures broker-core CPU per message for send + dispatch + ack (the part of
the ~43 us/message ActiveMQ budget the core may use), and the memory the
core keeps per tracked group with a million groups bound and idle.
"""

from __future__ import annotations

import argparse
import gc
import os
import time

from shoal.broker.core import Broker
from shoal.broker.settings import AddressSettings


def rss_bytes() -> int:
    with open(f"/proc/{os.getpid()}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def run(
    n: int,
    groups: int,
    consumers: int,
    ack_mode: str = "client-individual",
    batch: int = 500,
    persistent: bool = False,
    selector: str | None = None,
) -> tuple[float, Broker]:
    b = Broker(AddressSettings(), 0.0)
    b.connect(1, 0.0)
    sub_headers = {"selector": selector} if selector else {}
    for i in range(consumers):
        b.connect(100 + i, 0.0)
        b.subscribe(100 + i, "s", "/queue/bench", ack_mode, sub_headers, 0.0)
    body = b"x" * 100
    hdrs = [
        {
            "JMSXGroupID": f"group-{g}",
            "persistent": "true" if persistent else "false",
            "price": "100",
        }
        for g in range(min(groups, 100_000))
    ]
    send = b.send
    ack = b.ack
    take = b.take_effects
    take_records = b.take_records
    now = 1.0
    gc.collect()
    gc.disable()
    t0 = time.process_time()
    sent = 0
    while sent < n:
        k = min(batch, n - sent)
        for j in range(sent, sent + k):
            if groups <= 100_000:
                h = hdrs[j % groups]
            else:
                h = {"JMSXGroupID": f"group-{j % groups}"}
            send(1, "/queue/bench", h, body, now)
        sent += k
        effects = take()
        if ack_mode != "auto":
            for e in effects:
                ack(e.conn_id, e.ack_id, now)
        take()
        take_records()
    dt = time.process_time() - t0
    gc.enable()
    return dt / n * 1e6, b


def blocked_groups(n: int, blocked: int) -> float:
    """``blocked`` groups with backlog stuck at a consumer without credit; time a
    flow of other groups to a second consumer (G5: blocked groups cost nothing)."""
    b = Broker(AddressSettings(), 0.0)
    b.connect(1, 0.0)
    b.connect(100, 0.0)
    prefetch = str(max(1, blocked))  # one in flight per stuck group, never acked
    b.subscribe(100, "slow", "/queue/bench", "client-individual", {"prefetch-count": prefetch}, 0.0)
    body = b"x" * 100
    stuck = [{"JMSXGroupID": f"stuck-{g}"} for g in range(blocked)]
    for h in stuck:  # one in flight per group binds them all to 'slow' ...
        b.send(1, "/queue/bench", h, body, 1.0)
    for _ in range(4):  # ... which has no credit left for their backlog
        for h in stuck:
            b.send(1, "/queue/bench", h, body, 1.0)
    if not blocked:  # same shape: 'slow' present but with no credit
        b.send(1, "/queue/bench", {"JMSXGroupID": "stuck"}, body, 1.0)
    b.connect(101, 0.0)
    b.subscribe(101, "fast", "/queue/bench", "client-individual", {}, 0.0)
    assert all(e.sub_id == "slow" for e in b.take_effects())
    hdrs = [{"JMSXGroupID": f"flow-{g}"} for g in range(100)]
    gc.collect()
    gc.disable()
    t0 = time.process_time()
    for j in range(n):
        b.send(1, "/queue/bench", hdrs[j % 100], body, 1.0)
        if j % 500 == 499:
            for e in b.take_effects():
                b.ack(e.conn_id, e.ack_id, 1.0)
    dt = time.process_time() - t0
    gc.enable()
    q = b.queue("bench")
    assert q.delivered >= blocked + n - 500, "the flow must not wait behind blocked groups"
    return dt / n * 1e6


def rejected_groups(n: int, rejected: int) -> float:
    """``rejected`` groups whose head no consumer's selector accepts; time a flow
    of other groups (selectors keep G5: what nobody accepts costs nothing)."""
    b = Broker(AddressSettings(), 0.0)
    b.connect(1, 0.0)
    for i in range(2):
        b.connect(100 + i, 0.0)
        b.subscribe(100 + i, "s", "/queue/bench", "client-individual", {"selector": "k = 1"}, 0.0)
    body = b"x" * 100
    for g in range(rejected):
        for _ in range(2):
            b.send(1, "/queue/bench", {"JMSXGroupID": f"no-{g}", "k": "2"}, body, 1.0)
    hdrs = [{"JMSXGroupID": f"flow-{g}", "k": "1"} for g in range(100)]
    gc.collect()
    gc.disable()
    t0 = time.process_time()
    for j in range(n):
        b.send(1, "/queue/bench", hdrs[j % 100], body, 1.0)
        if j % 500 == 499:
            for e in b.take_effects():
                b.ack(e.conn_id, e.ack_id, 1.0)
    dt = time.process_time() - t0
    gc.enable()
    assert b.queue("bench").delivered >= n - 500, "the flow must not wait behind rejected groups"
    return dt / n * 1e6


def existing_groups(b: Broker, n: int, groups: int) -> float:
    """Messages to random already-bound groups of a queue tracking ``groups``."""
    import random

    rnd = random.Random(7)
    hdrs = [{"JMSXGroupID": f"group-{rnd.randrange(groups)}"} for _ in range(n)]
    body = b"x" * 100
    gc.collect()
    gc.disable()
    t0 = time.process_time()
    for j in range(n):
        b.send(1, "/queue/bench", hdrs[j], body, 2.0)
        if j % 500 == 499:
            for e in b.take_effects():
                b.ack(e.conn_id, e.ack_id, 2.0)
    dt = time.process_time() - t0
    gc.enable()
    return dt / n * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeat", type=int, default=3, help="best of N runs (CPU time)")
    args = ap.parse_args()
    n = 50_000 if args.quick else 300_000
    for label, kw in [
        ("100 groups / 4 consumers, client-individual", dict(groups=100, consumers=4)),
        ("100 groups / 4 consumers, auto-ack", dict(groups=100, consumers=4, ack_mode="auto")),
        (
            "100 groups / 4 consumers, persistent, client-individual",
            dict(groups=100, consumers=4, persistent=True),
        ),
        ("ungrouped-ish (1 group) / 1 consumer", dict(groups=1, consumers=1)),
        (
            "100 groups / 4 consumers, selector 'price > 10' (matches)",
            dict(groups=100, consumers=4, selector="price > 10"),
        ),
    ]:
        us = min(run(n, **kw)[0] for _ in range(args.repeat))  # type: ignore[arg-type]
        print(f"{label:58s} {us:6.2f} us/msg (send+dispatch+ack)")

    for blocked in (0, 10_000):
        us = min(blocked_groups(n // 2, blocked) for _ in range(args.repeat))
        print(
            f"flow of 100 groups next to {blocked:,} groups blocked with backlog"
            f"{'':14s} {us:6.2f} us/msg"
        )

    for rejected in (0, 10_000):
        us = min(rejected_groups(n // 2, rejected) for _ in range(args.repeat))
        print(
            f"selectors: flow next to {rejected:,} groups no selector accepts"
            f"{'':12s} {us:6.2f} us/msg"
        )

    big = 200_000 if args.quick else 1_000_000
    gc.collect()
    base = rss_bytes()
    us, b = run(big, groups=big, consumers=4)
    gc.collect()
    after = rss_bytes()
    q = b.queue("bench")
    print(
        f"{big:,} groups / 4 consumers (every message a new group)       "
        f"{us:6.2f} us/msg; tracked groups {len(q.groups):,}; "
        f"RSS {(after - base) / len(q.groups):.0f} bytes/group"
    )
    us = existing_groups(b, n, big)
    print(f"then messages to random existing groups of those {big:,}{'':11s} {us:6.2f} us/msg")


if __name__ == "__main__":
    main()
