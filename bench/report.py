"""docs/benchmarks.md and docs/bench-*.png, generated from bench/results/ and bench/recorded/.

bench/results/ holds the raw runs (gitignored). Every run the page shows is also
summarized into bench/recorded/ (kept in git), so a clean checkout regenerates the
same page; the Spark section comes from bench/recorded/spark-*.json
(`python -m bench.spark --out ...`).

Only measured numbers are written. A cell with no measurement says "not yet measured".
Ratios Shoal/peer are computed only from results of the same run.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

from bench.notes import (
    AMQP_BUILD_NOTES,
    BUILD_NOTES,
    MATRIX_NOTES,
    MATRIX_PAIR_NOTES,
    RERUN_NOTES,
    SPARK_NOTES,
)
from bench.workloads import STANDARD, VALIDATION, WORKLOADS

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"
VALIDATION_DIR = REPO / "bench" / "validation"
RECORDED = REPO / "bench" / "recorded"
DOCS = REPO / "docs"
DOC = DOCS / "benchmarks.md"
NYM = "not yet measured"
BROKER_ORDER = ("shoal", "activemq", "rabbitmq", "nullsink")
BROKER_LABEL = {
    "shoal": "Shoal",
    "activemq": "ActiveMQ 5.17",
    "rabbitmq": "RabbitMQ",
    "nullsink": "client ceiling (null sink)",
}
CEILING_MARGIN = 0.10  # Shoal "at the client's ceiling": within 10% of the null sink

METRICS = {
    "throughput": lambda r: r.get("throughput"),
    "p50": lambda r: (r.get("latency_ms") or {}).get("p50"),
    "p99": lambda r: (r.get("latency_ms") or {}).get("p99"),
    "p999": lambda r: (r.get("latency_ms") or {}).get("p999"),
    "cpu_us": lambda r: r.get("broker_cpu_us_per_msg"),
    "client_us": lambda r: r.get("client_cpu_us_per_msg"),
    "rss_mib": lambda r: (r.get("broker_rss_end") or 0) / 2**20,
    "rss_peak_mib": lambda r: (r.get("broker_rss_peak") or 0) / 2**20,
    "rss_per_group_end": lambda r: _per_group(r, "broker_rss_end"),
    "rss_per_group_peak": lambda r: _per_group(r, "broker_rss_peak"),
    "missing": lambda r: r.get("missing"),
    "duplicates": lambda r: r.get("duplicates"),
    "viol_consumer": lambda r: r.get("order_violations_per_consumer"),
    "viol_cross": lambda r: r.get("order_violations_cross_consumer"),
    "moved": lambda r: r.get("groups_on_many_consumers"),
    "groups_used": lambda r: r.get("groups_used"),
    "other": lambda r: r.get("other_cores"),
    "broker_cores": lambda r: r.get("broker_cores"),
}


def _per_group(r: dict, key: str) -> float | None:
    groups = (r.get("spec") or {}).get("groups") or 0
    if not groups or r.get(key) is None or r.get("broker_rss_before") is None:
        return None
    return (r[key] - r["broker_rss_before"]) / groups


# --- summarising -----------------------------------------------------------------------


def _stats(values: list) -> dict | None:
    vals = [v for v in values if v is not None]
    if not vals:
        return None
    finite = [v for v in vals if not (isinstance(v, float) and math.isinf(v))]
    med = statistics.median(vals) if len(finite) == len(vals) else sorted(vals)[len(vals) // 2]
    return {"median": med, "min": min(vals), "max": max(vals), "n": len(vals), "values": vals}


def summarize_run(data: dict) -> dict:
    """Per (broker, workload, phase): median/min/max of every metric over the reps."""
    groups: dict[tuple, list[dict]] = {}
    for r in data.get("results", []):
        groups.setdefault((r["broker"], r["workload"], r["phase"]), []).append(r)
    rows = []
    for (broker, wname, phase), rs in sorted(groups.items()):
        row = {
            "broker": broker,
            "workload": wname,
            "phase": phase,
            "reps": len(rs),
            "version": rs[0].get("broker_version"),
            "groups_supported": rs[0].get("broker_groups"),
            "errors": sorted({e for r in rs for e in r.get("errors", [])}),
            "stalled": sum(1 for r in rs if r.get("stalled")),
            "idle_waits": [r.get("idle") for r in rs],
            "spec": rs[0].get("spec"),
            # reps measured on a broker no earlier measured load had run on; summaries
            # recorded before the runner kept this have no such key
            "fresh_broker_reps": sum(1 for r in rs if r.get("fresh_broker")),
        }
        for name, fn in METRICS.items():
            row[name] = _stats([fn(r) for r in rs])
        rows.append(row)
    return {
        "run_id": data.get("run_id"),
        "kind": data.get("kind"),
        "started": data.get("started"),
        "finished": data.get("finished"),
        "machine": data.get("machine"),
        "settings": data.get("settings"),
        "command": data.get("command"),
        "brokers": data.get("brokers"),
        "failures": [
            {k: v for k, v in f.items() if k != "traceback"} for f in data.get("failures", [])
        ],
        "rows": rows,
    }


def _load_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _summaries(kind: str) -> list[dict]:
    """Summaries of every run of ``kind`` (raw results first, then recorded), by run id."""
    found: dict[str, dict] = {}
    for p in sorted(RECORDED.glob(f"*-{kind}.json")):
        d = _load_json(p)
        if d and d.get("rows"):
            found[d["run_id"]] = d
    for p in sorted(RESULTS.glob(f"*-{kind}.json")):
        d = _load_json(p)
        if d and d.get("results"):
            found[d["run_id"]] = summarize_run(d)
    return [found[k] for k in sorted(found)]


def record(summary: dict) -> None:
    """Keep a shown run's summary in git (bench/recorded/)."""
    RECORDED.mkdir(exist_ok=True)
    path = RECORDED / f"{summary['run_id']}.json"
    path.write_text(json.dumps(summary, indent=1, default=str) + "\n")


def latest_matrix() -> dict | None:
    runs = _summaries("matrix")
    return with_reruns(runs[-1], _summaries("single")) if runs else None


def with_reruns(matrix: dict, singles: list[dict]) -> dict:
    """The matrix with every workload that a later run measured again, for Shoal and
    ActiveMQ in that one run, taken from the latest such run (``reruns`` names it)."""
    rows = list(matrix["rows"])
    reruns: dict[str, str] = {}
    commands: dict[str, str | None] = {}
    for single in singles:
        if single["run_id"] <= matrix["run_id"]:
            continue
        for w in {r["workload"] for r in single["rows"]}:
            got = {r["broker"] for r in single["rows"] if r["workload"] == w}
            if {"shoal", "activemq"} <= got:
                rows = [r for r in rows if r["workload"] != w]
                rows += [r for r in single["rows"] if r["workload"] == w]
                reruns[w] = single["run_id"]
                commands[w] = single.get("command")
    return {
        **matrix,
        "rows": rows,
        "reruns": reruns,
        "rerun_commands": commands,
        "matrix_rows": matrix["rows"],
    }


def latest_validation() -> dict | None:
    paths = sorted(VALIDATION_DIR.glob("*.json"))
    for p in reversed(paths):
        d = _load_json(p)
        if d and d.get("rows"):
            return d
    return None


def single_runs() -> list[dict]:
    return _summaries("single")


def latest_spark() -> tuple[str, dict] | None:
    paths = sorted(RECORDED.glob("spark-*.json"))
    for p in reversed(paths):
        d = _load_json(p)
        if d and d.get("orders"):
            return p.name, d
    return None


