"""docs/benchmarks.md, docs/benchmark-history.md and docs/bench-*.png, rendered from
bench/results/ and bench/recorded/.

bench/results/ holds the raw runs (gitignored). Every run a page shows is also
summarized into bench/recorded/ (kept in git), so a clean checkout renders the same
pages. A record's `note` field holds what its numbers do not say (the build, the
machine that hour, what not to conclude); this module only renders.

Only measured numbers are written. A cell with no measurement says "not yet measured".
Ratios Shoal/peer are computed only from results of the same run.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable
from pathlib import Path

from bench.workloads import STANDARD, VALIDATION, WORKLOADS

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"
VALIDATION_DIR = REPO / "bench" / "validation"
RECORDED = REPO / "bench" / "recorded"
DOCS = REPO / "docs"
DOC = DOCS / "benchmarks.md"
HISTORY = DOCS / "benchmark-history.md"
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
        if d and d.get("results"):  # a recorded summary's note stays with its run
            found[d["run_id"]] = {**found.get(d["run_id"], {}), **summarize_run(d)}
    return [found[k] for k in sorted(found)]


def record(summary: dict) -> None:
    """Keep a shown run's summary in git (bench/recorded/)."""
    RECORDED.mkdir(exist_ok=True)
    path = RECORDED / f"{summary['run_id']}.json"
    path.write_text(json.dumps(summary, indent=1, default=str, ensure_ascii=False) + "\n")


def latest_matrix() -> dict | None:
    runs = _summaries("matrix")
    return with_reruns(runs[-1], _summaries("single")) if runs else None


def with_reruns(matrix: dict, singles: list[dict]) -> dict:
    """The matrix with every workload that a later run measured again, for Shoal and
    ActiveMQ in that one run, taken from the latest such run (``reruns`` names it)."""
    rows = list(matrix["rows"])
    reruns: dict[str, str] = {}
    commands: dict[str, str | None] = {}
    notes: dict[str, str | None] = {}
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
                notes[w] = single.get("note")
    return {
        **matrix,
        "rows": rows,
        "reruns": reruns,
        "rerun_commands": commands,
        "rerun_notes": notes,
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
    runs = _runs("spark-*.json", "orders")
    return (runs[-1][0].name, runs[-1][1]) if runs else None


def _runs(pattern: str, key: str) -> list[tuple[Path, dict]]:
    """The recorded runs named ``pattern``, oldest first, that hold ``key``."""
    loaded = ((p, _load_json(p)) for p in sorted(RECORDED.glob(pattern)))
    return [(p, d) for p, d in loaded if d and d.get(key)]


def _first_paragraph(note: str | None) -> str:
    return (note or "").split("\n\n")[0]


def _notes(runs: list[tuple[str, dict]]) -> list[str]:
    """Each run's `note`, under its file name (a blank line first when there is one)."""
    out = [f"- `{name}`: {d['note']}" for name, d in runs if d.get("note")]
    return ["", *out] if out else []


def _table(columns: list[str], rows: list[str]) -> list[str]:
    return ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns), *rows]


# --- the latest run of each other benchmark (docs/benchmarks.md) -----------------------


def _recovery_rows(data: dict) -> list[str]:
    by_broker: dict[str, list[dict]] = {}
    for r in data["results"]:
        label = BROKER_LABEL.get(r["broker"], r["broker"])
        if r.get("budget_bytes", -1) >= 0:
            label += f" (global-max-size {r['budget_bytes'] / 2**20:g} MiB)"
        by_broker.setdefault(label, []).append(r)
    rows = []
    for label, rs in by_broker.items():

        def spread(key: str, rs: list[dict] = rs) -> str:
            vals = sorted(r[key] for r in rs if key in r)
            if not vals:
                return "–"
            med = statistics.median(vals)
            return f"{med:g}" if len(vals) == 1 else f"{med:g} ({vals[0]:g}–{vals[-1]:g})"

        depths = sorted({r["depth_after"] for r in rs if "depth_after" in r})
        rows.append(
            f"| {label} | {rs[0]['messages']:,} | {len(rs)} | {spread('fill_s')} "
            f"| {spread('recovery_s')} | {spread('cpu_s')} | {spread('rss_mib')} "
            f"| {spread('peak_rss_mib')} | {', '.join(map(str, depths)) or '–'} |"
        )
    return rows


