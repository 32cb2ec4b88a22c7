"""Instructions the broker executes per message, two builds side by side.

    python -m bench.instructions --base main --compile --workload W1 --workload W2
    python -m bench.instructions --base main --compile --workload AW1   # W1 over AMQP 1.0

CPU time per message on a shared 2-core machine moves by a third from run to
run, for the same build (bench/recorded/builds-*.json), so a change worth 10%
hides in it. The broker's instruction count does not: ``shoal serve`` runs
under ``valgrind --tool=callgrind`` with counting off, the workload's
warm-up goes through, counting is switched on (``callgrind_control -i on``)
for the measured run only, and the total is divided by the messages received.
Every thread of the broker counts (the event loop, the journal's).

Instructions are not time: a cache miss or a syscall costs more than its
count shows, and the broker runs ~50x slower under valgrind, so its reads
batch more frames than at full speed. The figure compares builds of the same
code paths; it is not a throughput. Each build (``--base``, compiled with
``--compile`` as bench.builds does; the head is this working tree) runs each
workload once per rep, on a fresh broker. ``AW1`` is W1's shape over AMQP 1.0
with bench/amqp_w1.py's Proton clients (warmed up with its own shape).
Results go to bench/recorded/instructions-<date>.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.amqp_w1 import _amqp_run
from bench.builds import (
    REPO,
    Build,
    checkout,
    implementation,
    measured_phases,
    short_revs,
    write_record,
)
from bench.loadgen.runner import Target, run_load
from bench.workloads import W1_SPEC

WARMUP = 2_000
MESSAGES = 20_000
AW1 = "AW1"  # W1 over AMQP: amqp_w1's shape (groups, consumers, credit, size)
AW1_SHAPE = (100, 4, 1000, 256)
_TOTALS = re.compile(rb"^totals: (\d+)", re.MULTILINE)


def _callgrind(out: Path) -> tuple[str, ...]:
    return (
        "valgrind",
        "--tool=callgrind",
        "--instr-atstart=no",
        "--trace-children=no",
        f"--callgrind-out-file={out}",
    )


def _count(pid: int, on: bool) -> None:
    subprocess.run(
        ["callgrind_control", "-i", "on" if on else "off", str(pid)],
        check=True,
        capture_output=True,
    )


class _NoCpu:
    """amqp_w1 reads the broker's CPU time: meaningless under valgrind."""

    def cpu_s(self) -> float:
        return 0.0


def instructions_once(tree: Path, key: str, spec, work: Path, messages: int = 0) -> dict:
    """One fresh broker of ``tree`` under callgrind: warm-up uncounted, then ``spec``
    (for AW1: ``messages`` over AMQP) counted."""
    out = work / "callgrind.out"
    amqp = key == AW1
    b = Build(tree, work / "broker", {}, amqp=amqp, wrapper=_callgrind(out), start_timeout=300)
    try:
        if amqp:
            _amqp_run(_NoCpu(), b.amqp_port, "warmup", None, WARMUP, *AW1_SHAPE)
            _count(b.proc.pid, True)
            r = _amqp_run(_NoCpu(), b.amqp_port, "aw1", None, messages, *AW1_SHAPE)
            _count(b.proc.pid, False)
        else:
            target = Target(b.port, b.proc.pid)
            warm = dataclasses.replace(W1_SPEC, messages=WARMUP, destination="/queue/BENCH.WARMUP")
            run_load(target, warm, work / "warmup")
            _count(b.proc.pid, True)
            r = run_load(target, spec, work / key.replace("/", "-"))
            _count(b.proc.pid, False)
    finally:
        b.stop()
    totals = [int(m) for m in _TOTALS.findall(out.read_bytes())]
    if not totals:
        raise RuntimeError(f"no totals in {out}")
    received = r["received"]
    return {
        "instructions": totals[0],
        "received": received,
        "per_message": totals[0] / max(1, received),
        "missing": r.get("missing") or 0,
    }