def _recovery_section() -> str:
    paths = sorted(RECORDED.glob("recovery-*.json"))
    head = ["## Recovery after kill -9 (1M persistent messages)", ""]
    data = _load_json(paths[-1]) if paths else None
    if not data or not data.get("results"):
        return "\n".join([*head, f"{NYM}.", ""])
    out = [
        *head,
        f"`bench/recorded/{paths[-1].name}`, {data.get('date', '')}: "
        f"`{data.get('command')}`. Goal (journal issue): 1M messages in at most 10 s. "
        "Time from the start command to the first STOMP CONNECTED after SIGKILL of "
        "a broker holding the messages; Shoal's recovered queue depth is read back "
        "from its API.",
        "",
        "Medians over the repetitions, min–max in brackets.",
        "",
        "| broker | messages | reps | fill s (pipelined, persistent) | recovery s "
        "| broker CPU s | RSS MiB after | peak RSS MiB | depth after |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    by_broker: dict[str, list[dict]] = {}
    for r in data["results"]:
        label = BROKER_LABEL.get(r["broker"], r["broker"])
        if r.get("budget_bytes", -1) >= 0:
            label += f" (global-max-size {r['budget_bytes'] / 2**20:g} MiB)"
        by_broker.setdefault(label, []).append(r)
    for label, rs in by_broker.items():

        def spread(key: str, rs: list[dict] = rs) -> str:
            vals = sorted(r[key] for r in rs if key in r)
            if not vals:
                return "–"
            med = statistics.median(vals)
            return f"{med:g}" if len(vals) == 1 else f"{med:g} ({vals[0]:g}–{vals[-1]:g})"

        depths = sorted({r["depth_after"] for r in rs if "depth_after" in r})
        out.append(
            f"| {label} | {rs[0]['messages']:,} | {len(rs)} | "
            f"{spread('fill_s')} | {spread('recovery_s')} | {spread('cpu_s')} | "
            f"{spread('rss_mib')} | {spread('peak_rss_mib')} | "
            f"{', '.join(map(str, depths)) or '–'} |"
        )
    for path in paths[:-1]:
        old = _load_json(path) or {}
        earlier = [
            f"{BROKER_LABEL.get(r['broker'], r['broker'])} {r['recovery_s']} s"
            for r in old.get("results", [])
        ]
        if earlier:
            out += [
                "",
                f"Earlier run `bench/recorded/{path.name}` ({old.get('date', '')}): "
                + ", ".join(earlier)
                + ".",
            ]
    return "\n".join(out) + "\n"


def _spark_section() -> str:
    runs = sorted(RECORDED.glob("spark-*.json"), reverse=True)  # newest first
    head = ["## Spark pipeline (PySpark 4.x, local mode and a standalone cluster)", ""]
    docs = [(p.name, d) for p, d in ((p, _load_json(p)) for p in runs) if d and d.get("orders")]
    if not docs:
        return "\n".join([*head, f"Spark figures: {NYM}.", ""])
    from bench.spark import markdown  # the table lives with the Spark bench

    lines = [
        *head,
        "Targets (issue #7): broker → matching → broker sink exactly once ≥ 45k rows/s; the "
        "source alone ≥ 100k rows/s; compared with the same jobs reading Parquet; small-batch "
        "latency (the study's floor: about 1.2 s). Every recorded run, newest first.",
        "",
    ]
    for name, data in docs:
        lines += [
            f"### Run `bench/recorded/{name}`, {data.get('date', '')}",
            "",
            f"`{data.get('command', 'python -m bench.spark')}`",
            "",
            markdown(data),
            "",
        ]
        if name in SPARK_NOTES:
            lines += [SPARK_NOTES[name], ""]
    return "\n".join(lines)


def _consumers_section() -> str:
    paths = sorted(RECORDED.glob("consumers-*.json"))
    head = ["## Many consumers on one queue", ""]
    docs = [d for d in (_load_json(p) for p in paths) if d and d.get("results")]
    if not docs:
        return "\n".join([*head, f"{NYM}.", ""])
    from bench.consumers import markdown

    runs = "; ".join(f"{d['label']}: `{d['command']}` ({d['date']})" for d in docs)
    return "\n".join(
        [
            *head,
            f"Runs {runs}. Core: N consumers (prefetch 1, client-individual) subscribed to "
            "one queue in process, then 20,000 messages over 5,000 groups sent and acked "
            "(every new group assigned by the fewest-groups rule), then every consumer "
            "unsubscribed; wall seconds of each phase on one thread, as on the event loop. "
            "E2E: the same subscriptions over raw STOMP connections (500 each) to `shoal "
            "serve`, then the connections closed, while another thread timed `GET /health` "
            "every 50 ms (the worst latency in each phase).",
            "",
            markdown(docs),
            "",
            "The code before this change was not run with 10,000 consumers: its cost grows "
            "with the cube of the consumers (26.9 s to subscribe 2,000 above).",
            "",
        ]
    )


def _runs(pattern: str, key: str) -> list[tuple[Path, dict]]:
    """The recorded runs named ``pattern``, oldest first, that hold ``key``."""
    loaded = ((p, _load_json(p)) for p in sorted(RECORDED.glob(pattern)))
    return [(p, d) for p, d in loaded if d and d.get(key)]


def _instructions_section() -> str:
    lines, runs = _recorded_table(
        "## Instructions per message, two builds (bench/instructions.py)",
        "instructions-*.json",
        "rows",
        "The broker's instructions per message received, counted by callgrind "
        "(`valgrind --tool=callgrind`, counting switched on for the measured run only, "
        "after a 2,000-message warm-up; every thread of the broker), each build on a fresh "
        "broker per workload and rep. Unlike CPU time on this shared machine, the count "
        "repeats to within about 1.5% (the same build of 7b1ab13 counted W1 at 90,835 and "
        "89,528 in two runs): it compares builds of the same code paths. It is not a "
        "speed: the broker "
        "runs ~50x slower under valgrind and batches more frames per read than at full "
        "speed, and a cache miss or a syscall costs more than its count.",
        ["run", "workload", "base", "head", "instructions per message base / head", "ratio"],
    )
    for p, d in runs:
        b, h = d["builds"]["base"], d["builds"]["head"]
        for name, row in d["rows"].items():
            lines.append(
                f"| `{d['command']}` ({d['started'][:10]}, {d['messages']:,} messages, "
                f"`{p.name}`) | {name} | {b['rev']} ({b['implementation']}) "
                f"| {h['rev']} ({h['implementation']}) "
                f"| {row['base']['per_message_median']:,.0f} / "
                f"{row['head']['per_message_median']:,.0f} | {row['ratio']:.3f} |"
            )
    return "\n".join([*lines, ""])


def _builds_section() -> str:
    runs = _runs("builds-*.json", "workloads")
    head = ["## Two builds side by side (refactoring keeps speed)", ""]
    docs = [d for _p, d in runs]
    notes = [f"- `{p.name}`: {BUILD_NOTES[p.name]}" for p, _d in runs if p.name in BUILD_NOTES]
    if not docs:
        return "\n".join([*head, f"{NYM}.", ""])
    lines = [
        *head,
        "The same workload with the same client against two builds of Shoal in one run "
        "(`bench/builds.py`: each build a git worktree of its revision, a fresh broker per "
        "rep, the order alternating from rep to rep); medians over the reps.",
        "",
        "| run | workload | base | head | msg/s base / head | broker CPU us/msg base / head "
        "| ratios (throughput, CPU/msg) |",
        "|---|---|---|---|---|---|---|",
    ]
    for d in docs:
        for name, row in d["workloads"].items():
            b, h = row["base"], row["head"]
            lines.append(
                f"| `{d['command']}` ({d['date']}, {d['reps']} reps) | {name} "
                f"| {d['revs']['base']} | {d['revs']['head']} "
                f"| {b['throughput_median']:,.0f} / {h['throughput_median']:,.0f} "
                f"| {b['cpu_us_median']:.1f} / {h['cpu_us_median']:.1f} "
                f"| {row['throughput_ratio']:.2f}x, {row['cpu_ratio']:.2f}x |"
            )
    if notes:
        lines += ["", *notes]
    return "\n".join([*lines, ""])


def _recorded_table(
    title: str, pattern: str, key: str, intro: str, columns: list[str]
) -> tuple[list[str], list[tuple[Path, dict]]]:
    """A section's heading, intro and table head, and the recorded runs for its rows
    (none: the heading and "not yet measured")."""
    runs = _runs(pattern, key)
    if not runs:
        return [title, "", f"{NYM}."], []
    head = "| " + " | ".join(columns) + " |"
    return [title, "", intro, "", head, "|" + "---|" * len(columns)], runs


def _journal_codec_section() -> str:
    lines, runs = _recorded_table(
        "## The journal's record encoder in process (bench/journal_codec.py)",
        "journal-codec-*.json",
        "ns_per_record",
        "`encode_batch` of a batch of 64 persistent 256-byte messages with the load "
        "generator's six headers, and of 64 acks (`MessageRemoved`): a revision's "
        "`codec.py` (pure), this tree's (pure) and this tree's as `import shoal` loads it, "
        "interleaved in one process, each encoder's fastest of the rounds (10 batches a "
        "round); the encoders produced the same bytes. W2 encodes one of each per message. "
        "Encoding only: the index a written round updates is not in it.",
        ["run", "record", "ns per record, each encoder", "1-minute load average (start, end)"],
    )
    for p, d in runs:
        for kind, row in d["ns_per_record"].items():
            cells = ", ".join(f"{name} {ns:,.0f}" for name, ns in row.items())
            load = ", ".join(f"{v:.1f}" for v in d["loadavg_1m"])
            lines.append(
                f"| `{d['command']}` ({d['date']}, head {d['revs']['head']}, "
                f"`{p.name}`) | {kind} | {cells} | {load} |"
            )
    return "\n".join([*lines, ""])


def _journal_path_section() -> str:
    lines, runs = _recorded_table(
        "## W2's journal work without a broker (bench/journal_path.py)",
        "journal-path-*.json",
        "us_per_message_median",
        "What the event loop does in the journal for each W2 message, in a process per "
        "build and rep (the order alternating): per round `append` of 64 new 256-byte "
        "messages and of 64 acks of the previous round's, then `plan_sync`, the write (not "
        "counted) and `finish_sync`, which updates the index. Thread CPU per message, "
        "medians over the reps; both builds compiled where the row says so.",
        [
            "run",
            "build",
            "append",
            "plan_sync",
            "finish_sync",
            "total",
            "every rep, total",
            "1-minute load average (start, end)",
        ],
    )
    for p, d in runs:
        for which, m in d["us_per_message_median"].items():
            each = ", ".join(f"{v:.2f}" for v in d["total_us_per_message"][which])
            lines.append(
                f"| `{d['command']}` ({d['date']}, {d['reps']} reps, `{p.name}`) "
                f"| {which} {d['revs'][which]}, {d['implementation'][which]} "
                f"| {m['append']:.2f} | {m['plan_sync']:.2f} | {m['finish_sync']:.2f} "
                f"| {m['total']:.2f} | {each} "
                f"| {', '.join(f'{v:.1f}' for v in d['loadavg_1m'])} |"
            )
    return "\n".join([*lines, ""])


def _native_label(d: dict, which: str) -> str:
    env = " ".join(f"{k}={v}" for k, v in d.get("env", {}).get(which, {}).items())
    loop = "stdlib asyncio" if "SHOAL_NO_UVLOOP" in env else "uvloop"
    return f"{d.get('implementation', {}).get(which, '?')}, {loop}"


def _native_section() -> str:
    head = ["## Compiled hot path (mypyc) and uvloop", ""]
    docs = [d for _p, d in _runs("native-*.json", "workloads")]
    if not docs:
        return "\n".join([*head, f"{NYM}.", ""])
    lines = [
        *head,
        "One source tree run two ways side by side (`bench/builds.py` with `--base-env`: "
        "SHOAL_PURE=1 runs the pure-Python modules of a compiled build, SHOAL_NO_UVLOOP=1 "
        "the stdlib event loop); a fresh broker per rep, the order alternating; medians and "
        "every rep. Compiled: the STOMP codec and connection "
        "(`src/shoal/_native.py`, built by `make compile`).",
        "",
        "| run | workload | base | head | msg/s base / head | broker CPU us/msg base / head "
        "| every rep, CPU us/msg base; head | ratios (throughput, CPU/msg) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for d in docs:
        for name, row in d["workloads"].items():
            b, h = row["base"], row["head"]
            lines.append(
                f"| `{d['command']}` ({d['date']}, {d['reps']} reps) | {name} "
                f"| {_native_label(d, 'base')} | {_native_label(d, 'head')} "
                f"| {b['throughput_median']:,.0f} / {h['throughput_median']:,.0f} "
                f"| {b['cpu_us_median']:.1f} / {h['cpu_us_median']:.1f} "
                f"| {', '.join(map(str, b['cpu_us']))}; {', '.join(map(str, h['cpu_us']))} "
                f"| {row['throughput_ratio']:.2f}x, {row['cpu_ratio']:.2f}x |"
            )
    lines += [
        "",
        "Reading it: compiling the codec and the STOMP connection saves about 1 us of "
        "broker CPU per message (W1 0.91x, W2 0.95x), far from the issue's 0.35x: the "
        "codec was already built on `bytes.find`/`split`, and the rest of a message's "
        "cost (the event loop, the session in `server/stomp.py`, the broker core) was "
        "still interpreted then. The core is compiled since 2026-11-27 (4bc6645 to 95d36c3): "
        "`Broker` and `Queue` are native classes, their mixins extend the mypyc traits "
        "`BrokerCore`, `QueueCore` and `QueueContext` (they were Protocols, through "
        "which every `self.x` compiled to a by-name lookup), and the hot path's queues "
        "are typed. Counted in instructions per message against 7b1ab13, W1 0.80x, W2 "
        '0.89x, W4 0.79x, AW1 0.87x ("Instructions per message" above, '
        "`instructions-20261127T171356Z.json`). uvloop, "
        "installed by `make run` as a speed-up, costs CPU here: the stdlib loop "
        "(SHOAL_NO_UVLOOP=1) used 0.72x (W1) and 0.78x (W2) uvloop's broker CPU per "
        "message, with 1.37x and 1.45x its median throughput, in the runs above (both "
        'on the compiled build). Explained and fixed since: see "Event loop: uvloop vs '
        'asyncio" below.',
        "",
    ]
    return "\n".join(lines)


def _loop_label(d: dict, which: str) -> str:
    env = d.get("env", {}).get(which, {})
    loop = "stdlib asyncio" if "SHOAL_NO_UVLOOP" in env else "uvloop"
    return f"{d['revs'][which]} {d.get('implementation', {}).get(which, '?')}, {loop}"


def _loop_section() -> str:
    paths = sorted(RECORDED.glob("loop-*.json"))
    head = ["## Event loop: uvloop vs asyncio", ""]
    docs = [d for d in (_load_json(p) for p in paths) if d and d.get("workloads")]
    if not docs:
        return "\n".join([*head, f"{NYM}.", ""])
    lines = [
        *head,
        LOOP_INTRO,
        "",
        "| run | workload | base / head | msg/s base / head | broker CPU us/msg base / head "
        "| every rep, CPU us/msg base; head | p99 ms base / head | ratios (throughput, "
        "CPU/msg) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for d in docs:
        for name, row in d["workloads"].items():
            b, h = row["base"], row["head"]

            def p99(x: dict) -> str:
                v = x.get("p99_ms_median")
                return "-" if v is None else f"{v:.1f}"

            lines.append(
                f"| `{d['command']}` ({d['date']}, {d['reps']} reps) "
                f"| {name} | {_loop_label(d, 'base')} / {_loop_label(d, 'head')} "
                f"| {b['throughput_median']:,.0f} / {h['throughput_median']:,.0f} "
                f"| {b['cpu_us_median']:.1f} / {h['cpu_us_median']:.1f} "
                f"| {', '.join(map(str, b['cpu_us']))}; {', '.join(map(str, h['cpu_us']))} "
                f"| {p99(b)} / {p99(h)} "
                f"| {row['throughput_ratio']:.2f}x, {row['cpu_ratio']:.2f}x |"
            )
    return "\n".join([*lines, "", LOOP_READING, ""])


LOOP_INTRO = (
    "`shoal serve` runs on uvloop when it is installed (`make run` installs it, the "
    "`fast` extra); `SHOAL_NO_UVLOOP=1` runs the stdlib loop. Both run side by side "
    "with `bench/builds.py` (one source tree, `--base-env`; a fresh broker per rep, the "
    "order alternating; every phase of a multi-phase workload is its own row). p99: the "
    "median over the reps of each rep's p99 end-to-end latency."
)
LOOP_READING = (
    "Why uvloop cost more before: libuv reads a readable socket up to 32 times in one "
    "loop iteration, the stdlib loop once, and the broker turns the core's effects into "
    "bytes once an iteration (the call_soon'd flush in `server/app.py`). Under W1 the "
    "producer's connection was read again before the flush in about half of all reads "
    "(152 of 280 reads in one run, 0 on the stdlib loop), so its burst outran the deliveries and "
    "the consumers' acks: the consumers had no prefetch left when a SEND arrived and "
    "nearly every message went through the queue (100,944 `place` and 109 "
    "`_dispatch_ready` calls under cProfile for 100k messages, none on the stdlib loop) "
    "instead of straight to its consumer, with more young garbage collections (20 against "
    "3) on the way. That counted instrumentation was temporary; it is not in the tree. "
    "Now a connection read a second time before the flush pauses reading until the flush "
    "(`StompSession.data_received`/`flushed`), which makes uvloop read as the stdlib loop "
    "does. Single W1 runs with that probe (a fresh broker, no warm-up): uvloop 10.1-11.6 "
    "against 8.1-9.3 us/msg on the stdlib loop before, 8.4 against 8.4 after; "
    "the 0244d62 row above is main before the change against it, both on uvloop (pure "
    "builds: the base tree has no compiled modules): 11.5 against 9.9 us/msg. The runs "
    "above after the change: W1 within noise (uvloop 1.06x the CPU per message, 1.19x "
    "the throughput), W5 alike, and receipted persistent SENDs (W6 1p, 8p, 32p) faster on "
    "uvloop (1.8-2.4x the median throughput, 0.73-0.85x the CPU per message; the disk is "
    "shared, so the reps spread widely). So the default stays uvloop; "
    "`SHOAL_NO_UVLOOP=1` remains to measure the stdlib loop. Why the stdlib loop is "
    "slower on W6 (the fsync round trip through `server/persistence.py`: a worker thread "
    "and `call_soon_threadsafe`) is not explained yet."
)


def _cluster_section() -> str:
    paths = sorted(RECORDED.glob("cluster-*.json"))
    head = ["## Cluster (docs/cluster.md)", ""]
    docs = [d for d in (_load_json(p) for p in paths) if d and d.get("decisions")]
    runs = [d for d in docs if d.get("cw1")]
    if not runs:
        return "\n".join([*head, f"{NYM}.", ""])
    from bench.cluster import forwarding_note, markdown

    d = max(runs, key=lambda r: (r["date"], r.get("time", "")))
    lines = [
        *head,
        f"One run, `{d['command']}` ({d['date']} {d.get('time', '')}; bench/cluster.py): "
        "ZooKeeper and the nodes on loopback, in-memory stores, the W1 harness's clients "
        "(bench/loadgen) on the same 2 shared cores. CW1 and CW2 figures are medians over "
        f"{len(d['cw1'])} reps, figure by figure; order violations and the last row count "
        "every rep.",
        "",
        markdown(d),
        "",
        forwarding_note(d),
        "",
    ]
    before = [
        r for r in docs if r.get("cluster")
    ]  # the first run: CW1-lite, before the link batched
    for r in before:
        c, s1 = r["cluster"], r["single"]
        lines += [
            f"Before the link wrote SENDs in runs with one RECEIPT per run (`{r['command']}`, "
            f"{r['date']}, CW1-lite: one raw-socket producer and two consumers): "
            f"{c['msg_per_s']:,.0f} msg/s at {c['broker_cpu_us_per_msg']:.1f} µs broker CPU/msg "
            f"summed over the nodes, against {s1['msg_per_s']:,.0f} msg/s at "
            f"{s1['broker_cpu_us_per_msg']:.1f} µs on one node "
            f"({c['broker_cpu_us_per_msg'] / s1['broker_cpu_us_per_msg']:.1f}x).",
            "",
        ]
    return "\n".join(lines)


def _cluster_faults_section() -> str:
    paths = sorted(RECORDED.glob("faults-*.json"))
    head = ["## Cluster faults: kill -9 and a network partition (docs/cluster.md)", ""]
    docs = [d for d in (_load_json(p) for p in paths) if d and d.get("faults")]
    if not docs:
        return "\n".join([*head, f"{NYM}.", ""])
    from bench.cluster_faults import markdown

    d = docs[-1]
    return "\n".join(
        [
            *head,
            f"One run, `{d['command']}` ({d['date']}; bench/cluster_faults.py): ZooKeeper "
            "and three nodes, a producer (persistent, one receipt at a time) and an auto-ack "
            "consumer on every node, nine groups, three held by each node. The partition run "
            "puts ZooKeeper and each node in a network namespace of its own (as root) and "
            "sets n3's bridge port down until ZooKeeper has expired n3's session, plus 2 s; "
            "the third column does the same with `rebind-after = 500`, healing once n3's "
            "groups are served by their new holders.",
            "",
            markdown(d),
            "",
            "Not profiled: recovery includes the links' reconnect back-off (up to 2 s) and, "
            "after a partition, the cut-off node's new ZooKeeper session and binding "
            "re-check before it delivers its groups again.",
            "",
        ]
    )


def _amqp_section() -> str:
    paths = sorted(RECORDED.glob("amqp-w1-*.json"), reverse=True)  # newest first
    head = ["## AW1: W1 over AMQP 1.0 (docs/amqp.md)", ""]
    docs = [(p.name, d) for p, d in ((p, _load_json(p)) for p in paths) if d and d.get("summary")]
    if not docs:
        return "\n".join([*head, f"{NYM}.", ""])
    from bench.amqp_w1 import markdown

    lines = [
        *head,
        "`bench/amqp_w1.py`: W1's shape (256-byte non-persistent messages, 100 groups, 4 "
        "consumers accepting each message, credit/prefetch 1000, one producer not waiting "
        "for answers: pre-settled transfers on AMQP). Shoal and RabbitMQ over AMQP 1.0 with "
        "the same Qpid Proton reactor clients (Python, one process each); Shoal over STOMP "
        "with the load generator after a warm-up (and, from 2026-11-27 on, Shoal's AMQP run "
        "after a warm-up of its own, and a STOMP run held to the msg/s of the same rep's AMQP "
        "run, which compares the protocols at the same load). A fresh broker per run; the "
        "broker's CPU "
        "counts from the first send until the consumers together have every message (their "
        "counts polled every 0.2 s). "
        "RabbitMQ (`rabbitmq_amqp1_0`) has no groups: a throughput reference only. The "
        "issue's goal: broker CPU per AMQP message at most 1.5x the STOMP figure. The AMQP "
        "msg/s are bounded by the Python Proton clients (5 processes on the same 2 cores) as "
        "much as by the brokers; broker CPU per message is the figure to compare. Every "
        "recorded run, newest first.",
        "",
    ]
    for name, d in docs:
        ratio = d.get("amqp_over_stomp_cpu")
        load = d.get("loadavg_1m_at_starts") or []
        lines += [
            f"### Run `bench/recorded/{name}`, {d.get('date', '')}",
            "",
            f"`{d['command']}`, {d['reps']} reps, {d['wall_s']:.0f} s; 1-minute load average "
            f"at the runs' starts {min(load):.1f}-{max(load):.1f} (2 shared cores)."
            if load
            else f"`{d['command']}`, {d['reps']} reps.",
            "",
            markdown(d),
            "",
        ]
        if ratio is not None:
            met = "met" if ratio <= 1.5 else "**not met**"
            lines += [
                f"Broker CPU per AMQP message: {ratio:.1f}x the STOMP figure (goal {met}).",
                "",
            ]
        paced = d.get("amqp_over_paced_stomp_cpu")
        if paced is not None:
            lines += [
                f"Against STOMP held to the AMQP run's msg/s (the same load): {paced:.2f}x.",
                "",
            ]
    return "\n".join(lines)


def _amqp_builds_section() -> str:
    paths = sorted(RECORDED.glob("amqp-builds-*.json"), reverse=True)
    head = ["## AW1 before and after a change (bench/amqp_compare.py)", ""]
    docs = [d for d in (_load_json(p) for p in paths) if d and d.get("amqp")]
    if not docs:
        return "\n".join([*head, f"{NYM}.", ""])
    lines = [
        *head,
        "`bench/amqp_compare.py`: AW1 (`bench/amqp_w1.py`: 256-byte non-persistent messages "
        "in 100 groups, one producer sending pre-settled transfers, 4 consumers with credit "
        "1000 accepting each message, Proton reactor clients in separate processes) on a "
        "fresh broker of each build per rep, the order alternating from rep to rep; then W1's "
        "shape over STOMP (the load generator, 20,000 warm-up messages) on the head build, on "
        "the same count. Medians over the reps; broker CPU is the `shoal serve` process's "
        "utime+stime over the run. Issue #16's goal: broker CPU per AMQP message at most "
        "1.5x the STOMP figure. AMQP msg/s is bounded by the Python Proton clients (five "
        "processes on the same 2 cores), not by the broker.",
        "",
    ]
    for d in docs:
        lines += [
            f"### Run `bench/recorded/{paths[docs.index(d)].name}`, {d['date']}",
            "",
            f"`{d['command']}` ({d['reps']} reps of {d['messages']:,} messages"
            + (
                f"; 1-minute load average at the runs' starts {min(load):.1f}-{max(load):.1f})"
                if (load := d.get("loadavg_1m_at_starts"))
                else ")"
            ),
            "",
            "| build | protocol | msg/s (median) | broker CPU us/msg (median) | per rep (us/msg) "
            "| AMQP / STOMP CPU | groups in order |",
            "|---|---|---|---|---|---|---|",
        ]
        stomp = d["stomp"]
        for which in ("base", "head"):
            row = d["amqp"].get(which)
            if row is None:
                continue
            order = "yes" if row["out_of_order"] == 0 else f"no ({row['out_of_order']})"
            lines.append(
                f"| {which} ({d['revs'][which]}) | AMQP | {row['msg_per_s_median']:,.0f} "
                f"| {row['cpu_us_median']:.1f} | {', '.join(f'{v:.1f}' for v in row['cpu_us'])} "
                f"| {row['ratio_to_stomp']:.1f}x | {order} |"
            )
        lines += [
            f"| head ({d['revs']['head']}) | STOMP | {stomp['msg_per_s_median']:,.0f} "
            f"| {stomp['cpu_us_median']:.1f} | {', '.join(f'{v:.1f}' for v in stomp['cpu_us'])} "
            "| 1x | |",
            "",
        ]
        ratio = d["amqp"]["head"]["ratio_to_stomp"]
        lines += [
            f"Goal (at most 1.5x): **{'met' if ratio <= 1.5 else 'not met'}** ({ratio:.1f}x).",
            "",
        ]
        note = AMQP_BUILD_NOTES.get(paths[docs.index(d)].name)
        if note:
            lines += [note, ""]
    return "\n".join(lines)


# --- formatting -----------------------------------------------------------------------


def _num(v, digits: int = 0) -> str:
    if v is None:
        return "–"
    if isinstance(v, float) and math.isinf(v):
        return "∞"
    if isinstance(v, float) and digits == 0 and abs(v) < 10 and v != int(v):
        return f"{v:.2f}" if abs(v) < 1 else f"{v:.1f}"
    return f"{v:,.{digits}f}"


def _ms(v) -> str:
    if v is None:
        return "–"
    if isinstance(v, float) and math.isinf(v):
        return "> deadline"
    if v < 1:
        return f"{v:.2f}"
    if v < 10:
        return f"{v:.1f}"
    return f"{v:,.0f}"


def _mm(st: dict | None, fmt=_num) -> str:
    """median (min–max)"""
    if st is None:
        return NYM
    if st["n"] == 1 or st["min"] == st["max"]:
        return fmt(st["median"])
    return f"{fmt(st['median'])} ({fmt(st['min'])}–{fmt(st['max'])})"


def _med(st: dict | None, fmt=_num) -> str:
    return NYM if st is None else fmt(st["median"])


def _allv(st: dict | None) -> str:
    if st is None:
        return NYM
    return " / ".join(_num(v) for v in st["values"])


def _build(row: dict) -> str:
    """The broker build a row ran on, as the runner recorded it (Shoal: its git commit)."""
    return row.get("version") or "–"


def _find(rows: list[dict], broker: str, wname: str, phase: str) -> dict | None:
    for r in rows:
        if r["broker"] == broker and r["workload"] == wname and r["phase"] == phase:
            return r
    return None


def _machine_line(s: dict) -> str:
    m = s.get("machine") or {}
    return (
        f"{m.get('cpus', '?')} vCPU ({m.get('cpu_model', '?')}), {m.get('mem_gib', '?')} GiB, "
        f"{m.get('os', '?')}, kernel {m.get('kernel', '?')}, Python {m.get('python', '?')}, "
        f"{m.get('java') or 'no java'}"
    )


def _other_line(rows: list[dict]) -> str:
    vals = [v for r in rows if r.get("other") for v in r["other"]["values"]]
    if not vals:
        return "not recorded"
    return f"{min(vals):.2f}–{max(vals):.2f} cores (median {statistics.median(vals):.2f})"


# --- targets ----------------------------------------------------------------------------


def _ratio(a: dict | None, b: dict | None, key: str) -> float | None:
    if not a or not b or not a.get(key) or not b.get(key):
        return None
    x, y = a[key]["median"], b[key]["median"]
    if x is None or y in (None, 0) or math.isinf(x) or math.isinf(y):
        return None
    return x / y


def fresh_broker_each_rep(row: dict) -> bool:
    """Whether every rep of ``row`` ran on a broker of its own (the runner's method since
    W8 got ``broker_per_rep``); older summaries do not say, and ran reps on one broker."""
    return row.get("fresh_broker_reps") == row["reps"]


def _w8_old_method(row: dict) -> str:
    values = row["rss_per_group_end"]["values"]
    per_rep = " / ".join(f"{v:,.0f}" for v in values)
    return (
        f"**Measured with the old method:** the {len(values)} reps ran one after another on "
        "one broker, and each rep's RSS growth was taken from the RSS before it, which the "
        "reps before it had already raised; only the first rep ran on a fresh broker. "
        f"Per rep, in the order run: {per_rep} B per group at the end. The runner now "
        "starts a fresh broker for every W8 rep (`broker_per_rep` in `bench/workloads.py`); "
        "W8 has not been measured that way yet."
    )


def evaluate_targets(s: dict | None) -> list[dict]:
    rows = s["rows"] if s else []
    sh = lambda w, ph="main": _find(rows, "shoal", w, ph)  # noqa: E731
    aq = lambda w, ph="main": _find(rows, "activemq", w, ph)  # noqa: E731
    out = []

    def add(w, text, value, met):
        out.append(
            {
                "workload": w,
                "target": text,
                "value": value,
                "status": NYM
                if met is None
                else "–"
                if met == "info"
                else ("met" if met else "**missed**"),
            }
        )

    r = _ratio(sh("W1"), aq("W1"), "throughput")
    c = _ratio(sh("W1"), aq("W1"), "cpu_us")
    # The first round's goals, then the performance issue's (#17), higher.
    for at_least, at_most, issue in ((1.5, 0.7, ""), (2.0, 0.35, " (#17)")):
        ceiling = ", or within 10% of the client's ceiling" if issue else ""
        add(
            "W1",
            f"throughput ≥ {at_least:g}× ActiveMQ{ceiling}{issue}",
            f"{r:.2f}×" if r else NYM,
            None if r is None else r >= at_least,
        )
        add(
            "W1",
            f"broker CPU/msg ≤ {at_most:g}× ActiveMQ{issue}",
            f"{c:.2f}×" if c else NYM,
            None if c is None else c <= at_most,
        )
    for w, ph, goal in (("W2", "main", 2.5), ("W4", "main", 2.0)):
        r = _ratio(sh(w, ph), aq(w, ph), "throughput")
        add(
            w,
            f"throughput ≥ {goal:g}× ActiveMQ (#17)",
            f"{r:.2f}×" if r else NYM,
            None if r is None else r >= goal,
        )
    for w, ph in (("W1", "main"), ("W6", "8p-nodisk"), ("W6", "8p")):
        r = _ratio(sh(w, ph), _find(rows, "nullsink", w, ph), "throughput")
        if r is not None:
            add(
                w,
                f"{'' if ph == 'main' else ph + ': '}throughput within "
                f"{CEILING_MARGIN:.0%} of the client's ceiling (the null sink, same run)",
                f"{r:.2f}×",
                r >= 1 - CEILING_MARGIN,
            )
    r = _ratio(sh("W2"), aq("W2"), "throughput")
    add(
        "W2",
        "throughput ≥ 1.5× ActiveMQ",
        f"{r:.2f}×" if r else NYM,
        None if r is None else r >= 1.5,
    )
    add(
        "W2",
        "throughput ≥ 2× ActiveMQ (the journal issue's goal)",
        f"{r:.2f}×" if r else NYM,
        None if r is None else r >= 2,
    )
    w3 = sh("W3")
    if w3 and w3.get("viol_cross") and w3.get("viol_consumer"):
        tot = w3["viol_cross"]["max"] + w3["viol_consumer"]["max"]
        add("W3", "0 order violations (every rep)", f"{tot} (worst rep)", tot == 0)
    else:
        add("W3", "0 order violations (every rep)", NYM, None)
    a, b = sh("W5"), aq("W5")
    if a and b and a.get("p99") and b.get("p99"):
        add(
            "W5",
            "p99 no worse than ActiveMQ",
            f"{_ms(a['p99']['median'])} vs {_ms(b['p99']['median'])} ms",
            a["p99"]["median"] <= b["p99"]["median"],
        )
    else:
        add("W5", "p99 no worse than ActiveMQ", NYM, None)
    r = _ratio(sh("W6", "8p"), aq("W6", "8p"), "throughput")
    add(
        "W6",
        "8 producers: throughput ≥ 3× ActiveMQ",
        f"{r:.2f}×" if r else NYM,
        None if r is None else r >= 3,
    )
    for phase, goal in (("1p", 1.2), ("32p", 2.0)):
        r = _ratio(sh("W6", phase), aq("W6", phase), "throughput")
        add(
            "W6",
            f"{phase[:-1]} producer(s): throughput ≥ {goal:g}× ActiveMQ (#17)",
            f"{r:.2f}×" if r else NYM,
            None if r is None else r >= goal,
        )
    a, b = sh("W6", "32p"), aq("W6", "32p")
    if a and b and all(x.get(k) for x in (a, b) for k in ("cpu_us", "client_us")):
        # Both cores are full at 32p: msg/s is about 2 cores over broker + client CPU
        # per message, and the client's share is the same code against either broker.
        peer_broker, peer_client = b["cpu_us"]["median"], b["client_us"]["median"]
        broker, client = a["cpu_us"]["median"], a["client_us"]["median"]
        peer = peer_broker + peer_client
        add(
            "W6",
            "32 producers, where the CPU goes (µs per message, broker + client; both cores "
            "are full, so msg/s follows the sum): the ratio if Shoal's broker took no CPU "
            "at all, and the broker CPU that 2× would need",
            f"ActiveMQ {_num(peer_broker)} + {_num(peer_client)}, Shoal {_num(broker)} + "
            f"{_num(client)}; at most {peer / client:.2f}×; 2× needs Shoal's broker ≤ "
            f"{_num(max(peer / 2 - client, 0.0))}",
            "info",
        )
    a, b = sh("W6", "8p-nodisk"), aq("W6", "8p")
    if a and b and a.get("throughput") and b.get("throughput"):
        ceiling, goal = a["throughput"]["median"], 3 * b["throughput"]["median"]
        add(
            "W6",
            "8 producers without fsync (non-persistent): the ceiling of Shoal and this "
            "client together (the client alone is the null sink's row), vs 3× ActiveMQ's "
            "persistent 8p",
            f"{_num(ceiling)} vs {_num(goal)} msg/s",
            "info",
        )
    a, b = sh("W7", "loaded"), sh("W7", "unloaded")
    if a and b and a.get("p99") and b.get("p99"):
        x, y = a["p99"]["median"], b["p99"]["median"]
        add(
            "W7",
            "other groups' p99 < 2× their unloaded p99",
            f"{_ms(x)} vs {_ms(y)} ms",
            (not math.isinf(x)) and x < 2 * y,
        )
    else:
        add("W7", "other groups' p99 < 2× their unloaded p99", NYM, None)
    a = sh("W8")
    if a and a.get("rss_per_group_end"):
        v = max(a["rss_per_group_end"]["median"], 0)
        value = f"{v:,.0f} B/group"
        if not fresh_broker_each_rep(a):
            first = max(a["rss_per_group_end"]["values"][0], 0)
            value += (
                f" (old method, reps on one broker; the first rep, on a fresh broker: "
                f"{first:,.0f} B/group)"
            )
            v = max(v, first)
        add("W8", "≤ 300 B broker RSS per group", value, v <= 300)
    else:
        add("W8", "≤ 300 B broker RSS per group", NYM, None)
    return out


# --- plots -------------------------------------------------------------------------------


def _bar_keys(rows: list[dict]) -> list[tuple[str, str]]:
    keys = []
    for w in list(WORKLOADS):
        for ph in WORKLOADS[w].phases:
            if any(r["workload"] == w and r["phase"] == ph for r in rows):
                keys.append((w, ph))
    return keys


def write_plots(s: dict, label: str) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = s["rows"]
    keys = _bar_keys(rows)
    brokers = [b for b in BROKER_ORDER if any(r["broker"] == b for r in rows)]
    if not keys or not brokers:
        return []
    names = []
    xt = [w if ph == "main" else f"{w}\n{ph}" for w, ph in keys]
    width = 0.8 / len(brokers)

    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(keys) + 2), 4.2))
    for i, b in enumerate(brokers):
        xs, ys, lo, hi = [], [], [], []
        for j, (w, ph) in enumerate(keys):
            r = _find(rows, b, w, ph)
            if r and r.get("throughput"):
                t = r["throughput"]
                xs.append(j + (i - (len(brokers) - 1) / 2) * width)
                ys.append(t["median"])
                lo.append(t["median"] - t["min"])
                hi.append(t["max"] - t["median"])
        ax.bar(xs, ys, width, yerr=[lo, hi], capsize=2, label=BROKER_LABEL.get(b, b))
    ax.set_xticks(range(len(keys)), xt)
    ax.set_yscale("log")
    ax.set_ylabel("msg/s (median, min–max)")
    ax.set_title(f"Throughput per workload ({label})")
    ax.legend()
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    path = DOCS / "bench-throughput.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    names.append(path.name)

    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(keys) + 2), 4.2))
    markers = {"p50": "o", "p99": "s", "p999": "^"}
    for i, b in enumerate(brokers):
        for pct, mk in markers.items():
            xs, ys = [], []
            for j, (w, ph) in enumerate(keys):
                r = _find(rows, b, w, ph)
                if r and r.get(pct) and not math.isinf(r[pct]["median"]):
                    xs.append(j + (i - (len(brokers) - 1) / 2) * width)
                    ys.append(max(r[pct]["median"], 1e-3))
            ax.scatter(xs, ys, marker=mk, color=f"C{i}", label=f"{BROKER_LABEL.get(b, b)} {pct}")
    ax.set_xticks(range(len(keys)), xt)
    ax.set_yscale("log")
    ax.set_ylabel("latency, ms (median of reps)")
    ax.set_title(f"Latency percentiles per workload ({label})")
    ax.legend(fontsize=7, ncol=len(brokers))
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    path = DOCS / "bench-latency.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    names.append(path.name)
    return names