def _recovery_section() -> str:
    runs = _runs("recovery-*.json", "results")
    head = ["## Recovery after kill -9 (1M persistent messages)", ""]
    if not runs:
        return "\n".join([*head, f"{NYM}.", ""])
    path, data = runs[-1]
    columns = [
        "broker",
        "messages",
        "reps",
        "fill s (pipelined, persistent)",
        "recovery s",
        "broker CPU s",
        "RSS MiB after",
        "peak RSS MiB",
        "depth after",
    ]
    return "\n".join(
        [
            *head,
            f"`bench/recorded/{path.name}`, {data.get('date', '')}: `{data.get('command')}`. "
            "Goal: 1M messages in at most 10 s. Time from the start command to the first "
            "STOMP CONNECTED after SIGKILL of a broker holding the messages; Shoal's "
            "recovered queue depth is read back from its API. Medians, min–max in brackets.",
            "",
            *_table(columns, _recovery_rows(data)),
            "",
        ]
    )


SPARK_INTRO = (
    "Targets: broker → matching → broker sink exactly once ≥ 45k rows/s; the source alone "
    "≥ 100k rows/s; compared with the same jobs reading Parquet; small-batch latency (the "
    "study's floor: about 1.2 s)."
)


def _spark_run(name: str, data: dict) -> list[str]:
    from bench.spark import markdown  # the table lives with the Spark bench

    return [
        f"`bench/recorded/{name}`, {data.get('date', '')}: "
        f"`{data.get('command', 'python -m bench.spark')}`",
        "",
        markdown(data),
        "",
    ]


def _spark_section() -> str:
    head = ["## Spark pipeline (PySpark 4.x, local mode and a standalone cluster)", ""]
    latest = latest_spark()
    if latest is None:
        return "\n".join([*head, f"Spark figures: {NYM}.", ""])
    return "\n".join([*head, SPARK_INTRO, "", *_spark_run(*latest)])


def _consumers_section() -> str:
    head = ["## Many consumers on one queue", ""]
    docs = [d for _p, d in _runs("consumers-*.json", "results")]
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
            *(line for d in docs if d.get("note") for line in ("", d["note"])),
            "",
        ]
    )


