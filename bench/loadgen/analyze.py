"""Checks and numbers for one run, from the consumers' records.

Definitions (as in /work/shared/reference/activemq-over-stomp.md, "How the numbers are
defined"):
  throughput  = distinct messages received / (last receive - first send)
  latency     = receive time - bench-ts (time.time_ns() when the SEND was framed)
  loss        = bench-seq values sent but never received; duplicates = receipts beyond
                the first of a bench-seq
  per-consumer order: per consumer and group, bench-gseq must increase in receive
                order; a violation is a message whose gseq is below one that consumer
                already received for that group
  cross-consumer order: per group, across consumers in receive-time order; a violation
                is a message whose gseq is below one that a *different* consumer
                received earlier (two consumers working on one group at once)
  groups on >1 consumer: groups whose messages reached more than one consumer
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bench.loadgen.worker import REC_FIELDS

BIG = np.int64(1) << np.int64(32)


def load_records(outdir: Path, n_consumers: int) -> dict[str, np.ndarray]:
    cols: dict[str, list[np.ndarray]] = {name: [] for name, _ in REC_FIELDS}
    cons = []
    idx = []
    for c in range(n_consumers):
        lens = set()
        for name, code in REC_FIELDS:
            path = Path(outdir) / f"cons{c}.{name}"
            dtype = np.int64 if code == "q" else np.int8
            arr = np.fromfile(path, dtype=dtype) if path.exists() else np.zeros(0, dtype)
            cols[name].append(arr)
            lens.add(len(arr))
        n = min(lens) if lens else 0
        for name in cols:
            cols[name][-1] = cols[name][-1][:n]
        cons.append(np.full(n, c, dtype=np.int64))
        idx.append(np.arange(n, dtype=np.int64))
    out = {name: (np.concatenate(v) if v else np.zeros(0, np.int64)) for name, v in cols.items()}
    out["cons"] = np.concatenate(cons) if cons else np.zeros(0, np.int64)
    out["idx"] = np.concatenate(idx) if idx else np.zeros(0, np.int64)
    return out


def _segments(*keys: np.ndarray) -> np.ndarray:
    """Segment number (0, 1, ...) of sorted rows, a new segment where any key changes."""
    n = len(keys[0])
    if n == 0:
        return np.zeros(0, np.int64)
    change = np.zeros(n, dtype=bool)
    change[0] = True
    for k in keys:
        change[1:] |= k[1:] != k[:-1]
    return np.cumsum(change) - 1


def per_consumer_violations(rec: dict[str, np.ndarray]) -> int:
    if len(rec["seq"]) == 0:
        return 0
    order = np.lexsort((rec["idx"], rec["group"], rec["cons"]))
    g, c, s = rec["group"][order], rec["cons"][order], rec["gseq"][order]
    seg = _segments(c, g)
    key = seg * BIG + s
    runmax = np.maximum.accumulate(key)
    return int(np.count_nonzero(key[1:] < runmax[:-1]))


def cross_consumer_violations(rec: dict[str, np.ndarray]) -> int:
    if len(rec["seq"]) == 0:
        return 0
    order = np.lexsort((rec["idx"], rec["rt"], rec["group"]))
    g, c, s = rec["group"][order], rec["cons"][order], rec["gseq"][order]
    seg = _segments(g)
    base = seg * BIG
    total = 0
    for cid in np.unique(c):
        others = np.where(c != cid, s + 1, 0)  # +1 so "none yet" (0) is below any gseq
        runmax = np.maximum.accumulate(base + others)
        prev = np.empty_like(runmax)
        prev[0] = -1
        prev[1:] = runmax[:-1]
        best_other = np.where(prev >= base, prev - base - 1, -1)  # -1: none in this group
        mine = c == cid
        total += int(np.count_nonzero(mine & (s < best_other)))
    return total


def groups_on_many_consumers(rec: dict[str, np.ndarray]) -> tuple[int, int, list[int]]:
    """(groups seen, groups seen on >1 consumer, groups per consumer)."""
    if len(rec["seq"]) == 0:
        return 0, 0, []
    pairs = np.unique(np.stack([rec["group"], rec["cons"]], axis=1), axis=0)
    groups, counts = np.unique(pairs[:, 0], return_counts=True)
    n_cons = int(rec["cons"].max()) + 1
    per_cons = np.bincount(pairs[:, 1], minlength=n_cons).tolist()
    return len(groups), int(np.count_nonzero(counts > 1)), per_cons


def percentiles(values_ms: np.ndarray, missing: int = 0) -> dict[str, float | None]:
    """p50/p90/p99/p999/max; undelivered messages count as +inf (shown as 'more than')."""
    n = len(values_ms) + missing
    if n == 0:
        return {"p50": None, "p90": None, "p99": None, "p999": None, "max": None, "mean": None}
    v = np.sort(values_ms)
    out: dict[str, float | None] = {}
    for name, q in (("p50", 0.50), ("p90", 0.90), ("p99", 0.99), ("p999", 0.999)):
        k = int(np.ceil(q * n)) - 1  # nearest-rank
        out[name] = float(v[k]) if k < len(v) else float("inf")
    out["max"] = float("inf") if missing else float(v[-1])
    out["mean"] = float(v.mean()) if len(v) else None
    return out


def analyze(rec: dict[str, np.ndarray], expected_seqs: np.ndarray) -> dict:
    """All checks and numbers for records `rec` against the bench-seq values sent."""
    seq = rec["seq"]
    n_rec = len(seq)
    expected = np.unique(expected_seqs)
    # first receipt of each seq
    order = np.lexsort((rec["rt"], seq))
    s_sorted = seq[order]
    first = np.r_[True, s_sorted[1:] != s_sorted[:-1]] if n_rec else np.zeros(0, bool)
    uniq_idx = order[first]
    uniq = seq[uniq_idx]
    got = np.isin(expected, uniq, assume_unique=True)
    missing = int(np.count_nonzero(~got))
    unexpected = int(np.count_nonzero(~np.isin(uniq, expected, assume_unique=True)))
    duplicates = int(n_rec - len(uniq))
    lat_ms = (rec["rt"][uniq_idx] - rec["ts"][uniq_idx]) / 1e6
    out: dict = {
        "sent": len(expected),
        "received": len(uniq),
        "receipts": int(n_rec),
        "missing": missing,
        "duplicates": duplicates,
        "unexpected": unexpected,
        "redelivered": int(np.count_nonzero(rec["red"])),
        "latency_ms": percentiles(lat_ms, missing),
    }
    if len(uniq):
        t0 = int(rec["ts"].min())
        t1 = int(rec["rt"].max())
        dur = max(1e-9, (t1 - t0) / 1e9)
        out["first_send_ns"] = t0
        out["last_receive_ns"] = t1
        out["duration_s"] = dur
        out["throughput"] = len(uniq) / dur
    else:
        out["duration_s"] = None
        out["throughput"] = 0.0
    out["order_violations_per_consumer"] = per_consumer_violations(rec)
    out["order_violations_cross_consumer"] = cross_consumer_violations(rec)
    used, multi, per_cons = groups_on_many_consumers(rec)
    out["groups_used"] = used
    out["groups_on_many_consumers"] = multi
    out["groups_per_consumer"] = per_cons
    n_cons = int(rec["cons"].max()) + 1 if n_rec else 0
    out["messages_per_consumer"] = np.bincount(rec["cons"], minlength=n_cons).tolist()
    return out


def subset(rec: dict[str, np.ndarray], mask: np.ndarray) -> dict[str, np.ndarray]:
    return {k: v[mask] for k, v in rec.items()}