# --- the document -------------------------------------------------------------------------

HEADER = """\
# Benchmarks: Shoal side by side with {peers}

<!-- Generated by `python -m bench.run` (bench/report.py) from bench/results/,
     bench/recorded/ and bench/validation/. Edit bench/report.py (the words about
     a recorded run: bench/notes.py), not this file. -->

Shoal's numbers come from the same client run against Shoal and the brokers people
would pick instead, on the same machine; each table names the run (file and command)
it comes from, and each matrix row the build it ran on. Nothing on this page is a
number that was not measured; a cell that has no measurement says "{nym}".

## How to reproduce

```sh
make bench                      # = .venv/bin/python -m bench.run --all: W1-W8, all brokers, 3 reps
.venv/bin/python -m bench.run --broker activemq --workload W1 --reps 3   # one cell
.venv/bin/python -m bench.run --validate   # the reference ActiveMQ rows (harness check)
.venv/bin/python -m bench.run --report     # regenerate this page and the plots
.venv/bin/python -m bench.loadgen --broker activemq --messages 100000 --groups 100  # ad hoc
.venv/bin/python -m bench.amqp_compare --base REV --reps 3   # AW1 (AMQP) vs REV and STOMP
```

Peers are started and stopped by the harness, each in a private temp directory on free
127.0.0.1 ports: ActiveMQ from the Debian package `activemq` (config
`bench/peers/activemq/`, JVM heap 1 GiB, STOMP connector, default policies: prefetch
1000, 1024-group LRU map), RabbitMQ from `rabbitmq-server` with `rabbitmq_stomp`
(`bench/peers/rabbitmq/`; it has **no message groups**: it shows what users get without
them), Shoal as `shoal serve --stomp ... --http ... --data DIR`. The Debian packages are
installed only when missing. Options of the load generator: `python -m bench.loadgen --help`.

## Method

* Client (`bench/loadgen/`): producers and consumers are separate processes with their
  own connections, on plain sockets. Pipelined producers write 64 SEND frames per
  write; synchronous ones wait for a RECEIPT per SEND. Consumers batch their ACK frames
  per read. Every message carries `JMSXGroupID` (unless the workload has no group
  header), `bench-group`, `bench-gseq`, `bench-seq` and `bench-ts` (`time.time_ns()` at
  framing). Prefetch 1000 (`activemq.prefetchSize` and `prefetch-count`), STOMP 1.2,
  `ack:client-individual`, 256 B payloads, 4 consumers unless a workload says otherwise.
* Throughput = distinct messages received / (last receive − first send).
  Latency = receive − `bench-ts`; p50/p99/p999 are nearest-rank over every message;
  a message never received counts as +∞.
* Checks on every run: loss and duplicates (by `bench-seq`); per-consumer order
  (per consumer and group, `bench-gseq` must increase); cross-consumer order (per
  group in receive-time order: a message received after a *different* consumer had
  received a later message of its group); groups that reached more than one consumer.
* Broker CPU = utime+stime of the broker's processes (the JVM, beam.smp, the Python
  server; reaped children included) from `/proc`, over the measured window (producers
  released → last message received), per message received. Broker RSS from
  `/proc/<pid>/status`, before, peak and end. `other` = machine CPU (from `/proc/stat`)
  not used by the broker or the benchmark's own processes: it shows noisy runs.
* Each workload runs on freshly started brokers, one broker at a time, after a warm-up
  of passes of 100k W1 messages that stops once the broker's CPU per message of two
  passes in a row is within 10% (at most 8 passes: a JVM's compiler threads share the
  2 cores with the load, so it needs several; the validation run below used a single
  pass), then
  3 repetitions on separate queues; W8, which measures RSS growth, starts a fresh
  broker (with its own warm-up) for each repetition. A run whose command has
  `--interleave` starts the workload's brokers together instead and takes turns
  rep by rep, the order flipping every rep, so that a slow spell of this shared machine
  falls on every broker alike rather than on one broker's block of reps. Before each
  warm-up pass and repetition the runner waits (up to 120 s) for other load to stay
  below 0.25 cores.
  Values are medians over the repetitions, min–max in brackets.
* The client's ceiling (`bench/peers/nullsink.py`, `--broker nullsink`; `--all` runs it
  on W1 and W6): **not a broker**. A one-process selectors loop that answers CONNECT,
  SUBSCRIBE and every `receipt` header, hands each SEND on at once as a MESSAGE (its
  bytes behind `subscription`, `message-id` and `ack`) to the next subscriber of its
  destination, round robin, and drops ACKs: no groups, no storage, no redelivery, no
  flow control. It costs so little per frame that the same client, on the same 2
  cores, is what limits its row: its msg/s is the most this client carries here. Its
  CPU is read like a broker's. Where Shoal's W1 (or W6) throughput is within 10% of
  it, the client, not Shoal, is the bound. It has no groups: under W1's plan (100
  groups sent in turn, 4 consumers) round robin happens to keep each group on one
  consumer, so its order columns show 0; that is the plan's arithmetic, not groups.

## Workloads and targets

| | workload | target (Shoal vs ActiveMQ, medians, same run) |
|---|---|---|
{workload_rows}
"""


