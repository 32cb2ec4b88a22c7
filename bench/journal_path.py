"""W2's journal work per message, without a broker: a revision against this tree.

    python -m bench.journal_path --base main --compile

One process per build and rep (the order alternating from rep to rep), each
with that tree's sources first on PYTHONPATH, runs what the broker's event
loop does for W2's persistent messages: per round, ``append`` of 64 new
256-byte messages (the load generator's six headers) and of 64 acks of the
previous round's, then the io_uring path's ``plan_sync``, the write
(``os.pwrite``; its time is not counted) and ``finish_sync`` (the index); a round that
must rotate a segment runs ``sync()`` instead, not counted. The records are
made just before they are appended, as the broker makes them.
Reported per build: the median over the reps of the thread CPU time per
message of each phase and of their sum. ``--compile`` builds the checked-out
base's compiled modules (bench/builds.py); this tree runs as it is. Writes
bench/recorded/journal-path-<date>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.builds import REPO, checkout, implementation, short_revs
from bench.journal_codec import BATCH, QUEUE, w2_message, write_record

PHASES = ("append", "plan_sync", "finish_sync")


def child(rounds: int) -> None:
    """Runs in the measured process; prints us per message of each phase as JSON."""
    from shoal.records import MessageRemoved
    from shoal.store.journal import JournalStore

    spent = dict.fromkeys(PHASES, 0.0)
    clock = time.thread_time
    with tempfile.TemporaryDirectory(prefix="shoal-journal-path-") as d:
        store = JournalStore(d)
        store.open()
        first = 1
        for _ in range(rounds):
            msgs = [w2_message(first + k, time.time_ns(), 1_700_000_000_000) for k in range(BATCH)]
            acks = [MessageRemoved(QUEUE, first - BATCH + k) for k in range(BATCH) if first > BATCH]
            first += BATCH
            t0 = clock()
            store.append(msgs)
            if acks:
                store.append(acks)
            t1 = clock()
            plan = store.plan_sync()
            t2 = clock()
            if plan is None:  # a segment to rotate: the worker thread's sync()
                store.sync()
                t3 = t4 = clock()
            else:
                os.pwrite(plan.fd, plan.data, plan.offset)
                t3 = clock()
                store.finish_sync(plan, None)
                t4 = clock()
            spent["append"] += t1 - t0
            spent["plan_sync"] += t2 - t1
            spent["finish_sync"] += t4 - t3
        store.close()
    print(json.dumps({k: v / (rounds * BATCH) * 1e6 for k, v in spent.items()}))


def measure(tree: Path, rounds: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": f"{tree / 'src'}{os.pathsep}{REPO}"}
    out = subprocess.run(
        [sys.executable, "-m", "bench.journal_path", "--child", "--rounds", str(rounds)],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def history(codec_runs: list[tuple[Path, dict]], path_runs: list[tuple[Path, dict]]) -> list[str]:
    """docs/benchmark-history.md's section: bench.journal_codec's and this module's runs."""
    from bench.report import md_table

    codec = [
        [f"`{p.name}`", kind, ", ".join(f"{name} {ns:,.0f}" for name, ns in row.items())]
        for p, d in codec_runs
        for kind, row in d["ns_per_record"].items()
    ]
    path = [
        [f"`{p.name}`", f"{which} {d['revs'][which]}, {d['implementation'][which]}"]
        + [f"{m[k]:.2f}" for k in (*PHASES, "total")]
        for p, d in path_runs
        for which, m in d["us_per_message_median"].items()
    ]
    return [
        "## The journal in process",
        "",
        "`python -m bench.journal_codec --base REV`: `encode_batch` of 64 persistent 256-byte "
        "messages and of 64 acks, each encoder's fastest round, ns per record.",
        "",
        *md_table(["run", "record", "ns per record, each encoder"], codec),
        "",
        "`python -m bench.journal_path --base REV --compile`: the journal's work for each W2 "
        "message (append of the message and of an ack, `plan_sync`, `finish_sync`; the write "
        "itself not counted), thread CPU µs per message, medians over the reps.",
        "",
        *md_table(["run", "build", *PHASES, "total"], path),
        "",
    ]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.journal_path", description=__doc__)
    p.add_argument("--base", help="git revision to compare against")
    p.add_argument("--compile", action="store_true", help="build the base's compiled modules")
    p.add_argument("--reps", type=int, default=9)
    p.add_argument("--rounds", type=int, default=2000, help="rounds of 64 messages a rep")
    p.add_argument("--out", type=Path)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        child(args.rounds)
        return 0
    if not args.base:
        p.error("--base is required")
    tmp = Path(tempfile.mkdtemp(prefix="shoal-journal-path-"))
    try:
        trees = {"base": checkout(args.base, tmp / "base", args.compile), "head": REPO}
        revs = short_revs(trees)
        impls = {k: implementation(v, {}) for k, v in trees.items()}
        reps: dict[str, list[dict[str, float]]] = {"base": [], "head": []}
        load = [round(os.getloadavg()[0], 2)]
        for rep in range(args.reps):
            for which in ("base", "head") if rep % 2 == 0 else ("head", "base"):
                r = measure(trees[which], args.rounds)
                r["total"] = sum(r[k] for k in PHASES)
                reps[which].append(r)
                print(f"rep {rep} {which}: {r['total']:.2f} us/msg", file=sys.stderr)
        load.append(round(os.getloadavg()[0], 2))
    finally:
        subprocess.run(
            ["git", "-C", str(REPO), "worktree", "remove", "--force", str(tmp / "base")],
            capture_output=True,
        )
        shutil.rmtree(tmp, ignore_errors=True)
    medians = {
        which: {k: round(statistics.median(r[k] for r in rs), 3) for k in (*PHASES, "total")}
        for which, rs in reps.items()
    }
    summary = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "revs": revs,
        "implementation": impls,
        "command": "python -m bench.journal_path " + " ".join(argv or sys.argv[1:]),
        "reps": args.reps,
        "rounds": args.rounds,
        "batch": BATCH,
        "loadavg_1m": load,
        "us_per_message_median": medians,
        "total_us_per_message": {w: [round(r["total"], 3) for r in rs] for w, rs in reps.items()},
    }
    for which, m in medians.items():
        print(f"{which} {revs[which]}: " + ", ".join(f"{k} {v:.2f}" for k, v in m.items()))
    write_record(summary, "journal-path", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
