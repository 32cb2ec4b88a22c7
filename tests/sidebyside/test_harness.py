"""The benchmark harness itself: its checks on synthetic records, its wire code, and one
small load through the real load generator against both brokers (behaviour only)."""

from __future__ import annotations

import numpy as np
import pytest
from bench.loadgen import analyze as an
from bench.loadgen.plan import group_seqs, make_groups
from bench.loadgen.runner import LoadSpec, Target, run_load
from bench.loadgen.wire import cut_frame


def _rec(rows):
    """rows: (consumer, group, gseq, seq, recv_time)"""
    cols = list(zip(*rows))
    cons, group, gseq, seq, rt = (np.array(c, dtype=np.int64) for c in cols)
    idx = np.zeros(len(cons), dtype=np.int64)
    for c in np.unique(cons):  # receive order within each consumer
        m = cons == c
        idx[m] = np.argsort(np.argsort(rt[m], kind="stable"), kind="stable")
    return {
        "cons": cons,
        "group": group,
        "gseq": gseq,
        "seq": seq,
        "rt": rt,
        "ts": rt - 1000,
        "red": np.zeros(len(cons), np.int8),
        "idx": idx,
    }


def test_group_seqs_number_each_group_from_zero():
    g = np.array([3, 1, 3, 3, 1, 0])
    assert group_seqs(g).tolist() == [0, 0, 1, 2, 1, 0]
    assert make_groups(7, 3, "rr").tolist() == [0, 1, 2, 0, 1, 2, 0]
    hot = make_groups(10_000, 100, "hot", hot_groups=1, hot_fraction=0.5)
    assert 0.45 < np.mean(hot == 0) < 0.55


def test_order_checks_tell_per_consumer_from_cross_consumer():
    # group 0: C0 gets 0, C1 gets 2, then C0 gets 1 -> one cross-consumer violation
    # group 1: C1 gets 1 then 0 -> one per-consumer violation
    rec = _rec(
        [(0, 0, 0, 0, 10), (1, 0, 2, 2, 20), (0, 0, 1, 1, 30), (1, 1, 1, 4, 11), (1, 1, 0, 3, 12)]
    )
    assert an.per_consumer_violations(rec) == 1
    assert an.cross_consumer_violations(rec) == 1
    used, moved, per_cons = an.groups_on_many_consumers(rec)
    assert (used, moved, per_cons) == (2, 1, [1, 2])


def test_clean_run_has_no_violations_and_counts_loss_and_duplicates():
    rows = [(g % 2, g, k, g * 10 + k, 100 * k + g) for g in range(4) for k in range(5)]
    rows.append(rows[3])  # a duplicate receipt of the same message
    rec = _rec(rows)
    expected = np.array(sorted({r[3] for r in rows} | {999}))
    res = an.analyze(rec, expected)
    assert res["missing"] == 1 and res["duplicates"] == 1
    assert res["order_violations_per_consumer"] == 0
    assert res["order_violations_cross_consumer"] == 0
    assert res["latency_ms"]["max"] == float("inf")  # the missing message


def test_percentiles_are_nearest_rank():
    p = an.percentiles(np.arange(1, 1001, dtype=float))
    assert (p["p50"], p["p99"], p["p999"]) == (500.0, 990.0, 999.0)


def test_cut_frame_with_and_without_content_length():
    body = b"a\x00b"
    f1 = b"MESSAGE\ncontent-length:3\nx:1\nx:2\n\n" + body + b"\x00"
    f2 = b"\n\r\nRECEIPT\r\nreceipt-id:7\r\n\r\n\x00"
    buf = f1 + f2 + b"MESSAGE\nx:"
    cmd, h, b, pos = cut_frame(buf, 0)
    assert (cmd, h[b"x"], b) == (b"MESSAGE", b"1", body)  # first header wins
    cmd, h, b, pos = cut_frame(buf, pos)
    assert (cmd, h[b"receipt-id"], b) == (b"RECEIPT", b"7", b"")
    assert cut_frame(buf, pos) is None


@pytest.mark.sidebyside
def test_load_generator_run_keeps_groups_on_one_consumer(sidebyside_broker, tmp_path):
    spec = LoadSpec(
        messages=3000,
        groups=20,
        consumers=3,
        destination="/queue/SBS.HARNESS",
        timeout=120,
        idle_timeout=20,
    )
    res = run_load(Target(sidebyside_broker.stomp_port), spec, tmp_path / "run")
    assert res["errors"] == []
    assert (res["missing"], res["duplicates"]) == (0, 0)
    assert res["order_violations_per_consumer"] == 0
    assert res["order_violations_cross_consumer"] == 0
    assert res["groups_used"] == 20 and res["groups_on_many_consumers"] == 0
    assert sum(res["messages_per_consumer"]) == 3000
