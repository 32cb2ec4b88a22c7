"""Side-by-side benchmark runner.

    python -m bench.run --all                         # standard matrix, every broker, 3 reps
    python -m bench.run --broker shoal --broker nullsink --workload W1   # Shoal vs the client's ceiling
    python -m bench.run --broker activemq --workload W1 [--reps 3]
    python -m bench.run --validate                    # reference rows against ActiveMQ
    python -m bench.run --report                      # only regenerate docs/benchmarks.md

Each workload runs on freshly started brokers (one at a time, in private temp dirs on
free loopback ports), after a warm-up, `--reps` times; a workload marked
`broker_per_rep` (W8, which measures RSS growth) starts a fresh broker, with its own
warm-up, for every repetition. The warm-up runs passes of 100k
W1 messages until the broker's CPU per message of two passes in a row is within 10%
(at most 8): ActiveMQ's JIT needs 3-5 passes on 2 cores. Before every
warm-up and repetition the runner waits for the machine to be quiet (other load below
--idle-cores for 3 s, at most --idle-wait s) and records the other load during the
run. With --interleave a workload's brokers are started (and warmed up) together and
take turns rep by rep, A B C then C B A, so a slow spell of this shared machine falls
on all of them instead of on one broker's block of reps; an idle broker's own CPU then
counts as other load for the one measured. Results go to bench/results/<run-id>.json (gitignored); docs/benchmarks.md and
docs/bench-*.png are regenerated from them.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import shutil
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Iterable
from pathlib import Path

from bench import report
from bench.loadgen.runner import run_load
from bench.machine import machine_info, wait_idle
from bench.peers import BROKERS, NULLSINK_WORKLOADS, start_broker
from bench.peers.common import BrokerHandle
from bench.workloads import STANDARD, VALIDATION, W1_SPEC, WORKLOADS

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"
VALIDATION_DIR = REPO / "bench" / "validation"
WARMUP_SETTLED = 0.10  # two warm-up passes this close in CPU/msg: the broker is warm


def log(msg: str) -> None:
    print(f"[{dt.datetime.now():%H:%M:%S}] {msg}", flush=True)


def _short(r: dict) -> str:
    lat = r.get("latency_ms") or {}

    def ms(v):
        return "-" if v is None else ("inf" if v == float("inf") else f"{v:.1f}")

    return (
        f"{r.get('throughput', 0):,.0f} msg/s  p50 {ms(lat.get('p50'))} p99 "
        f"{ms(lat.get('p99'))} ms  cpu {(r.get('broker_cpu_us_per_msg') or 0):.0f} us/msg  "
        f"missing {r.get('missing')} dup {r.get('duplicates')}  order "
        f"{r.get('order_violations_per_consumer')}/{r.get('order_violations_cross_consumer')}"
        f"  moved {r.get('groups_on_many_consumers')}  other {(r.get('other_cores') or 0):.2f} "
        f"cores  client {(r.get('client_cpu_us_per_msg') or 0):.0f} us/msg"
        + (f"  ERRORS {r['errors']}" if r.get("errors") else "")
    )


class Run:
    def __init__(self, args: argparse.Namespace, kind: str) -> None:
        self.args = args
        now = dt.datetime.now(dt.UTC)
        self.data: dict = {
            "run_id": now.strftime("%Y%m%dT%H%M%SZ") + f"-{kind}",
            "kind": kind,  # matrix | single | validation
            "started": now.isoformat(timespec="seconds"),
            "command": " ".join(sys.argv),
            "machine": machine_info(),
            "settings": {
                "reps": args.reps,
                "warmup": args.warmup,
                "idle_cores": args.idle_cores,
                "idle_wait": args.idle_wait,
                "interleave": args.interleave,
            },
            "brokers": {},
            "results": [],
            "warmups": [],
            "failures": [],
        }
        RESULTS.mkdir(parents=True, exist_ok=True)
        self.path = RESULTS / f"{self.data['run_id']}.json"

    def save(self) -> None:
        self.data["finished"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=1, default=str))
        tmp.replace(self.path)

    def run_workload(self, broker: str, wname: str) -> None:
        reps = range(self.args.reps)
        if WORKLOADS[wname].broker_per_rep:
            for rep in reps:
                if not self.run_reps(broker, wname, [rep]):
                    return
        else:
            self.run_reps(broker, wname, reps)

    def run_reps(self, broker: str, wname: str, reps: Iterable[int]) -> bool:
        """Start ``broker``, warm it up and measure ``reps`` on it; False if it did not start."""
        started = self.start(broker, wname)
        if started is None:
            return False
        try:
            for rep in reps:
                if not self.measure(started, wname, rep):
                    break
        finally:
            self.stop(started)
        return True

    def run_interleaved(self, brokers: list[str], wname: str) -> None:
        """Start every broker once, then take turns rep by rep.

        A slow spell of the machine then falls on every broker's reps alike
        instead of on whichever broker's block it hit. The order flips every rep
        (A B C, C B A, ...) so no broker always runs right after another's load.
        """
        started: list[Started] = []
        try:
            for broker in brokers:
                one = self.start(broker, wname)
                if one is not None:
                    started.append(one)
            for rep in range(self.args.reps):
                for one in started if rep % 2 == 0 else reversed(started):
                    if one.alive:
                        one.alive = self.measure(one, wname, rep)
        finally:
            for one in started:
                self.stop(one)

    def start(self, broker: str, wname: str) -> Started | None:
        """Start ``broker`` in a private dir and warm it up; None (recorded) if it failed."""
        args = self.args
        wl = WORKLOADS[wname]
        work = Path(tempfile.mkdtemp(prefix=f"bench-{broker}-{wname}-", dir=args.tmp))
        log(f"{broker} {wname}: starting broker")
        try:
            handle = start_broker(broker, work / "broker")
        except Exception as exc:
            msg = f"{type(exc).__name__}: {exc}"
            log(f"{broker}: could not start: {msg.splitlines()[0]}")
            self.data["brokers"].setdefault(broker, {})["error"] = msg[-4000:]
            self.data["failures"].append(
                {"broker": broker, "workload": wname, "error": msg[-4000:]}
            )
            self.save()
            if not args.keep:
                shutil.rmtree(work, ignore_errors=True)
            return None
        started = Started(broker, handle, work)
        self.data["brokers"][broker] = {
            "version": handle.version,
            "groups": handle.groups,
            "notes": handle.notes,
        }
        try:
            warm_n = args.warmup if args.warmup is not None else wl.warmup
            previous: float | None = None
            for npass in range(args.warmup_passes if warm_n else 0):
                # A JVM keeps compiling for several passes (its compiler threads
                # share the 2 cores with the load): warm up until the broker's
                # CPU per message settles, not for a fixed count.
                idle = wait_idle(args.idle_cores, args.idle_wait, handle.cpu_s, log)
                spec = dataclasses.replace(
                    W1_SPEC, messages=warm_n, destination=f"/queue/BENCH.WARMUP.{wname}.{npass}"
                )
                r = run_load(handle, spec, work / "warmup")
                r.update(
                    broker=broker, workload=wname, phase="warmup", idle=idle, warmup_pass=npass
                )
                self.data["warmups"].append(_slim(r))
                log(f"{broker} {wname} warm-up pass {npass} ({warm_n}): {_short(r)}")
                cpu = r.get("broker_cpu_us_per_msg")
                if cpu and previous and abs(cpu - previous) <= WARMUP_SETTLED * previous:
                    break
                previous = cpu
        except BaseException:
            self.stop(started)
            raise
        return started

    def measure(self, started: Started, wname: str, rep: int) -> bool:
        """Every phase of ``wname`` once on a started broker; False once the broker died."""
        args = self.args
        broker, handle = started.broker, started.handle
        for phase, spec in WORKLOADS[wname].phases.items():
            idle = wait_idle(args.idle_cores, args.idle_wait, handle.cpu_s, log)
            spec = dataclasses.replace(
                spec, destination=f"{spec.destination}.{wname}.{phase}.{rep}"
            )
            fresh, started.first = started.first, False  # no earlier measured load on it
            try:
                r = run_load(handle, spec, started.work / f"{phase}{rep}")
            except Exception as exc:
                msg = f"{type(exc).__name__}: {exc}"
                log(f"{broker} {wname} {phase} rep {rep}: FAILED {msg}")
                self.data["failures"].append(
                    {
                        "broker": broker,
                        "workload": wname,
                        "phase": phase,
                        "rep": rep,
                        "error": msg,
                        "traceback": traceback.format_exc(),
                    }
                )
                if not handle.alive():
                    return False
                continue
            r.update(
                broker=broker, workload=wname, phase=phase, rep=rep, idle=idle, fresh_broker=fresh
            )
            self.data["results"].append(_slim(r))
            log(f"{broker} {wname} {phase} rep {rep}: {_short(r)}")
            self.save()
        return True

    def stop(self, started: Started) -> None:
        started.handle.stop()
        self.save()
        if not self.args.keep:
            shutil.rmtree(started.work, ignore_errors=True)


@dataclasses.dataclass
class Started:
    """A broker started (and warmed up) for one workload's reps."""

    broker: str
    handle: BrokerHandle
    work: Path
    first: bool = True  # no measured load on it yet
    alive: bool = True