def _cluster_section() -> str:
    head = ["## Cluster (docs/cluster.md)", ""]
    runs = [d for _p, d in _runs("cluster-*.json", "cw1")]
    if not runs:
        return "\n".join([*head, f"{NYM}.", ""])
    from bench.cluster import forwarding_note, markdown

    d = max(runs, key=lambda r: (r["date"], r.get("time", "")))
    return "\n".join(
        [
            *head,
            f"`{d['command']}` ({d['date']} {d.get('time', '')}; bench/cluster.py): "
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
    )


def _cluster_faults_section() -> str:
    head = ["## Cluster faults: kill -9 and a network partition (docs/cluster.md)", ""]
    runs = _runs("faults-*.json", "faults")
    if not runs:
        return "\n".join([*head, f"{NYM}.", ""])
    from bench.cluster_faults import markdown

    d = runs[-1][1]
    return "\n".join(
        [
            *head,
            f"`{d['command']}` ({d['date']}; bench/cluster_faults.py): ZooKeeper and three "
            "nodes, a producer (persistent, one receipt at a time) and an auto-ack consumer on "
            "every node, nine groups, three held by each node. The partition run puts "
            "ZooKeeper and each node in a network namespace of its own (as root) and sets "
            "n3's bridge port down until ZooKeeper has expired n3's ZooKeeper session, plus "
            "2 s; the third column does the same with `rebind-after = 500`, healing once n3's "
            "groups are served by their new holders. Recovery includes the links' reconnect "
            "back-off (up to 2 s) and, after a partition, the cut-off node's binding re-check.",
            "",
            markdown(d),
            "",
        ]
    )


AW1_INTRO = (
    "`bench/amqp_w1.py`: W1's shape (256-byte non-persistent messages, 100 groups, 4 "
    "consumers accepting each message, credit/prefetch 1000, one producer sending "
    "pre-settled transfers). Shoal and RabbitMQ over AMQP 1.0 with the same Qpid Proton "
    "reactor clients (Python, one process each); Shoal over STOMP with the load generator "
    "after a warm-up, and held to the msg/s of the same rep's AMQP run, which compares the "
    "protocols at the same load. A fresh broker per run; broker CPU counts from the first "
    "send until the consumers together have every message. RabbitMQ "
    "(`rabbitmq_amqp1_0`) has no groups: a throughput reference only. Goal: broker CPU per "
    "AMQP message at most 1.5x the STOMP figure. The AMQP msg/s are bounded by the Python "
    "Proton clients (5 processes on the same 2 cores) as much as by the brokers; broker CPU "
    "per message is the figure to compare."
)


def _aw1_run(name: str, d: dict) -> list[str]:
    from bench.amqp_w1 import markdown

    load = d.get("loadavg_1m_at_starts") or []
    lines = [
        f"`bench/recorded/{name}`, {d.get('date', '')}: `{d['command']}`, {d['reps']} reps"
        + (f"; 1-minute load average {min(load):.1f}-{max(load):.1f}." if load else "."),
        "",
        markdown(d),
        "",
    ]
    ratio = d.get("amqp_over_stomp_cpu")
    if ratio is not None:
        met = "met" if ratio <= 1.5 else "**not met**"
        lines += [f"Broker CPU per AMQP message: {ratio:.1f}x the STOMP figure (goal {met}).", ""]
    paced = d.get("amqp_over_paced_stomp_cpu")
    if paced is not None:
        lines += [f"Against STOMP held to the AMQP run's msg/s (the same load): {paced:.2f}x.", ""]
    return lines


def _amqp_section() -> str:
    head = ["## AW1: W1 over AMQP 1.0 (docs/amqp.md)", ""]
    runs = _runs("amqp-w1-*.json", "summary")
    if not runs:
        return "\n".join([*head, f"{NYM}.", ""])
    path, d = runs[-1]
    return "\n".join([*head, AW1_INTRO, "", *_aw1_run(path.name, d)])


# --- docs/benchmarks.md: the short history -------------------------------------------------

# The goals Shoal aims at beyond each workload's target: Shoal against ActiveMQ in one
# matrix run, (msg/s ratio, CPU ratio).
GOALS: dict[tuple[str, str], tuple[float, float | None]] = {
    ("W1", "main"): (2.0, 0.35),
    ("W2", "main"): (2.5, None),
    ("W4", "main"): (2.0, None),
    ("W6", "1p"): (1.2, None),
    ("W6", "32p"): (2.0, None),
}


def _history_table() -> list[str]:
    """One row per matrix run: Shoal against ActiveMQ where the goals are set."""
    runs = _summaries("matrix")
    columns = ["run", "Shoal build"]
    for w, phase in GOALS:
        columns.append(
            f"{w}{'' if phase == 'main' else ' ' + phase} (goal {GOALS[w, phase][0]:g}×)"
        )
    columns.append("W8 B/group (goal ≤ 300)")
    rows = []
    for s in reversed(runs):
        cells = [
            f"`{s['run_id']}`",
            ", ".join(sorted({_build(r) for r in s["rows"] if r["broker"] == "shoal"})),
        ]
        for w, phase in GOALS:
            sh, aq = _find(s["rows"], "shoal", w, phase), _find(s["rows"], "activemq", w, phase)
            t, c = _ratio(sh, aq, "throughput"), _ratio(sh, aq, "cpu_us")
            cells.append("–" if t is None else f"{t:.2f}×" + (f" at {c:.2f}× CPU" if c else ""))
        w8 = _find(s["rows"], "shoal", "W8", "main")
        if w8 and w8.get("rss_per_group_end") and not fresh_broker_each_rep(w8):
            first = w8["rss_per_group_end"]["values"][
                0
            ]  # reps on one broker: only the first is fresh
            cells.append(f"{_num(first)} (first rep)")
        else:
            cells.append(_med((w8 or {}).get("rss_per_group_end")) if w8 else "–")
        rows.append("| " + " | ".join(cells) + " |")
    return _table(columns, rows)


def _history_section() -> str:
    return "\n".join(
        [
            "## History",
            "",
            "Every matrix run, newest first: Shoal's msg/s over ActiveMQ's in the same run "
            "(and broker CPU per message over ActiveMQ's for W1). Every other recorded run, "
            "with what each one changed and how to read it, is in "
            "[benchmark-history.md](benchmark-history.md).",
            "",
            *_history_table(),
            "",
        ]
    )


# --- docs/benchmark-history.md ---------------------------------------------------------------


def _matrix_history() -> list[str]:
    out = ["## Matrix runs", ""]
    for s in reversed(_summaries("matrix")):
        out += [f"- `{s['run_id']}` ({s.get('started')}): `{s.get('command')}`."]
        if s.get("note"):
            out += ["", "  " + s["note"].replace("\n\n", "\n\n  "), ""]
    return [*out, ""]


def _singles_history() -> list[str]:
    singles = single_runs()
    rows = [
        f"| `{s['run_id']}` | {BROKER_LABEL.get(r['broker'], r['broker'])} | "
        f"{r['workload']} {r['phase']} | {r['reps']} | {_mm(r['throughput'])} | "
        f"{_med(r['p99'], _ms)} | {_mm(r['cpu_us'])} | {_allv(r['missing'])} | "
        f"{_allv(r['viol_consumer'])} / {_allv(r['viol_cross'])} | "
        f"{_med(r['other'])} | {_build(r)} |"
        for s in reversed(singles)
        for r in s["rows"]
    ]
    columns = ["run", "broker", "workload", "reps", "msg/s", "p99 ms", "CPU µs/msg"]
    columns += ["missing", "order viol.", "other cores", "build"]
    return [
        "## Single runs (some workloads, some brokers)",
        "",
        "Newest first. Commands: "
        + "; ".join(f"`{s['run_id']}`: `{s.get('command')}`" for s in reversed(singles))
        + ".",
        "",
        *_table(columns, rows),
        *_notes([(f"{s['run_id']}.json", s) for s in reversed(singles)]),
        "",
    ]


def _side(d: dict, which: str) -> str:
    """One side of a two-build run: its revision, build and event loop where recorded."""
    env = d.get("env", {}).get(which, {})
    parts = [d.get("revs", {}).get(which, "?"), d.get("implementation", {}).get(which, "")]
    parts += [f"{k}={v}" for k, v in env.items()]
    return " ".join(p for p in parts if p)


def _builds_history() -> list[str]:
    runs = [
        (p.name, d)
        for pattern in ("builds-*.json", "native-*.json", "loop-*.json")
        for p, d in _runs(pattern, "workloads")
    ]
    runs.sort(key=lambda r: r[1].get("date", ""), reverse=True)
    rows = [
        f"| `{name}` ({d['reps']} reps) | {w} | {_side(d, 'base')} | {_side(d, 'head')} "
        f"| {row['base']['throughput_median']:,.0f} / {row['head']['throughput_median']:,.0f} "
        f"| {row['base']['cpu_us_median']:.1f} / {row['head']['cpu_us_median']:.1f} "
        f"| {row['throughput_ratio']:.2f}×, {row['cpu_ratio']:.2f}× |"
        for name, d in runs
        for w, row in d["workloads"].items()
    ]
    columns = ["run", "workload", "base", "head", "msg/s base / head"]
    columns += ["broker CPU µs/msg base / head", "head/base (msg/s, CPU/msg)"]
    return [
        "## Two builds side by side",
        "",
        "The same workload with the same client against two builds (or one build run two "
        "ways) in one run (`python -m bench.builds`: each build a git worktree of its "
        "revision, a fresh broker per rep, the order alternating from rep to rep); medians "
        "over the reps. Newest first; each file holds its command.",
        "",
        *_table(columns, rows),
        *_notes(runs),
        "",
    ]


def _instructions_history() -> list[str]:
    runs = [(p.name, d) for p, d in reversed(_runs("instructions-*.json", "rows"))]
    rows = [
        f"| `{name}` ({d['messages']:,} messages) | {w} | {d['builds']['base']['rev']} "
        f"{d['builds']['base']['implementation']} | {d['builds']['head']['rev']} "
        f"{d['builds']['head']['implementation']} | {row['base']['per_message_median']:,.0f} / "
        f"{row['head']['per_message_median']:,.0f} | {row['ratio']:.3f} |"
        for name, d in runs
        for w, row in d["rows"].items()
    ]
    columns = ["run", "workload", "base", "head", "instructions per message base / head"]
    return [
        "## Instructions per message, two builds",
        "",
        "`python -m bench.instructions --base REV --compile --workload W`: the broker's "
        "instructions per message received, counted by callgrind (counting only the measured "
        "run, after a 2,000-message warm-up; every thread of the broker), each build on a "
        "fresh broker per workload and rep. The count repeats to within about 1.5%, so it "
        "compares builds of the same code paths where CPU time on this shared machine cannot; "
        "it is not a speed (the broker runs ~50x slower under valgrind). Newest first.",
        "",
        *_table([*columns, "head/base"], rows),
        *_notes(runs),
        "",
    ]


def _profile_history() -> list[str]:
    runs = [(p.name, d) for p, d in reversed(_runs("profile-*.json", "rows"))]
    rows = [
        f"| `{name}` | {d['build']} | {w} | {row['per_message']:,.0f} "
        f"| {row['cffi_calls_per_message']:.1f} | {row['gil_and_lock_instructions_per_message']:,.0f} |"
        for name, d in runs
        for w, row in d["rows"].items()
    ]
    columns = ["run", "build", "workload", "instructions per message"]
    columns += ["calls into Proton through cffi", "instructions in the GIL and its locks"]
    return [
        "## Instructions by library",
        "",
        "`python -m bench.profile --workload AW1 --workload W1`: each workload under "
        "callgrind as `bench.instructions` runs it, the count split by the library that "
        "executed it (the split itself is in each file). Newest first.",
        "",
        *_table(columns, rows),
        *_notes(runs),
        "",
    ]


def _journal_history() -> list[str]:
    codec = [
        f"| `{p.name}` | {kind} | "
        + ", ".join(f"{name} {ns:,.0f}" for name, ns in row.items())
        + " |"
        for p, d in _runs("journal-codec-*.json", "ns_per_record")
        for kind, row in d["ns_per_record"].items()
    ]
    path = [
        f"| `{p.name}` | {which} {d['revs'][which]}, {d['implementation'][which]} "
        f"| {m['append']:.2f} | {m['plan_sync']:.2f} | {m['finish_sync']:.2f} | {m['total']:.2f} |"
        for p, d in _runs("journal-path-*.json", "us_per_message_median")
        for which, m in d["us_per_message_median"].items()
    ]
    return [
        "## The journal in process",
        "",
        "`python -m bench.journal_codec --base REV`: `encode_batch` of 64 persistent 256-byte "
        "messages and of 64 acks, each encoder's fastest round, ns per record.",
        "",
        *_table(["run", "record", "ns per record, each encoder"], codec),
        "",
        "`python -m bench.journal_path --base REV --compile`: the journal's work for each W2 "
        "message (append of the message and of an ack, `plan_sync`, `finish_sync`; the write "
        "itself not counted), thread CPU µs per message, medians over the reps.",
        "",
        *_table(["run", "build", "append", "plan_sync", "finish_sync", "total"], path),
        "",
    ]


def _every_run(
    title: str, intro: str, pattern: str, key: str, render: Callable[[str, dict], list[str]]
) -> list[str]:
    """A section with each recorded run of one benchmark in full, newest first, and its note."""
    out = [title, "", intro, ""]
    for p, d in reversed(_runs(pattern, key)):
        out += render(p.name, d)
        if d.get("note"):
            out += [d["note"], ""]
    return out


def _aw1_history() -> list[str]:
    return _every_run("## AW1 runs", AW1_INTRO, "amqp-w1-*.json", "summary", _aw1_run)


def _amqp_builds_history() -> list[str]:
    runs = [(p.name, d) for p, d in reversed(_runs("amqp-builds-*.json", "amqp"))]
    rows = []
    for name, d in runs:
        for which in ("base", "head"):
            row = d["amqp"].get(which)
            if row is not None:
                order = "yes" if row["out_of_order"] == 0 else f"no ({row['out_of_order']})"
                rows.append(
                    f"| `{name}` ({d['reps']} reps) | {which} {d['revs'][which]} "
                    f"| {row['msg_per_s_median']:,.0f} | {row['cpu_us_median']:.1f} "
                    f"| {row['ratio_to_stomp']:.1f}× | {order} |"
                )
        stomp = d["stomp"]
        rows.append(
            f"| `{name}` | head {d['revs']['head']}, STOMP | {stomp['msg_per_s_median']:,.0f} "
            f"| {stomp['cpu_us_median']:.1f} | 1× | |"
        )
    columns = ["run", "build", "msg/s", "broker CPU µs/msg", "AMQP / STOMP CPU", "in order"]
    return [
        "## AW1 before and after a change",
        "",
        "`python -m bench.amqp_compare --base REV`: AW1 on a fresh broker of each build per "
        "rep, the order alternating, then W1's shape over STOMP on the head build; medians. "
        "Goal: broker CPU per AMQP message at most 1.5x the STOMP figure. Newest first.",
        "",
        *_table(columns, rows),
        *_notes(runs),
        "",
    ]


def _spark_history() -> list[str]:
    return _every_run("## Spark runs", SPARK_INTRO, "spark-*.json", "orders", _spark_run)


def _recovery_history() -> list[str]:
    out = ["## Recovery runs", ""]
    for p, d in reversed(_runs("recovery-*.json", "results")):
        earlier = ", ".join(
            f"{BROKER_LABEL.get(r['broker'], r['broker'])} {r['recovery_s']} s"
            for r in d["results"]
        )
        out.append(f"- `{p.name}` ({d.get('date', '')}, `{d.get('command')}`): {earlier}.")
    return [*out, ""]


def _cluster_history() -> list[str]:
    out = ["## Cluster runs", ""]
    for p, r in _runs("cluster-*.json", "cluster"):  # CW1-lite, before the link batched
        c, s1 = r["cluster"], r["single"]
        out.append(
            f"- `{p.name}` (`{r['command']}`, {r['date']}; one raw-socket producer, two "
            "consumers), before the link wrote SENDs in runs with one RECEIPT per run: "
            f"{c['msg_per_s']:,.0f} msg/s at {c['broker_cpu_us_per_msg']:.1f} µs broker CPU/msg "
            f"summed over the nodes, against {s1['msg_per_s']:,.0f} msg/s at "
            f"{s1['broker_cpu_us_per_msg']:.1f} µs on one node."
        )
    return [*out, ""]


def _findings_history() -> list[str]:
    doc = _load_json(RECORDED / "profiling-findings.json") or {}
    out = ["## What profiling found", "", doc.get("note", NYM), ""]
    out += [f"- **{f['title']}.** {f['text']}" for f in doc.get("findings", [])]
    return [*out, ""]


HISTORY_HEADER = """\
# Benchmark history

<!-- Generated by `python -m bench.run --report` (bench/report.py) from bench/recorded/.
     Edit a record's `note` field, not this file. -->

Every recorded run, newest first within each kind (the latest matrix in full is on
[benchmarks.md](benchmarks.md)): what it measured, on which builds, and its note. The figures are in the files under
`bench/recorded/`, each with the command that made it. Compare figures within one run:
this shared 2-core machine's speed moves from hour to hour.
"""


def write_history() -> Path:
    sections: list[Callable[[], list[str]]] = [
        _matrix_history,
        _singles_history,
        _builds_history,
        _instructions_history,
        _profile_history,
        _journal_history,
        _aw1_history,
        _amqp_builds_history,
        _spark_history,
        _recovery_history,
        _cluster_history,
        _findings_history,
    ]
    text = HISTORY_HEADER + "".join("\n" + "\n".join(section()) for section in sections)
    validation = latest_validation()
    text += "\n" + _validation_section(validation)
    HISTORY.write_text(text.rstrip("\n") + "\n")
    return HISTORY


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
    """Every rep's value, or the one value every rep had."""
    if st is None:
        return NYM
    if len(set(st["values"])) == 1:
        return _num(st["values"][0])
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
    # The workload's target, then the goal beyond it.
    for at_least, at_most, goal in ((1.5, 0.7, ""), (2.0, 0.35, " (goal)")):
        ceiling = ", or within 10% of the client's ceiling" if goal else ""
        add(
            "W1",
            f"throughput ≥ {at_least:g}× ActiveMQ{ceiling}{goal}",
            f"{r:.2f}×" if r else NYM,
            None if r is None else r >= at_least,
        )
        add(
            "W1",
            f"broker CPU/msg ≤ {at_most:g}× ActiveMQ{goal}",
            f"{c:.2f}×" if c else NYM,
            None if c is None else c <= at_most,
        )
    for w, ph, at_least in (("W2", "main", 2.5), ("W4", "main", 2.0)):
        r = _ratio(sh(w, ph), aq(w, ph), "throughput")
        add(
            w,
            f"throughput ≥ {at_least:g}× ActiveMQ (goal)",
            f"{r:.2f}×" if r else NYM,
            None if r is None else r >= at_least,
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
            f"{phase[:-1]} producer(s): throughput ≥ {goal:g}× ActiveMQ (goal)",
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


# --- the documents -------------------------------------------------------------------------

HEADER = """\
# Benchmarks: Shoal side by side with {peers}

<!-- Generated by `python -m bench.run --report` (bench/report.py) from bench/results/,
     bench/recorded/ and bench/validation/. Edit bench/report.py or a record's `note`
     field, not this file. -->

Shoal's numbers come from the same client run against Shoal and the brokers people
would pick instead, on the same machine; each table names the run (file and command)
it comes from, and each matrix row the build it ran on. Nothing on this page is a
number that was not measured; a cell that has no measurement says "{nym}". Earlier
runs and what each one changed: [benchmark-history.md](benchmark-history.md).

## How to reproduce

```sh
make bench                      # = .venv/bin/python -m bench.run --all: W1-W8, all brokers, 3 reps
.venv/bin/python -m bench.run --all --reps 3 --interleave   # the brokers take turns rep by rep
.venv/bin/python -m bench.run --broker activemq --workload W1 --reps 3   # one cell
.venv/bin/python -m bench.run --validate   # the reference ActiveMQ rows (harness check)
.venv/bin/python -m bench.run --report     # render this page, the history page and the plots
.venv/bin/python -m bench.loadgen --broker activemq --messages 100000 --groups 100  # ad hoc
.venv/bin/python -m bench.builds --base REV --compile --workload W6   # two builds side by side
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
* Each workload runs on freshly started brokers after a warm-up of passes of 100k W1
  messages that stops once the broker's CPU per message of two passes in a row is
  within 10% (at most 8 passes: a JVM's compiler threads share the 2 cores with the
  load), then 3 repetitions on separate queues; W8, which measures RSS growth, starts a
  fresh broker (with its own warm-up) for each repetition. With `--interleave` the
  workload's brokers start together and take turns rep by rep, the order flipping every
  rep, so a slow spell of this shared machine falls on every broker alike; without it,
  one broker's reps run after another's. Before each warm-up pass and repetition the
  runner waits (up to 120 s) for other load to stay below 0.25 cores. Values are
  medians over the repetitions, min–max in brackets.
* The client's ceiling (`bench/peers/nullsink.py`, `--broker nullsink`; `--all` runs it
  on W1 and W6) is **not a broker**: a one-process loop that answers CONNECT, SUBSCRIBE
  and every `receipt`, hands each SEND on at once as a MESSAGE to the next subscriber
  of its destination, round robin, and drops ACKs: no groups, no storage, no
  redelivery. Its msg/s is the most this client carries on these 2 cores; where
  Shoal's throughput is within 10% of it, the client, not Shoal, is the bound. Its
  order columns show 0 only because W1's plan happens to keep each group on one
  consumer under round robin.

## Workloads and targets

Each workload's target is in this table; the goals Shoal aims at beyond it are in the
Targets table under the matrix.

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


def _matrix_section(s: dict | None, plots: list[str]) -> str:
    out = ["## Results: standard matrix", ""]
    if s is None:
        out.append(f"{NYM}: no matrix run is recorded yet (`make bench` makes one).")
        return "\n".join(out) + "\n"
    out += [
        f"Run `{s['run_id']}` (`bench/recorded/{s['run_id']}.json`, `{s.get('command')}`), "
        f"{s.get('started')} to {s.get('finished')} (UTC). "
        f"Machine: {_machine_line(s)}. Other load during the measured runs: "
        f"{_other_line(s['rows'])}.",
        "",
    ]
    if s.get("note"):
        out += [_first_paragraph(s["note"]), ""]
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
            note = (s.get("rerun_notes") or {}).get(w)
            if note:
                out += [_first_paragraph(note), ""]
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
    out.append("")
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


def _validation_section(v: dict | None) -> str:
    out = ["## Harness validation: ActiveMQ against the reference figures", ""]
    if v is None:
        out.append(f"{NYM}. Run `python -m bench.run --validate`.")
        return "\n".join(out) + "\n"
    out += [
        f"Run `{v['run_id']}` (`bench/validation/{v['run_id']}.json`), "
        f"{v.get('started')} to {v.get('finished')} (UTC), "
        f"`{v.get('command')}`. Machine: {_machine_line(v)}. Other load during the "
        f"measured runs: {_other_line(v['rows'])}. Reference: "
        "the figures `bench/workloads.py` keeps for each workload (ActiveMQ measured on the "
        "same machine class, idle, other load 0.00–0.01 cores).",
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
    if v.get("notes"):
        out += [v["notes"], ""]
    return "\n".join(out) + "\n"


FOOTER = """\
## Limits of these numbers

* The machine has 2 cores shared by the broker, the benchmark client (producer and
  consumer processes; their CPU per message is recorded with every run as
  `client_us`) and anything else running. At full speed every broker is CPU-bound
  together with the client, so throughput ratios are more telling than absolute
  figures; broker CPU µs/msg is the steadiest figure to compare. Check the `other
  cores` column before trusting a row.
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
    """Render docs/benchmarks.md, docs/benchmark-history.md and the plots; keep the
    summaries of the runs they show in bench/recorded/."""
    DOCS.mkdir(exist_ok=True)
    matrix = latest_matrix()
    plots = write_plots(matrix, f"run {matrix['run_id']}") if matrix else []
    text = HEADER.format(nym=NYM, workload_rows=_workload_rows(), peers=_peers(matrix))
    for section in (
        _matrix_section(matrix, plots),
        _history_section(),
        _recovery_section(),
        _spark_section(),
        _consumers_section(),
        _cluster_section(),
        _cluster_faults_section(),
        _amqp_section(),
        FOOTER,
    ):
        text += "\n" + section
    if matrix:
        merged = ("reruns", "rerun_commands", "rerun_notes", "matrix_rows")
        shown = {k: v for k, v in matrix.items() if k not in merged}
        record(shown | {"rows": matrix["matrix_rows"]})
    for summary in single_runs()[-12:]:
        record(summary)
    DOC.write_text(text)
    write_history()
    return DOC


if __name__ == "__main__":
    print(write_docs())
