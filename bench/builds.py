"""Two builds of Shoal side by side: the same workload, the same client, one run.

    python -m bench.builds --base 09ee2a8 --workload W1 --workload W2 --reps 5
    python -m bench.builds --base HEAD --base-env SHOAL_PURE=1 --workload W1   # pure vs compiled
    python -m bench.builds --base main --compile --workload W2   # both compiled

Refactoring keeps behaviour and speed; this is how a change shows it. Each
build is a `git worktree` of its revision (HEAD: the working tree itself),
started as users start it (`python -m shoal.cli serve`, its own data
directory, port 0 read back from the ready line) with that tree's sources
first on PYTHONPATH. For every rep the two builds run the workload on fresh
brokers one after the other, the order alternating from rep to rep, so
machine noise hits both alike; every phase of a workload (W6: 1p, 8p, 32p,
8p-nodisk) runs on the rep's broker in turn and is reported as its own row
("W6/8p"). Reported per build: median msg/s and median
broker CPU per message (steadier on a shared machine), and the head/base
ratios. ``--base-env``/``--head-env KEY=VALUE`` set a build's environment
(SHOAL_PURE=1: the pure-Python modules of an otherwise compiled tree), and the
record names the implementation each build ran; a checked-out revision runs
pure Python unless ``--compile`` builds its compiled modules first (HEAD runs
whatever this tree holds: `make compile`). Results go to
bench/recorded/builds-<date>.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.loadgen.runner import LoadSpec, Target, run_load
from bench.workloads import W1_SPEC, WORKLOADS

REPO = Path(__file__).resolve().parent.parent
WARMUP = 20_000


def write_record(doc: dict, kind: str, out: Path | None = None) -> Path:
    """Write ``doc`` to ``out`` or bench/recorded/<kind>-<date>.json; its path."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    path = out or REPO / "bench" / "recorded" / f"{kind}-{stamp}.json"
    path.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"recorded in {path}", file=sys.stderr)
    return path


def checkout(rev: str, into: Path, compile_: bool = False) -> Path:
    """The source tree of ``rev`` (HEAD: this working tree). ``compile_``: build
    its compiled modules in place, as `make compile` does (a fresh worktree has
    none, so without it a checked-out build runs pure Python)."""
    if rev == "HEAD":
        return REPO
    subprocess.run(
        ["git", "-C", str(REPO), "worktree", "add", "--detach", str(into), rev],
        check=True,
        capture_output=True,
    )
    if compile_:
        subprocess.run(
            [sys.executable, "setup.py", "-q", "build_ext", "--inplace"],
            cwd=into,
            env={**os.environ, "SHOAL_COMPILE": "1"},
            check=True,
            capture_output=True,
        )
    return into


def short_revs(trees: dict[str, Path]) -> dict[str, str]:
    """Each tree's checked-out revision, abbreviated; ``+changes`` where the
    tree's sources differ from it (a run of uncommitted work)."""
    return {k: _short_rev(v) for k, v in trees.items()}


def _short_rev(tree: Path) -> str:
    git = ["git", "-C", str(tree)]
    rev = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    changed = subprocess.run(
        [*git, "status", "--porcelain", "--untracked-files=no", "--", "src"],
        capture_output=True,
        text=True,
    )
    return rev.stdout.strip() + ("+changes" if changed.stdout.strip() else "")


class Build:
    """One `shoal serve` of a source tree, on a port it binds itself."""

    def __init__(
        self,
        tree: Path,
        workdir: Path,
        extra_env: dict[str, str],
        *,
        amqp: bool = False,
        wrapper: tuple[str, ...] = (),
        start_timeout: float = 60.0,
    ) -> None:
        env = {**os.environ, **extra_env, "PYTHONPATH": str(tree / "src")}
        workdir.mkdir(parents=True, exist_ok=True)
        # Builds with an AMQP listener get none unless asked: its default port may be taken.
        if amqp:
            no_amqp = ["--amqp", "127.0.0.1:0"]
        else:
            no_amqp = ["--amqp", ""] if (tree / "src/shoal/server/amqp.py").exists() else []
        self.proc = subprocess.Popen(
            [
                *wrapper,  # bench/instructions.py: valgrind
                sys.executable,
                "-m",
                "shoal.cli",
                "serve",
                "--stomp",
                "127.0.0.1:0",
                "--http",
                "127.0.0.1:0",
                "--data",
                str(workdir / "data"),
                "--log-level",
                "warning",
                *no_amqp,
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        assert self.proc.stdout is not None
        deadline = time.monotonic() + start_timeout
        while True:
            line = self.proc.stdout.readline().decode()
            if " ready: " in line:
                break
            if not line or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"shoal serve from {tree} did not start")
        listeners = dict(
            item.split(" ", 1) for item in line.split(" ready: ", 1)[1].strip().split(", ")
        )
        self.port = int(listeners["stomp"].rpartition(":")[2])
        self.amqp_port = int(listeners["amqp"].rpartition(":")[2]) if amqp else 0

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)


