"""Which group each message goes to, and its number within the group.

Group distributions:
  rr      message i goes to group i mod G (round robin)
  random  uniform random group (seeded)
  hot     a fraction `hot_fraction` of messages goes to the first `hot_groups` groups,
          the rest uniformly to the others ("hot keys")

With P producers, group g belongs to producer g mod P, so each group has one producer
and bench-gseq (0, 1, 2, ... per group) is the order in which the broker accepted the
group's messages. Each producer sends its messages in bench-seq order.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

DISTS = ("rr", "random", "hot")


def make_groups(
    n: int,
    groups: int,
    dist: str = "rr",
    seed: int = 1,
    hot_groups: int = 1,
    hot_fraction: float = 0.5,
) -> np.ndarray:
    if groups < 1:
        raise ValueError("groups must be >= 1")
    rng = np.random.default_rng(seed)
    if dist == "rr":
        return np.arange(n, dtype=np.int64) % groups
    if dist == "random":
        return rng.integers(0, groups, n, dtype=np.int64)
    if dist == "hot":
        if not 0 < hot_groups < groups:
            raise ValueError("hot needs 0 < hot_groups < groups")
        hot = rng.random(n) < hot_fraction
        return np.where(hot, rng.integers(0, hot_groups, n), rng.integers(hot_groups, groups, n))
    raise ValueError(f"unknown group distribution {dist!r} ({', '.join(DISTS)})")


def group_seqs(group: np.ndarray) -> np.ndarray:
    """0, 1, 2, ... within each group, in message order."""
    n = len(group)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.argsort(group, kind="stable")
    g = group[order]
    starts = np.r_[0, np.flatnonzero(np.diff(g)) + 1]
    run_start = np.repeat(starts, np.diff(np.r_[starts, n]))
    out = np.empty(n, dtype=np.int64)
    out[order] = np.arange(n) - run_start
    return out


def write_plan(
    outdir: Path,
    n: int,
    groups: int,
    producers: int,
    *,
    dist: str = "rr",
    seed: int = 1,
    hot_groups: int = 1,
    hot_fraction: float = 0.5,
    seq_base: int = 0,
    group_base: int = 0,
    tag: str = "plan",
) -> list[dict]:
    """Write one plan per producer; returns [{plan_seq, plan_group, plan_gseq, count}]."""
    group = make_groups(n, groups, dist, seed, hot_groups, hot_fraction)
    gseq = group_seqs(group)
    seq = np.arange(n, dtype=np.int64) + seq_base
    out = []
    for p in range(producers):
        mask = (group % producers) == p
        files = {}
        for name, arr in (
            ("seq", seq[mask]),
            ("group", group[mask] + group_base),
            ("gseq", gseq[mask]),
        ):
            path = Path(outdir) / f"{tag}{p}.{name}"
            arr.astype(np.int64).tofile(path)
            files[f"plan_{name}"] = str(path)
        files["count"] = int(mask.sum())
        out.append(files)
    return out