def _slim(r: dict) -> dict:
    return dict(r.items())


def validation_section(v: dict | None) -> str:
    """The history page's section: the latest --validate run against the reference figures."""
    out = ["## Harness validation: ActiveMQ against the reference figures", ""]
    if v is None:
        out.append(f"{report.NYM}. Run `python -m bench.run --validate`.")
        return "\n".join(out) + "\n"
    out += [
        f"Run `{v['run_id']}` (`bench/validation/{v['run_id']}.json`), "
        f"{v.get('started')} to {v.get('finished')} (UTC), "
        f"`{v.get('command')}`. Machine: {report._machine_line(v)}. Other load during the "
        f"measured runs: {report._other_line(v['rows'])}. Reference: "
        "the figures `bench/workloads.py` keeps for each workload (ActiveMQ measured on the "
        "same machine class, idle, other load 0.00–0.01 cores).",
        "",
    ]
    columns = [
        "row",
        "reference msg/s",
        "measured msg/s",
        "ref p50 / p99 ms",
        "measured p50 / p99 ms",
    ]
    columns += [
        "ref CPU µs/msg",
        "measured CPU µs/msg",
        "missing",
        "order viol. (consumer / cross)",
    ]
    out += report.md_table([*columns, "groups on >1 consumer", "other cores", "client µs/msg"], [])
    for w in VALIDATION + [k for k in WORKLOADS if k not in VALIDATION]:
        wl = WORKLOADS[w]
        for ph in wl.phases:
            r = report._find(v["rows"], "activemq", w, ph)
            if r is None:
                continue
            ref = wl.reference if (wl.reference.get("phase", "main") == ph) else {}
            rt = report.NYM if not ref else f"{ref['throughput']:,}"
            if "throughput_min" in ref:
                rt += f" ({ref['throughput_min']:,}–{ref['throughput_max']:,})"
            cross, moved = report._allv(r["viol_cross"]), report._allv(r["moved"])
            if ref.get("cross_violations"):
                cross += f" (ref {ref['cross_violations']})"
            if ref.get("groups_moved"):
                moved += f" (ref {ref['groups_moved']})"
            cells = [
                f"{w} {ph}: {wl.title}" if ph != "main" else f"{w}: {wl.title}",
                rt,
                report._mm(r["throughput"]),
            ]
            cells.append(f"{ref['p50']} / {ref['p99']}" if ref.get("p50") is not None else "–")
            cells += [
                f"{report._med(r['p50'], report._ms)} / {report._med(r['p99'], report._ms)}",
                str(ref.get("cpu_us", "–")) if ref else "–",
            ]
            cells += [
                report._mm(r["cpu_us"]),
                report._allv(r["missing"]),
                f"{report._allv(r['viol_consumer'])} / {cross}",
                moved,
            ]
            out.append(report._row([*cells, report._mm(r["other"]), report._med(r["client_us"])]))
    out.append("")
    if v.get("notes"):
        out += [v["notes"], ""]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.run",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    what = p.add_mutually_exclusive_group()
    what.add_argument("--all", action="store_true", help="standard matrix against every broker")
    what.add_argument(
        "--validate",
        action="store_true",
        help="the reference rows against ActiveMQ (harness validation)",
    )
    what.add_argument("--report", action="store_true", help="only regenerate the docs")
    p.add_argument(
        "--broker",
        action="append",
        choices=BROKERS,
        help="broker(s) to run (repeatable; default with --all: all of them; nullsink, "
        "the client's ceiling and not a broker, only on W1 and W6)",
    )
    p.add_argument(
        "--workload",
        action="append",
        choices=sorted(WORKLOADS),
        help="workload(s) (repeatable; default with --all: W1-W8)",
    )
    p.add_argument("--reps", type=int, default=3)
    p.add_argument(
        "--warmup",
        type=int,
        default=None,
        help="warm-up messages before each workload (default 100000; 0: none)",
    )
    p.add_argument(
        "--warmup-passes",
        type=int,
        default=8,
        help="at most this many warm-up passes; they stop once the broker's CPU "
        "per message of two passes in a row is within 10%% (default 8)",
    )
    p.add_argument(
        "--idle-cores",
        type=float,
        default=0.25,
        help="wait until other load is below this many cores (default 0.25)",
    )
    p.add_argument(
        "--idle-wait",
        type=float,
        default=120.0,
        help="...for at most this many seconds, then measure anyway (default 120)",
    )
    p.add_argument(
        "--interleave",
        action="store_true",
        help="start each workload's brokers together and take turns rep by rep (the order "
        "flipping every rep) instead of one broker's reps after another's; workloads that "
        "start a broker per rep (W8) still run one broker at a time",
    )
    p.add_argument("--tmp", default=None, help="parent dir for broker instances (default $TMPDIR)")
    p.add_argument("--keep", action="store_true", help="keep broker dirs and raw records")
    p.add_argument("--no-docs", action="store_true", help="do not regenerate docs/benchmarks.md")
    args = p.parse_args(argv)

    if args.report:
        report.write_docs()
        return 0
    if args.validate:
        kind = "validation"
        brokers = args.broker or ["activemq"]
        workloads = args.workload or VALIDATION
    elif args.all:
        kind = "matrix"
        brokers = args.broker or list(BROKERS)
        workloads = args.workload or STANDARD
    else:
        if not args.broker or not args.workload:
            p.error("give --broker and --workload, or --all / --validate / --report")
        kind = "single"
        brokers, workloads = args.broker, args.workload

    def on_term(signum, frame):  # a SIGTERM unwinds like Ctrl-C: brokers stopped, data saved
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    run = Run(args, kind)
    log(f"run {run.data['run_id']}: brokers {brokers}, workloads {workloads}, reps {args.reps}")
    t0 = time.monotonic()
    try:
        for wname in workloads:
            these = [
                b
                for b in brokers
                # nullsink is not a broker: only the client's ceiling of W1 and W6
                if not (b == "nullsink" and args.all and wname not in NULLSINK_WORKLOADS)
            ]
            if args.interleave and not WORKLOADS[wname].broker_per_rep:
                run.run_interleaved(these, wname)
            else:
                for broker in these:
                    run.run_workload(broker, wname)
    except KeyboardInterrupt:
        log("interrupted; saving what was measured")
        run.data["interrupted"] = True
    finally:
        run.save()
    log(f"done in {time.monotonic() - t0:.0f} s: {run.path}")
    if kind == "validation":
        VALIDATION_DIR.mkdir(exist_ok=True)
        summary = report.summarize_run(run.data)
        out = VALIDATION_DIR / f"{run.data['run_id']}.json"
        out.write_text(json.dumps(summary, indent=1, default=str))
        log(f"validation summary: {out}")
    if not args.no_docs:
        report.write_docs()
    return 1 if run.data.get("interrupted") else 0


if __name__ == "__main__":
    sys.exit(main())
