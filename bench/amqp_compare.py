"""AW1 against two builds of Shoal, and W1's shape over STOMP, in one run.

    python -m bench.amqp_compare --base 5f505ef --reps 3 --messages 100000

AW1 (bench/amqp_w1.py: W1's shape over AMQP 1.0 with Proton clients) runs on
a fresh broker of each build per rep (each build a git worktree of its
revision, as bench/builds.py; the order alternating from rep to rep), then
W1's shape over STOMP (the load generator, 20,000 warm-up messages) on the
head build, on the same message count. Reported: per build the median msg/s
and broker CPU per message, and the AMQP/STOMP ratio of broker CPU per
message (issue #16's goal: at most 1.5x). Results go to
bench/recorded/amqp-builds-<date>.json; `python -m bench.run --report` shows them.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

from bench.amqp_w1 import _amqp_run
from bench.builds import REPO, Build, checkout, run_once, short_revs
from bench.peers.common import proc_cpu_s
from bench.workloads import WORKLOADS


def aw1_once(tree: Path, work: Path, messages: int) -> dict:
    b = Build(tree, work, {}, amqp=True)
    try:
        handle = SimpleNamespace(cpu_s=lambda: proc_cpu_s(b.proc.pid))
        return _amqp_run(handle, b.amqp_port, "aw1", None, messages, 100, 4, 1000, 256)
    finally:
        b.stop()


def _medians(runs: list[dict], rate: str, cpu: str) -> dict:
    return {
        "msg_per_s_median": statistics.median(r[rate] for r in runs),
        "cpu_us_median": statistics.median(r[cpu] for r in runs),
        "msg_per_s": [round(r[rate]) for r in runs],
        "cpu_us": [round(r[cpu], 1) for r in runs],
    }


def history(runs: list[tuple[str, dict]]) -> list[str]:
    """docs/benchmark-history.md's section for every recorded run, newest first."""
    from bench.report import history_section

    rows: list[list] = []
    for name, d in runs:
        for which in ("base", "head"):
            row = d["amqp"].get(which)
            if row is not None:
                order = "yes" if row["out_of_order"] == 0 else f"no ({row['out_of_order']})"
                rows.append(
                    [
                        f"`{name}` ({d['reps']} reps)",
                        f"{which} {d['revs'][which]}",
                        f"{row['msg_per_s_median']:,.0f}",
                        f"{row['cpu_us_median']:.1f}",
                        f"{row['ratio_to_stomp']:.1f}×",
                        order,
                    ]
                )
        stomp = d["stomp"]
        rows.append(
            [
                f"`{name}`",
                f"head {d['revs']['head']}, STOMP",
                f"{stomp['msg_per_s_median']:,.0f}",
                f"{stomp['cpu_us_median']:.1f}",
                "1×",
                "",
            ]
        )
    columns = ["run", "build", "msg/s", "broker CPU µs/msg", "AMQP / STOMP CPU", "in order"]
    intro = (
        "`python -m bench.amqp_compare --base REV`: AW1 on a fresh broker of each build per "
        "rep, the order alternating, then W1's shape over STOMP on the head build; medians. "
        "Goal: broker CPU per AMQP message at most 1.5x the STOMP figure. Newest first."
    )
    return history_section("AW1 before and after a change", intro, columns, rows, runs)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.amqp_compare",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--base", help="git revision to compare against (default: none)")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--messages", type=int, default=100_000)
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    builds = ["head", "base"] if args.base else ["head"]
    amqp: dict[str, list[dict]] = {k: [] for k in builds}
    stomp: list[dict] = []
    load: list[float] = []  # 1-minute load average at each run's start (shared cores)
    with tempfile.TemporaryDirectory(prefix="shoal-amqp-compare-") as tmp_name:
        tmp = Path(tmp_name)
        trees = {"head": REPO}
        if args.base:
            # compiled as this tree is: else the base runs pure Python
            compiled = (REPO / "src" / "shoal" / "_native_build.json").exists()
            trees["base"] = checkout(args.base, tmp / "base", compiled)
        revs = short_revs(trees)
        spec = dataclasses.replace(WORKLOADS["W1"].phases["main"], messages=args.messages)
        try:
            for rep in range(args.reps):
                order = builds if rep % 2 == 0 else builds[::-1]
                for which in order:
                    load.append(round(os.getloadavg()[0], 1))
                    r = aw1_once(trees[which], tmp / f"aw1-{which}-{rep}", args.messages)
                    amqp[which].append(r)
                    print(
                        f"AW1 rep {rep} {which}: {r['msg_per_s']:.0f} msg/s, "
                        f"{r['broker_cpu_us_per_msg']:.1f} us/msg, "
                        f"{r['out_of_order']} out of order",
                        file=sys.stderr,
                    )
                load.append(round(os.getloadavg()[0], 1))
                s = run_once(
                    REPO,
                    [("W1", dataclasses.replace(spec, destination=f"{spec.destination}.{rep}"))],
                    tmp / f"stomp-{rep}",
                    {},
                )["W1"]
                stomp.append(s)
                print(
                    f"STOMP rep {rep}: {s['throughput']:.0f} msg/s, "
                    f"{s['broker_cpu_us_per_msg']:.1f} us/msg",
                    file=sys.stderr,
                )
        finally:
            if "base" in trees:
                subprocess.run(
                    ["git", "-C", str(REPO), "worktree", "remove", "--force", str(trees["base"])],
                    capture_output=True,
                )
    summary: dict = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": "python -m bench.amqp_compare " + " ".join(argv or sys.argv[1:]),
        "revs": revs,
        "reps": args.reps,
        "messages": args.messages,
        "loadavg_1m_at_starts": load,
        "amqp": {},
        "stomp": _medians(stomp, "throughput", "broker_cpu_us_per_msg"),
    }
    for which, runs in amqp.items():
        row = _medians(runs, "msg_per_s", "broker_cpu_us_per_msg")
        row["out_of_order"] = sum(r["out_of_order"] for r in runs)
        row["received"] = [r["received"] for r in runs]
        row["ratio_to_stomp"] = row["cpu_us_median"] / summary["stomp"]["cpu_us_median"]
        summary["amqp"][which] = row
        print(
            f"AW1 {which} {revs[which]}: {row['msg_per_s_median']:.0f} msg/s, "
            f"{row['cpu_us_median']:.1f} us/msg = {row['ratio_to_stomp']:.1f}x STOMP"
        )
    print(
        f"STOMP head: {summary['stomp']['msg_per_s_median']:.0f} msg/s, "
        f"{summary['stomp']['cpu_us_median']:.1f} us/msg"
    )
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    out = args.out or REPO / "bench" / "recorded" / f"amqp-builds-{stamp}.json"
    out.write_text(json.dumps(summary, indent=2) + "\n")
    print(f"recorded in {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