def _workload_rows() -> str:
    lines = []
    for w in STANDARD:
        wl = WORKLOADS[w]
        title = wl.title + (f". {wl.notes}" if wl.notes else "")
        lines.append(f"| {w} | {title} | {wl.target or '–'} |")
    return "\n".join(lines)


# Issue 17's goals, Shoal against ActiveMQ in one matrix run: (msg/s ratio, CPU ratio).
ISSUE17_GOALS: dict[tuple[str, str], tuple[float, float | None]] = {
    ("W1", "main"): (2.0, 0.35),
    ("W2", "main"): (2.5, None),
    ("W4", "main"): (2.0, None),
    ("W6", "1p"): (1.2, None),
    ("W6", "32p"): (2.0, None),
}


def _matrix_before_after_section() -> str:
    """The last two matrix runs side by side, every workload and phase: what a
    round of changes did to each figure (none may get worse while another
    gets better)."""
    runs = _summaries("matrix")
    head = ["## The matrix before and after (the last two matrix runs)", ""]
    if len(runs) < 2:
        return "\n".join([*head, f"{NYM}: one matrix run only.", ""])
    before, after = runs[-2], runs[-1]

    def cell(run: dict, broker: str, w: str, phase: str) -> dict | None:
        for r in run["rows"]:
            if (r["broker"], r["workload"], r["phase"]) == (broker, w, phase):
                return r
        return None

    def med(r: dict | None, key: str) -> float | None:
        v = (r or {}).get(key) or {}
        return v.get("median") if isinstance(v, dict) else None

    def num(x: float | None, digits: int = 0) -> str:
        return "–" if x is None else f"{x:,.{digits}f}"

    def ratio(a: float | None, b: float | None) -> str:
        return "–" if not a or not b else f"{a / b:.2f}×"

    lines = [
        *head,
        f"Before: `{before['run_id']}` (`{before.get('command')}`). After: `{after['run_id']}` "
        f'(`{after.get("command")}`). Medians of each run\'s reps; "vs ActiveMQ" is Shoal '
        "over ActiveMQ in the same run (msg/s, broker CPU per message). W8's figure is broker "
        "RSS per group (bytes, end), not throughput. Goals are issue 17's.",
        "",
        "| workload | phase | Shoal msg/s before → after | Shoal CPU µs/msg before → after "
        "| ActiveMQ msg/s before → after | vs ActiveMQ before | vs ActiveMQ after | issue 17 goal |",
        "|---|---|---|---|---|---|---|---|",
    ]
    keys = [(r["workload"], r["phase"]) for r in after["rows"] if r["broker"] == "shoal"]
    for w, phase in keys:
        sb, sa = cell(before, "shoal", w, phase), cell(after, "shoal", w, phase)
        ab, aa = cell(before, "activemq", w, phase), cell(after, "activemq", w, phase)
        if w == "W8":
            shoal_tp = (
                f"{num(med(sb, 'rss_per_group_end'))} → {num(med(sa, 'rss_per_group_end'))} B/group"
            )
        else:
            shoal_tp = f"{num(med(sb, 'throughput'))} → {num(med(sa, 'throughput'))}"
        vs = []
        for s, a in ((sb, ab), (sa, aa)):
            vs.append(
                f"{ratio(med(s, 'throughput'), med(a, 'throughput'))}, "
                f"{ratio(med(s, 'cpu_us'), med(a, 'cpu_us'))}"
            )
        goal = ISSUE17_GOALS.get((w, phase))
        if goal is None:
            verdict = "–"
        else:
            tp_goal, cpu_goal = goal
            tp = (med(sa, "throughput") or 0) / (med(aa, "throughput") or float("inf"))
            ok = tp >= tp_goal
            text = f"msg/s ≥ {tp_goal}×"
            if cpu_goal is not None:
                cpu = (med(sa, "cpu_us") or float("inf")) / (med(aa, "cpu_us") or 1)
                ok = ok and cpu <= cpu_goal
                text += f", CPU ≤ {cpu_goal}×"
            verdict = f"{text}: {'met' if ok else 'missed'}"
        lines.append(
            f"| {w} | {phase} | {shoal_tp} | {num(med(sb, 'cpu_us'), 1)} → "
            f"{num(med(sa, 'cpu_us'), 1)} | {num(med(ab, 'throughput'))} → "
            f"{num(med(aa, 'throughput'))} | {vs[0]} | {vs[1]} | {verdict} |"
        )
    note = MATRIX_PAIR_NOTES.get((before["run_id"], after["run_id"]))
    if note:
        lines += ["", note]  # its paragraphs are apart by a blank line ("\n\n")
    lines.append("")
    return "\n".join(lines)