def history(runs: list[tuple[str, dict]]) -> list[str]:
    """docs/benchmark-history.md's section for every recorded run, newest first."""
    from bench.report import history_section

    def build(d: dict, which: str) -> str:
        return f"{d['builds'][which]['rev']} {d['builds'][which]['implementation']}"

    rows = [
        [
            f"`{name}` ({d['messages']:,} messages)",
            w,
            build(d, "base"),
            build(d, "head"),
            f"{row['base']['per_message_median']:,.0f} / {row['head']['per_message_median']:,.0f}",
            f"{row['ratio']:.3f}",
        ]
        for name, d in runs
        for w, row in d["rows"].items()
    ]
    columns = ["run", "workload", "base", "head", "instructions per message base / head"]
    intro = (
        "`python -m bench.instructions --base REV --compile --workload W`: the broker's "
        "instructions per message received, counted by callgrind (counting only the measured "
        "run, after a 2,000-message warm-up; every thread of the broker), each build on a "
        "fresh broker per workload and rep. The count repeats to within about 1.5%, so it "
        "compares builds of the same code paths where CPU time on this shared machine cannot; "
        "it is not a speed (the broker runs ~50x slower under valgrind). Newest first."
    )
    return history_section(
        "Instructions per message, two builds", intro, [*columns, "head/base"], rows, runs
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.instructions",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--base", required=True, help="git revision to compare against")
    p.add_argument("--workload", action="append", default=[], help="W1, W2, ..., AW1 (repeatable)")
    p.add_argument("--reps", type=int, default=1)
    p.add_argument("--messages", type=int, default=MESSAGES)
    p.add_argument("--compile", action="store_true", help="build the base's compiled modules")
    p.add_argument("--out", type=Path)
    a = p.parse_args(argv)
    if shutil.which("valgrind") is None:
        p.error("valgrind is not installed (apt-get install valgrind)")
    workloads = a.workload or ["W1"]
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="bench-instr-") as tmp:
        trees = {
            "base": checkout(a.base, Path(tmp) / "base", a.compile),
            "head": checkout("HEAD", Path(tmp) / "head"),
        }
        try:
            revs = short_revs(trees)
            impl = {k: implementation(t, {}) for k, t in trees.items()}
            results: dict[str, dict[str, list[dict]]] = {}
            for rep in range(a.reps):
                order = ("base", "head") if rep % 2 == 0 else ("head", "base")
                for name in workloads:
                    phases = (
                        [(AW1, None)] if name == AW1 else measured_phases(name, rep, a.messages)
                    )
                    for key, spec in phases:
                        for which in order:
                            work = Path(tmp) / f"{which}-{rep}-{key.replace('/', '-')}"
                            row = instructions_once(trees[which], key, spec, work, a.messages)
                            results.setdefault(key, {}).setdefault(which, []).append(row)
                            print(
                                f"{key} rep {rep} {which}: {row['per_message']:,.0f} "
                                f"instructions/msg",
                                file=sys.stderr,
                                flush=True,
                            )
        finally:
            if trees["base"] != REPO:
                subprocess.run(
                    ["git", "-C", str(REPO), "worktree", "remove", "--force", str(trees["base"])],
                    capture_output=True,
                )
    rows = {}
    for key, by in results.items():
        med = {w: statistics.median(r["per_message"] for r in by[w]) for w in ("base", "head")}
        rows[key] = {
            **{w: {"per_message_median": med[w], "reps": by[w]} for w in ("base", "head")},
            "ratio": med["head"] / med["base"],
        }
        print(
            f"{key}: base {revs['base']} {med['base']:,.0f} | head {revs['head']} "
            f"{med['head']:,.0f} instructions/msg | ratio {rows[key]['ratio']:.3f}",
            file=sys.stderr,
        )
    doc = {
        "kind": "instructions",
        "command": "python -m bench.instructions " + " ".join(argv or sys.argv[1:]),
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "builds": {k: {"rev": revs[k], "implementation": impl[k]} for k in revs},
        "messages": a.messages,
        "warmup": WARMUP,
        "rows": rows,
    }
    write_record(doc, "instructions", a.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