def implementation(tree: Path, extra_env: dict[str, str]) -> str:
    """What a build of ``tree`` runs: "compiled", "pure" or "mixed" (older trees: "pure")."""
    env = {**os.environ, **extra_env, "PYTHONPATH": str(tree / "src")}
    probe = (
        "import shoal\n"
        "try:\n    import shoal._native as n\nexcept ImportError:\n    print('pure')\n"
        "else:\n    print(' '.join(sorted({n.implementation(m) for m in n.COMPILED_MODULES})))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    return out[0] if len(out) == 1 else "mixed"


def measured_phases(name: str, rep: int, messages: int = 0) -> list[tuple[str, LoadSpec]]:
    """The phases of workload ``name`` as run in ``rep``: (row key, spec), in order.

    A one-phase workload keeps its name as the key; a workload with several
    (W6: 1p, 8p, ...) gets one row per phase, "W6/8p". Each phase of each rep
    has its own queue.
    """
    phases = WORKLOADS[name].phases
    out = []
    for phase, spec in phases.items():
        if messages:
            spec = dataclasses.replace(spec, messages=messages)
        key = name if list(phases) == ["main"] else f"{name}/{phase}"
        out.append(
            (key, dataclasses.replace(spec, destination=f"{spec.destination}.{phase}.{rep}"))
        )
    return out


def run_once(
    tree: Path, phases: list[tuple[str, LoadSpec]], work: Path, extra_env: dict[str, str]
) -> dict[str, dict]:
    """One fresh broker of ``tree``: a warm-up, then every phase in turn."""
    b = Build(tree, work / "broker", extra_env)
    try:
        target = Target(b.port, b.proc.pid)
        warm = dataclasses.replace(W1_SPEC, messages=WARMUP, destination="/queue/BENCH.WARMUP")
        run_load(target, warm, work / "warmup")
        return {key: run_load(target, spec, work / key.replace("/", "-")) for key, spec in phases}
    finally:
        b.stop()


def summarize_rows(results: dict[str, dict[str, list[dict]]]) -> dict[str, dict]:
    """Per row (workload or workload/phase): each build's medians and every rep, and ratios."""
    rows = {}
    for key, by in results.items():
        row: dict = {}
        for which in ("base", "head"):
            reps = by[which]
            p99s = [(r.get("latency_ms") or {}).get("p99") for r in reps]
            row[which] = {
                "throughput_median": statistics.median(r["throughput"] for r in reps),
                "cpu_us_median": statistics.median(r["broker_cpu_us_per_msg"] for r in reps),
                "throughput": [round(r["throughput"]) for r in reps],
                "cpu_us": [round(r["broker_cpu_us_per_msg"], 2) for r in reps],
                "p99_ms": [None if v is None else round(v, 2) for v in p99s],
                "p99_ms_median": (
                    statistics.median(p99s) if all(v is not None for v in p99s) else None
                ),
                "order_violations": sum(
                    (r.get("order_violations_per_consumer") or 0)
                    + (r.get("order_violations_cross_consumer") or 0)
                    for r in reps
                ),
                "missing": sum(r.get("missing") or 0 for r in reps),
            }
        row["throughput_ratio"] = (
            row["head"]["throughput_median"] / row["base"]["throughput_median"]
        )
        row["cpu_ratio"] = row["head"]["cpu_us_median"] / row["base"]["cpu_us_median"]
        rows[key] = row
    return rows


def _side(d: dict, which: str) -> str:
    """One side of a two-build run: its revision, build and event loop where recorded."""
    env = d.get("env", {}).get(which, {})
    parts = [d.get("revs", {}).get(which, "?"), d.get("implementation", {}).get(which, "")]
    parts += [f"{k}={v}" for k, v in env.items()]
    return " ".join(p for p in parts if p)


def history(runs: list[tuple[str, dict]]) -> list[str]:
    """docs/benchmark-history.md's section for every recorded two-build run."""
    from bench.report import history_section

    rows = [
        [
            f"`{name}` ({d['reps']} reps)",
            w,
            _side(d, "base"),
            _side(d, "head"),
            f"{row['base']['throughput_median']:,.0f} / {row['head']['throughput_median']:,.0f}",
            f"{row['base']['cpu_us_median']:.1f} / {row['head']['cpu_us_median']:.1f}",
            f"{row['throughput_ratio']:.2f}×, {row['cpu_ratio']:.2f}×",
        ]
        for name, d in runs
        for w, row in d["workloads"].items()
    ]
    columns = ["run", "workload", "base", "head", "msg/s base / head"]
    columns += ["broker CPU µs/msg base / head", "head/base (msg/s, CPU/msg)"]
    intro = (
        "The same workload with the same client against two builds (or one build run two "
        "ways) in one run (`python -m bench.builds`: each build a git worktree of its "
        "revision, a fresh broker per rep, the order alternating from rep to rep); medians "
        "over the reps. Newest first; each file holds its command."
    )
    return history_section("Two builds side by side", intro, columns, rows, runs)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.builds",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--base", required=True, help="git revision to compare against")
    p.add_argument("--head", default="HEAD", help="git revision (default: this working tree)")
    p.add_argument("--workload", action="append", default=[], help="W1, W2, ... (repeatable)")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--messages", type=int, default=0, help="override the workload's count")
    p.add_argument("--base-env", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--head-env", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--out", type=Path)
    p.add_argument(
        "--compile",
        action="store_true",
        help="build the compiled modules of checked-out revisions (HEAD: this tree as it is)",
    )
    args = p.parse_args(argv)
    envs = {
        "base": dict(kv.split("=", 1) for kv in args.base_env),
        "head": dict(kv.split("=", 1) for kv in args.head_env),
    }
    workloads = args.workload or ["W1", "W2"]
    with tempfile.TemporaryDirectory(prefix="shoal-builds-") as tmp_name:
        tmp = Path(tmp_name)
        trees = {
            "base": checkout(args.base, tmp / "base", args.compile),
            "head": checkout(args.head, tmp / "head", args.compile),
        }
        revs = short_revs(trees)
        impls = {k: implementation(trees[k], envs[k]) for k in trees}
        results: dict[str, dict[str, list[dict]]] = {}
        try:
            for name in workloads:
                for rep in range(args.reps):
                    phases = measured_phases(name, rep, args.messages)
                    order = ("base", "head") if rep % 2 == 0 else ("head", "base")
                    for which in order:
                        by_key = run_once(
                            trees[which], phases, tmp / f"{name}-{which}-{rep}", envs[which]
                        )
                        for key, r in by_key.items():
                            results.setdefault(key, {"base": [], "head": []})[which].append(r)
                            print(
                                f"{key} rep {rep} {which}: {r['throughput']:.0f} msg/s, "
                                f"{r['broker_cpu_us_per_msg']:.1f} us/msg",
                                file=sys.stderr,
                            )
        finally:
            for k in ("base", "head"):
                if trees[k] != REPO:
                    subprocess.run(
                        ["git", "-C", str(REPO), "worktree", "remove", "--force", str(trees[k])],
                        capture_output=True,
                    )
    summary = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "revs": revs,
        "env": envs,
        "implementation": impls,
        "reps": args.reps,
        "command": "python -m bench.builds " + " ".join(argv or sys.argv[1:]),
        "workloads": summarize_rows(results),
    }
    for key, row in summary["workloads"].items():
        print(
            f"{key}: base {revs['base']} {row['base']['throughput_median']:.0f} msg/s "
            f"{row['base']['cpu_us_median']:.1f} us/msg | head {revs['head']} "
            f"{row['head']['throughput_median']:.0f} msg/s {row['head']['cpu_us_median']:.1f} "
            f"us/msg | ratios {row['throughput_ratio']:.2f}x throughput, "
            f"{row['cpu_ratio']:.2f}x CPU/msg"
        )
    write_record(summary, "builds", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