def _matrix_section(s: dict | None, plots: list[str]) -> str:
    out = ["## Results: standard matrix", ""]
    if s is None:
        out += [
            f"**Shoal: {NYM}. RabbitMQ: {NYM}. ActiveMQ (matrix run): {NYM}.** "
            "No `make bench` run has been recorded on this machine yet; the ActiveMQ "
            "figures measured so far are in the validation section below.",
            "",
        ]
        out += ["| workload | Shoal | ActiveMQ 5.17 | RabbitMQ |", "|---|---|---|---|"]
        for w in STANDARD:
            out.append(f"| {w} | {NYM} | {NYM} (see validation) | {NYM} |")
        out += [
            "",
            "### Targets",
            "",
            "| workload | target | value | status |",
            "|---|---|---|---|",
        ]
        for t in evaluate_targets(None):
            out.append(f"| {t['workload']} | {t['target']} | {t['value']} | {t['status']} |")
        return "\n".join(out) + "\n"
    out += [
        f"Run `{s['run_id']}` (`bench/recorded/{s['run_id']}.json`, `{s.get('command')}`), "
        f"{s.get('started')} to {s.get('finished')} (UTC). "
        f"Machine: {_machine_line(s)}. Other load during the measured runs: "
        f"{_other_line(s['rows'])}.",
        "",
    ]
    if s["run_id"] in MATRIX_NOTES:
        out += [MATRIX_NOTES[s["run_id"]], ""]
    for b, info in (s.get("brokers") or {}).items():
        if info.get("error"):
            out.append(
                f"* **{BROKER_LABEL.get(b, b)} could not be run:** "
                f"`{info['error'].splitlines()[0][:300]}`"
            )
        else:
            # sorted: the rows come from several runs, merged in no fixed order
            builds = sorted({_build(r) for r in s["rows"] if r["broker"] == b})
            out.append(
                f"* {BROKER_LABEL.get(b, b)}: {', '.join(builds) or info.get('version')}"
                + (f" ({info['notes']})" if info.get("notes") else "")
            )
    ran = set(s.get("brokers") or {})
    for b in BROKER_ORDER:
        if b not in ran:
            out.append(f"* {BROKER_LABEL[b]}: not in this run")
    out += ["", "Each row's last column names the build it ran on.", ""]
    rows = s["rows"]
    for w in STANDARD:
        wl = WORKLOADS[w]
        out += [f"### {w}: {wl.title}", ""]
        if w in (s.get("reruns") or {}):
            out += [
                f"Measured again after the matrix, every broker in one run: "
                f"`{s['reruns'][w]}` (`bench/recorded/{s['reruns'][w]}.json`, "
                f"`{(s.get('rerun_commands') or {}).get(w)}`; the matrix's own rows for {w} are in "
                f"`bench/recorded/{s['run_id']}.json`).",
                "",
            ]
            note = RERUN_NOTES.get(s["reruns"][w])
            if note:
                out += [note, ""]
        out += [
            "| broker | phase | msg/s | p50 ms | p99 ms | p999 ms | broker CPU µs/msg | "
            "RSS MiB (end) | missing / dup | order viol. (consumer / cross) | groups on >1 "
            "consumer | other cores | Shoal/peer msg/s, CPU | build |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for ph in wl.phases:
            for b in BROKER_ORDER:
                r = _find(rows, b, w, ph)
                if r is None:
                    if b in (s.get("brokers") or {}) or b == "shoal":
                        out.append(
                            f"| {BROKER_LABEL[b]} | {ph} | {NYM} |  |  |  |  |  |  |  |  |  |  |  |"
                        )
                    continue
                ratio = ""
                if b != "shoal":
                    sh = _find(rows, "shoal", w, ph)
                    t = _ratio(sh, r, "throughput")
                    c = _ratio(sh, r, "cpu_us")
                    ratio = f"{t:.2f}×, {c:.2f}×" if t and c else "–"
                    if b == "nullsink":  # Shoal's share of the client's ceiling
                        near = t is not None and t >= 1 - CEILING_MARGIN
                        ratio = f"{t:.2f}× ({'' if near else 'not '}within 10%)" if t else "–"
                stall = f" ({r['stalled']} stalled)" if r.get("stalled") else ""
                out.append(
                    f"| {BROKER_LABEL[b]}{stall} | {ph} | {_mm(r['throughput'])} | {_med(r['p50'], _ms)} | "
                    f"{_med(r['p99'], _ms)} | {_med(r['p999'], _ms)} | {_mm(r['cpu_us'])} | "
                    f"{_med(r['rss_mib'])} | {_allv(r['missing'])} / {_allv(r['duplicates'])} | "
                    f"{_allv(r['viol_consumer'])} / {_allv(r['viol_cross'])} | {_allv(r['moved'])} | "
                    f"{_med(r['other'])} | {ratio} | {_build(r)} |"
                )
        if w == "W8":
            for b in BROKER_ORDER:
                r = _find(rows, b, w, "main")
                if r and r.get("rss_per_group_end"):
                    out.append(
                        f"\n{BROKER_LABEL[b]}: RSS per group "
                        f"{_mm(r['rss_per_group_end'])} B at the end, "
                        f"{_mm(r['rss_per_group_peak'])} B at the peak."
                    )
                    if b == "shoal" and not fresh_broker_each_rep(r):
                        out.append("\n" + _w8_old_method(r))
        errs = [
            e
            for b in BROKER_ORDER
            for ph in wl.phases
            for e in ((_find(rows, b, w, ph) or {}).get("errors") or [])
        ]
        if errs:
            out += ["", "Errors: " + "; ".join(f"`{e[:200]}`" for e in sorted(set(errs)))]
        out.append("")
    out += ["### Targets", "", "| workload | target | value | status |", "|---|---|---|---|"]
    for t in evaluate_targets(s):
        out.append(f"| {t['workload']} | {t['target']} | {t['value']} | {t['status']} |")
    out += ["", "A missed target is an open problem, not a reason to change the workload.", ""]
    if s.get("failures"):
        out += ["### Failures", ""]
        for f in s["failures"]:
            out.append(
                f"* {f.get('broker')} {f.get('workload')} {f.get('phase', '')} "
                f"rep {f.get('rep', '-')}: `{str(f.get('error'))[:300]}`"
            )
        out.append("")
    for p in plots:
        out.append(f"![{p}]({p})")
    return "\n".join(out) + "\n"


def _validation_section(v: dict | None, plots: list[str]) -> str:
    out = ["## Harness validation: ActiveMQ against the reference figures", ""]
    if v is None:
        out.append(f"{NYM}. Run `python -m bench.run --validate`.")
        return "\n".join(out) + "\n"
    out += [
        f"Run `{v['run_id']}` (`bench/validation/{v['run_id']}.json`), "
        f"{v.get('started')} to {v.get('finished')} (UTC), "
        f"`{v.get('command')}`. Machine: {_machine_line(v)}. Other load during the "
        f"measured runs: {_other_line(v['rows'])}. Reference: "
        "`/work/shared/reference/activemq-over-stomp.md` (same machine class, idle, "
        "other load 0.00–0.01 cores).",
        "",
    ]
    out += [
        "| row | reference msg/s | measured msg/s | ref p50 / p99 ms | measured p50 / p99 ms "
        "| ref CPU µs/msg | measured CPU µs/msg | missing | order viol. (consumer / cross) "
        "| groups on >1 consumer | other cores | client µs/msg |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for w in VALIDATION + [k for k in WORKLOADS if k not in VALIDATION]:
        wl = WORKLOADS[w]
        for ph in wl.phases:
            r = _find(v["rows"], "activemq", w, ph)
            if r is None:
                continue
            ref = wl.reference if (wl.reference.get("phase", "main") == ph) else {}
            rt = (
                NYM
                if not ref
                else (
                    f"{ref['throughput']:,}"
                    + (
                        f" ({ref['throughput_min']:,}–{ref['throughput_max']:,})"
                        if "throughput_min" in ref
                        else ""
                    )
                )
            )
            rl = f"{ref['p50']} / {ref['p99']}" if ref.get("p50") is not None else "–"
            rc = str(ref.get("cpu_us", "–")) if ref else "–"
            label = f"{w} {ph}" if ph != "main" else w
            cross = _allv(r["viol_cross"])
            if ref.get("cross_violations"):
                cross += f" (ref {ref['cross_violations']})"
            moved = _allv(r["moved"])
            if ref.get("groups_moved"):
                moved += f" (ref {ref['groups_moved']})"
            out.append(
                f"| {label}: {wl.title} | {rt} | {_mm(r['throughput'])} | {rl} | "
                f"{_med(r['p50'], _ms)} / {_med(r['p99'], _ms)} | {rc} | {_mm(r['cpu_us'])} | "
                f"{_allv(r['missing'])} | {_allv(r['viol_consumer'])} / {cross} | {moved} | "
                f"{_mm(r['other'])} | {_med(r['client_us'])} |"
            )
    out.append("")
    notes = v.get("notes")
    if notes:
        out += [notes, ""]
    for p in plots:
        out.append(f"![{p}]({p})")
    return "\n".join(out) + "\n"


def _singles_section(singles: list[dict]) -> str:
    rows = []
    for s in singles:
        for r in s["rows"]:
            rows.append(
                f"| `{s['run_id']}` | {BROKER_LABEL.get(r['broker'], r['broker'])} | "
                f"{r['workload']} {r['phase']} | {r['reps']} | {_mm(r['throughput'])} | "
                f"{_med(r['p99'], _ms)} | {_mm(r['cpu_us'])} | {_allv(r['missing'])} | "
                f"{_allv(r['viol_consumer'])} / {_allv(r['viol_cross'])} | "
                f"{_med(r['other'])} | {_build(r)} |"
            )
    if not rows:
        return ""
    return "\n".join(
        [
            "## Other recent runs (single cells; not the matrix)",
            "",
            "Each run is `bench/recorded/<run>.json`; its command is in the file and here: "
            + "; ".join(f"`{s['run_id']}`: `{s.get('command')}`" for s in singles)
            + ".",
            "",
            "| run | broker | workload | reps | msg/s | p99 ms | CPU µs/msg | missing "
            "| order viol. | other cores | build |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
            *rows,
            "",
        ]
    )


PROFILE = """\
## Profiles and what they showed

What profiling found on this machine and what it changed. The profiles were not
recorded as runs, so this section gives their commands and findings, not their
figures; every figure here is taken from a file in `bench/recorded/`, named with
the command that made it.

* **W1 hot path.** callgrind over the in-process path (`tests/broker/bench_core.py`:
  codec and core, no sockets) and `tests/protocol/bench_codec.py` (SEND decoding,
  MESSAGE encoding) pointed to the fixes in the codec and the core's send, dispatch
  and ack.
* **STOMP ACK frames (2026-11-27).** callgrind over the whole broker during W1
  (`valgrind --tool=callgrind --instr-atstart=no`, counting switched on for the
  measured run with `callgrind_control`; the same procedure is now
  `bench/instructions.py`) showed the decoder's work per ACK frame several times
  the core's ack itself: a consumer's acks are half the frames the broker reads.
  A run of plain ACKs is now read by one match (`StompConnection.take_acks`) and
  header lines and MESSAGE headers cost fewer calls; "Instructions per message"
  above has the counts before and after.
* **W1 is one core of Python.** `py-spy record -r 200 -f raw` on `shoal serve`
  during W1 shows a flat profile: the STOMP decoder, MESSAGE encoding,
  `Broker.send` + dispatch + ack, and session and flush bookkeeping, none
  dominant. In the matrix above (`bench/recorded/20261124T201632Z-matrix.json`,
  `python -m bench.run --all --broker shoal --broker activemq --reps 3`) Shoal's W1
  ran at 76,344 msg/s with 13 µs of broker CPU per message: about one core, which is
  what one Python process gets.
* **RECEIPT per persistent SEND (W6)**, `py-spy record --threads -p PID` and
  `strace -f -c -p PID` on `shoal serve` while one producer sends with receipts:
  most `futex` calls and system CPU per message came from the `run_in_executor`
  hand-off (Future, `call_soon_threadsafe`, GIL ping-pong between the loop and the
  fsync thread). The fsync thread is now poked through a pipe and answers through
  another. Every consumer ACK also started its own fsync, so a receipted SEND often
  waited behind an ACK's sync: syncs now start at once only for a waiter (receipt,
  held delivery, shutdown), otherwise within 10 ms. Producers that send together
  share one sync (it starts after the loop has read every ready socket).
* **GIL switch interval (kept, for waited-for syncs only).** Woken to start a sync,
  and again after its fdatasync, the sync thread needs the GIL, and a busy loop
  thread holds the GIL for up to the switch interval (CPython's default: 5 ms).
  While a sync that someone waits for (a RECEIPT, a held delivery) runs, the broker
  sets `sys.setswitchinterval(0.00005)` (it was 0.0005 until the W6 breakdown below),
  and restores the default when nobody waits (`WAITED_SWITCH_INTERVAL` in
  `src/shoal/server/persistence.py`): with the short interval for every sync,
  pipelined persistent sends (W2's shape) slowed down, because the sync thread's
  index updates then ping-pong with the loop thread.
* **Where one receipted persistent SEND's time goes (W6, 1 producer).** The broker
  was instrumented with timestamps (a temporary `sitecustomize`, not kept) during
  `python -m bench.loadgen --broker shoal --messages 10000 --receipts --persistent
  --producers 1 --warmup 5000`, on the stdlib event loop, with the machine quiet
  (other load 0.01-0.03 cores). Medians per SEND: parse, core and journal encoding
  up to the receipt's wait 24 µs; to the sync thread's kick 3.5 µs; kick to the
  thread's `pwrite` 88 µs with a 0.5 ms switch interval, 36 µs with 50 µs (the thread
  wakes, then waits for the GIL while the loop delivers the message and reads
  ACKs); `pwrite` 5-6 µs; fdatasync 75-88 µs (a bare `pwrite` + `fdatasync` loop on
  this disk: 95-101 µs median, 2,000 rounds); the journal's index update 7-8 µs;
  the loop waking on the done pipe 20 µs; RECEIPT written 19-45 µs later; the
  client's next SEND 35-50 µs after that. Throughput in those two runs: 3,477 and
  3,871 msg/s. Changed after it: the shorter switch interval, and a sync someone
  waits for is reported as soon as its fdatasync returns, before the journal updates
  its index (`Store.sync(durable)`), so receipts go out meanwhile (lazy syncs keep
  the old order: reported early too, W2 ran at 0.94x of the same build without it,
  `python -m bench.builds --workload W2 --reps 4 --messages 60000`). Moving the
  `pwrite` to the loop thread would save only its 5 µs: the cost is the thread's
  wake-up and the GIL, not the write. After the change, now on uvloop (main's
  default since), the same instrumented runs under 1.2-1.4 cores of other load
  showed no shorter kick-to-`pwrite` with 50 µs than with 0.5 ms (40-73 µs either
  way).
* **Syncs through io_uring (kept).** `perf trace -p PID` on `shoal serve` during
  `python -m bench.loadgen --broker shoal --messages 30000 --receipts --persistent
  --producers 1` showed a thread round's kick-to-`pwrite` at ~260 µs (the sync
  thread woke, then waited on the GIL's futex while the loop went on delivering)
  against a 150-170 µs `fdatasync`. The loop now submits a round the journal plans
  as one write (`Store.plan_sync`) to io_uring as a WRITE with `RWF_DSYNC` and hears
  of it through an eventfd (`src/shoal/server/uring.py`, docs/journal.md): no Python
  thread between a receipted SEND and its sync. The first version still sent every
  other W6 round to the thread (each ack emptied the only segment, and a round
  that may have a segment to compact went to the thread):
  `bench/recorded/builds-20261125T151558Z.json` measured it at 0.98x (1p), 1.05x
  (8p), 1.04x (32p) of main's throughput. Fixed (nothing to compact while there is
  one segment), `python -m bench.builds --base main --workload W6 --workload W2
  --reps 5` (`bench/recorded/builds-20261125T152028Z.json`, both builds pure
  Python, alternating): W6 1p 1.41x main's throughput at 0.79x its broker CPU per
  message, 8p 1.18x at 0.87x, 32p 1.12x at 0.81x, 8p-nodisk (no fsync) 1.02x at
  0.96x, W2 0.97x at 1.02x. An earlier experiment, one `pwritev(RWF_DSYNC)` on
  the sync thread instead of `pwrite` + `fdatasync` (one GIL hand-off less),
  measured no difference beyond noise in two such runs and was not kept.
* **The W6 run of 2026-11-25** (`20261125T122748Z-single` in the W6 table above)
  was measured while other work used 1.1-1.8 cores during Shoal's first two reps
  and at most 0.6 during ActiveMQ's (the other-cores column; `--idle-wait 30`
  then measured anyway): its medians compare loads, not brokers. Shoal's third
  rep, with 0.8, 0.1, 0 and 0 other cores: 1p 2,620, 8p 7,622, 32p 10,302,
  8p-nodisk 18,907 msg/s; ActiveMQ's three reps: 1p 2,603-3,330, 8p 5,115-7,325,
  32p 5,229-6,176. Side by side with main in `bench.builds` (the two builds
  alternating, so under the same load; table "Two builds side by side"), W6 1p
  came out at 0.95x and 1.04x, 8p 1.26x, 32p 1.11x: at one producer, no change
  this machine could tell from its noise.
* **fdatasync itself**: `python tests/store/fsync_modes.py fallocate zeros sparse`
  compares the ways of growing a segment: writing into `posix_fallocate`'s
  unwritten extents makes every fdatasync commit metadata, and was the slowest. The
  journal now writes zeros 1 MiB ahead of its data.
* **W6 with the sync on the event loop thread** (an experiment, `SHOAL_INLINE_SYNC`,
  not kept): faster, since the hand-off to the thread costs CPU per sync, but a disk
  that hangs (the `fsfreeze` test) would then stall every connection and the
  management API, not only the producers waiting for it.
* **Rounds a W6 producer waited behind (2026-11-27).** With one receipted
  producer, a consumer ACK's record could arrive in the loop iteration whose ring
  completion answered the running round's receipt: the ACK asked for a round while
  someone still waited, the completion answered that waiter, then a round for the
  ACK alone started, and the producer's next SEND waited behind it. A round now
  starts only while someone still waits; the record goes with the next waited
  round or the 10 ms lazy one (`tests/server/test_persistence.py` shows the
  case). `python -m bench.builds --base eb6a6ae --head fb20aab --compile --workload
  W6 --reps 3` (`bench/recorded/builds-20261127T130744Z.json`): 1p 0.84x the
  base's msg/s (reps 0.89x, 0.84x, 1.10x), 8p 1.05x at 0.91x the CPU per message,
  32p 0.98x, 8p-nodisk 1.03x: no difference this machine can tell from its noise.
* **What W6's 3x target needs.** The `8p-nodisk` phase of W6 (the same 8 receipted
  producers, non-persistent: no fsync at all) measures the most Shoal and this
  client together carry on this machine; it is not the client alone (that is the
  null sink's row, `--broker nullsink`, not yet in a recorded run). A persistent 8p
  figure cannot exceed it. In
  the W6 run above (`bench/recorded/20261124T205357Z-single.json`, `python -m
  bench.run --broker shoal --broker activemq --workload W6 --reps 3`) it was 21,260
  msg/s, with the client at 61 µs of CPU per receipted message on the same 2 cores,
  while 3x ActiveMQ's persistent 8p would be 23,654: the target is above what can
  be measured here, even with a free fsync.
* **ActiveMQ's warm-up.** A single pass of 100k messages left the JVM still
  compiling (its JIT threads share the 2 cores with the load), so ActiveMQ measured
  slower than warm. The runner now warms up until two passes agree within 10%
  (`bench/run.py`). The validation run on this page was made before that rule,
  with one pass.
* **Recovery** (`cProfile` over `JournalStore.open()` + `Broker.restore` on 1M
  journaled 256 B messages): restore went through `accept` (which builds a
  `MessageStored` per message only to drop it) with the cyclic GC running over the
  growing heap; a lean `Queue.restore`, paging as messages come back, and the GC
  paused took most of it away. What is left is mostly `open()`'s per-record decode
  (text block split, headers dict, record object, body copy). The recovery times
  are in the Recovery section above.
* **GC pauses** (gc.callbacks in the broker during W7's loaded phase): full
  collections ran while the 100k backlog was being queued, long enough to be W7's
  p99 outliers when one lands in the measured window. After recovery the restored
  entries are frozen (`gc.freeze`) so no full collection walks them again.
* **Young-generation GC.** Every message allocates a handful of tracked objects
  that die within a few thousand messages; with CPython's gen-0 threshold of 700
  the collector walked them again and again. `shoal serve` sets it to 10,000
  (`GC_GEN0_THRESHOLD`, `src/shoal/server/app.py`), which lowered the broker CPU
  per message of pipelined persistent sends in ad hoc `python -m bench.loadgen
  --messages 200000 --persistent` runs (not recorded).
* **AMQP 1.0 (AW1).** cProfile over `shoal serve` during AW1 (the broker under
  `cProfile.Profile`, driven by `bench/amqp_w1.py`'s clients, 20,000 messages), then
  an in-process loop of `AmqpConnection` against a Proton client engine timing only
  the server's calls: most of the broker CPU per message was Proton's Python
  binding, not the engine: a `Delivery`/`Link` wrapper (with its attachment record)
  per transfer and per disposition, `Message.encode` retrying from a 16-byte buffer
  (six encodes per 300-byte message), a `Data` wrapper per message section, a
  frozen-dataclass event per transfer and outcome. Transfers, dispositions and
  credit now go through the C API (`cproton`), messages are received into,
  decoded from, encoded into and sent from one reused buffer
  (`src/shoal/protocol/amqp/message_io.py`, byte-identical to Proton's), the
  `proton.Message` objects are recycled (`pn_message_clear`, not a new
  `pn_message_t`), and the per-message events are plain slotted dataclasses. In
  the in-process loop (an ad hoc script, not recorded) about 8 of the 13 us the
  server's AMQP side then spent per message went to `headers_of`/`message_of` and
  the two `proton.Message` decodes/encodes (each property read or written is a
  call into Proton); the broker core and session come on top, as over STOMP. The
  before/after figures are in the section "AW1 before and after a change" above.
* **AMQP 1.0 (AW1), around the C API.** `py-spy record -r 250 -d 8 -f raw
  --nonblocking -p PID` (and `--native`) on `shoal serve` during `python -m
  bench.amqp_w1 --broker shoal-amqp --messages 250000`: cproton's Python wrappers
  (`py2bytes`, `bytes2py`, `pn_delivery`, `pn_data_put_binary`/`get_binary`) and
  `proton.Transport`'s `push`/`pending`/`peek`/`pop` were a Python call or two per
  transfer each; the hot path now calls cffi's `lib` functions itself (the output
  peeked into one reused buffer). `proton.Message` objects were still created and
  freed: a producer's read is decoded whole before the owner hands back its first
  message, and a producer link may have 1000 transfers in flight
  (`PRODUCER_CREDIT`), more than the pool's 512, so the pool keeps 1024. A message
  from `blank()` is encoded without clearing its (empty) sections again. mypyc
  compiles `protocol/amqp/connection.py`, `message_io.py` and
  `server/amqp_mapping.py`, which buys little: with `--native`, about a third of
  the broker's busy samples were in Proton's C engine and a fifth in cffi's own
  call overhead (argument conversion, a cdata per returned pointer or struct, the
  GIL released around each call; several dozen calls per message), and most of the
  rest in the session (`server/amqp.py`) and the broker core. In-process timing (no figures recorded):
  `tests/protocol/bench_amqp.py`; AW1 figures: docs/amqp.md.
* **Spark sink.** A staged handle enters its log queue in one core call
  (`Broker.send_many` → `LogQueue.offer_many`, records built from the fields, no
  Message per row), staged Arrow rows are decoded column-wise, and the GC is paused
  around stage and publish. With these, `bench/recorded/spark-20261124.json`
  (`python -m shoal.spark.bench --out bench/recorded/spark-20261124.json`, now
  `python -m bench.spark`) has 14.9 s of broker CPU for the matching step, of which
  the sink's share (matching minus matching-noop) is 10.0 s, and 9.0 s for
  Parquet → matching → sink. What is left of the sink's broker CPU is mostly the
  journal (batch encoding, the index's `Replay.stored`) and the GC walking the
  resident log backlog.
* **Recovery with a memory budget.** The journal recovers without reading message
  bodies when the broker has a memory budget (`lazy_bodies`, docs/journal.md), and
  restore reads back only what fits. `tests/e2e/test_paging.py` restarts a broker
  holding a paged backlog and asserts that its peak RSS above a fresh broker stays
  under a third of the backlog (with every body read back it does not). The
  recorded figures are in the Recovery section above
  (`bench/recorded/recovery-20261124T2.json`).
"""


FOOTER = """\
## Limits of these numbers

* The machine has 2 cores shared by the broker, the benchmark client (producer and
  consumer processes; their CPU per message is recorded with every run as
  `client_us`) and anything else running. At full speed every broker is CPU-bound together with the client, so
  throughput ratios are more telling than absolute figures; broker CPU µs/msg is the
  steadiest figure to compare. Check the `other cores` column before trusting a row.
* At full speed latency is queueing (4 consumers × 1000 prefetched messages plus the
  broker's backlog); W5 and W6 show latency without that.
* ActiveMQ does not echo `JMSXGroupID` on STOMP frames (AMQ-7395), so the checks use
  `bench-group`. RabbitMQ has no message groups: its order violations and "groups on
  >1 consumer" are what users get without groups, not a defect of the harness.
* W8 with ActiveMQ: its default group map keeps 1024 groups per queue (LRU), so 1M
  groups are never live at once, and its RSS is the JVM heap (1 GiB, touched as used);
  the RSS-per-group figure is therefore not comparable for ActiveMQ.
"""


def _peers(matrix: dict | None) -> str:
    """The brokers the shown matrix ran beside Shoal, for the page's title."""
    ran = set((matrix or {}).get("brokers") or {})
    peers = [BROKER_LABEL[b] for b in BROKER_ORDER if b not in ("shoal", "nullsink") and b in ran]
    return " and ".join(peers) or "its peers (no matrix run recorded)"


def write_docs() -> Path:
    DOCS.mkdir(exist_ok=True)
    matrix = latest_matrix()
    validation = latest_validation()
    plots_m: list[str] = []
    plots_v: list[str] = []
    if matrix:
        plots_m = write_plots(matrix, f"run {matrix['run_id']}")
    elif validation:
        plots_v = write_plots(validation, f"ActiveMQ only, validation run {validation['run_id']}")
    text = HEADER.format(nym=NYM, workload_rows=_workload_rows(), peers=_peers(matrix))
    text += "\n" + _matrix_section(matrix, plots_m)
    text += "\n" + _matrix_before_after_section()
    text += "\n" + _validation_section(validation, plots_v)
    shown_singles = single_runs()[-12:]
    singles = _singles_section(shown_singles)
    if singles:
        text += "\n" + singles
    text += "\n" + _recovery_section()
    text += "\n" + _spark_section()
    text += "\n" + _consumers_section()
    text += "\n" + _cluster_section()
    text += "\n" + _cluster_faults_section()
    text += "\n" + _amqp_section()
    text += "\n" + _amqp_builds_section()
    text += "\n" + _builds_section()
    text += "\n" + _instructions_section()
    text += "\n" + _journal_codec_section()
    text += "\n" + _journal_path_section()
    text += "\n" + _native_section()
    text += "\n" + _loop_section()
    text += "\n" + PROFILE
    text += "\n" + FOOTER
    if matrix:
        record(
            {
                k: v
                for k, v in matrix.items()
                if k not in ("reruns", "rerun_commands", "matrix_rows")
            }
            | {"rows": matrix["matrix_rows"]}
        )
    for summary in shown_singles:
        record(summary)
    DOC.write_text(text)
    return DOC


if __name__ == "__main__":
    print(write_docs())
