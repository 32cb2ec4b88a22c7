"""docs/benchmarks.md, docs/benchmark-history.md and docs/bench-*.png, rendered from
bench/results/ and bench/recorded/.

bench/results/ holds the raw runs (gitignored). Every run a page shows is also
summarized into bench/recorded/ (kept in git), so a clean checkout renders the same
pages. A record's `note` field holds what its numbers do not say (the build, the
machine that hour, what not to conclude); this module only renders. The page's fixed
text (how to reproduce, method, limits) is bench/benchmarks.md.in; each benchmark module
renders its own records (its `section` and `history`), and this one renders the matrix,
its targets and plots, and puts the pages together.

Only measured numbers are written. A cell with no measurement says "not yet measured".
Ratios Shoal/peer are computed only from results of the same run.
"""

from __future__ import annotations

import importlib
import json
import math
import statistics
from collections.abc import Callable
from pathlib import Path

from bench.workloads import STANDARD, WORKLOADS

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"
VALIDATION_DIR = REPO / "bench" / "validation"
RECORDED = REPO / "bench" / "recorded"
TEMPLATE = REPO / "bench" / "benchmarks.md.in"
DOCS = REPO / "docs"
DOC = DOCS / "benchmarks.md"
HISTORY = DOCS / "benchmark-history.md"
NYM = "not yet measured"
BROKER_ORDER = ("shoal", "activemq", "artemis", "rabbitmq", "nullsink")
BROKER_LABEL = {
    "shoal": "Shoal",
    "activemq": "ActiveMQ 5.17",
    "artemis": "Artemis 2.40",
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


# --- summarising and loading -----------------------------------------------------------


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
        row.update((name, _stats([fn(r) for r in rs])) for name, fn in METRICS.items())
        rows.append(row)
    keys = ("run_id", "kind", "started", "finished", "machine", "settings", "command", "brokers")
    return {
        **{k: data.get(k) for k in keys},
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
    reruns: dict[str, dict] = {}
    for single in singles:
        if single["run_id"] <= matrix["run_id"]:
            continue
        for w in {r["workload"] for r in single["rows"]}:
            if {"shoal", "activemq"} <= {r["broker"] for r in single["rows"] if r["workload"] == w}:
                rows = [r for r in rows if r["workload"] != w]
                rows += [r for r in single["rows"] if r["workload"] == w]
                reruns[w] = single
    return {**matrix, "rows": rows, "reruns": reruns, "matrix_rows": matrix["rows"]}


def latest_validation() -> dict | None:
    for p in sorted(VALIDATION_DIR.glob("*.json"), reverse=True):
        d = _load_json(p)
        if d and d.get("rows"):
            return d
    return None


def recorded_runs(pattern: str, key: str) -> list[tuple[Path, dict]]:
    """The recorded runs named ``pattern``, oldest first, that hold ``key``."""
    loaded = ((p, _load_json(p)) for p in sorted(RECORDED.glob(pattern)))
    return [(p, d) for p, d in loaded if d and d.get(key)]


def single_runs() -> list[dict]:
    return _summaries("single")


def latest_with(broker: str) -> dict | None:
    """The latest run, single or matrix, in which Shoal and ``broker`` both ran."""
    runs = [s for kind in ("single", "matrix") for s in _summaries(kind)]
    runs = [s for s in runs if {"shoal", broker} <= {r["broker"] for r in s["rows"]}]
    return max(runs, key=lambda s: s["run_id"]) if runs else None


def _first_paragraph(note: str | None) -> str:
    return (note or "").split("\n\n")[0]


def _row(cells: list) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def md_table(columns: list[str], rows: list[list]) -> list[str]:
    """A markdown table: a header of ``columns``, then one line per row of cells."""
    return [_row(columns), "|" + "---|" * len(columns), *map(_row, rows)]


def history_section(
    title: str, intro: str, columns: list[str], rows: list[list], runs: list
) -> list[str]:
    """A docs/benchmark-history.md section: its intro, one table, and each run's note
    (under its file name)."""
    notes = [f"- `{name}`: {d['note']}" for name, d in runs if d.get("note")]
    return (
        [f"## {title}", "", intro, "", *md_table(columns, rows)]
        + (["", *notes] if notes else [])
        + [""]
    )


# The sections after the history, each the latest recorded run of one benchmark, rendered
# by the benchmark's module: (title, records, a key every record has, module).
OTHER_SECTIONS = (
    ("Recovery after kill -9 (1M persistent messages)", "recovery-*.json", "results", "recovery"),
    (
        "Spark pipeline (PySpark 4.x, local mode and a standalone cluster)",
        "spark-*.json",
        "orders",
        "spark",
    ),
    ("Many consumers on one queue", "consumers-*.json", "results", "consumers"),
    ("Cluster (docs/cluster.md)", "cluster-*.json", "cw1", "cluster"),
    (
        "Cluster faults: kill -9 and a network partition (docs/cluster.md)",
        "faults-*.json",
        "faults",
        "cluster_faults",
    ),
    ("AW1: W1 over AMQP 1.0 (docs/amqp.md)", "amqp-w1-*.json", "summary", "amqp_w1"),
    (
        "S1 over Shoal and over Kafka (Spark's own anchor)",
        "s1-kafka-*.json",
        "kafka",
        "spark_kafka",
    ),
)


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


def _history_section() -> str:
    """One row per matrix run: Shoal against ActiveMQ where the goals are set."""
    columns = ["run", "Shoal build"]
    columns += [
        f"{w}{'' if ph == 'main' else ' ' + ph} (goal {g[0]:g}×)" for (w, ph), g in GOALS.items()
    ]
    rows = []
    for s in reversed(_summaries("matrix")):
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
            # reps on one broker: only the first is fresh
            cells.append(f"{_num(w8['rss_per_group_end']['values'][0])} (first rep)")
        else:
            cells.append(_med((w8 or {}).get("rss_per_group_end")) if w8 else "–")
        rows.append(cells)
    return "\n".join(
        [
            "## History",
            "",
            "Every matrix run, newest first: Shoal's msg/s over ActiveMQ's in the same run "
            "(and broker CPU per message over ActiveMQ's for W1). Every other recorded run, "
            "with what each one changed and how to read it, is in "
            "[benchmark-history.md](benchmark-history.md).",
            "",
            *md_table([*columns, "W8 B/group (goal ≤ 300)"], rows),
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
    singles = list(reversed(single_runs()))
    rows = [
        [f"`{s['run_id']}`", BROKER_LABEL.get(r["broker"], r["broker"])]
        + [f"{r['workload']} {r['phase']}", r["reps"], _mm(r["throughput"]), _med(r["p99"], _ms)]
        + [_mm(r["cpu_us"]), _allv(r["missing"])]
        + [f"{_allv(r['viol_consumer'])} / {_allv(r['viol_cross'])}", _med(r["other"]), _build(r)]
        for s in singles
        for r in s["rows"]
    ]
    columns = ["run", "broker", "workload", "reps", "msg/s", "p99 ms", "CPU µs/msg"]
    columns += ["missing", "order viol.", "other cores", "build"]
    commands = "; ".join(f"`{s['run_id']}`: `{s.get('command')}`" for s in singles)
    runs = [(f"{s['run_id']}.json", s) for s in singles]
    title, intro = (
        "Single runs (some workloads, some brokers)",
        f"Newest first. Commands: {commands}.",
    )
    return history_section(title, intro, columns, rows, runs)


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
    from bench import amqp_compare, amqp_w1, builds, cluster, instructions  # noqa: I001
    from bench import journal_path, profile, recovery, run, spark

    def every_run(title: str, intro: str, pattern: str, key: str, render: Callable) -> list[str]:
        """Each recorded run of one benchmark in full, newest first, and its note."""
        out = [f"## {title}", "", intro, ""]
        for p, d in reversed(recorded_runs(pattern, key)):
            out += render(p.name, d) + ([d["note"], ""] if d.get("note") else [])
        return out

    def named(*patterns: str, key: str) -> list[tuple[str, dict]]:
        return [(p.name, d) for pattern in patterns for p, d in recorded_runs(pattern, key)]

    two_builds = named("builds-*.json", "native-*.json", "loop-*.json", key="workloads")
    sections: list[Callable[[], list[str]]] = [
        _matrix_history,
        _singles_history,
        lambda: builds.history(
            sorted(two_builds, key=lambda r: r[1].get("date", ""), reverse=True)
        ),
        lambda: instructions.history(named("instructions-*.json", key="rows")[::-1]),
        lambda: profile.history(named("profile-*.json", key="rows")[::-1]),
        lambda: journal_path.history(
            recorded_runs("journal-codec-*.json", "ns_per_record"),
            recorded_runs("journal-path-*.json", "us_per_message_median"),
        ),
        lambda: every_run(
            "AW1 runs", amqp_w1.INTRO, "amqp-w1-*.json", "summary", amqp_w1.run_lines
        ),
        lambda: amqp_compare.history(named("amqp-builds-*.json", key="amqp")[::-1]),
        lambda: every_run("Spark runs", spark.INTRO, "spark-*.json", "orders", spark.run_lines),
        lambda: recovery.history(recorded_runs("recovery-*.json", "results")),
        lambda: cluster.history(recorded_runs("cluster-*.json", "cluster")),
        _findings_history,
    ]
    text = HISTORY_HEADER + "".join("\n" + "\n".join(section()) for section in sections)
    text += "\n" + run.validation_section(latest_validation())
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
    return f"{v:.2f}" if v < 1 else f"{v:.1f}" if v < 10 else f"{v:,.0f}"


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

    def add(w: str, text: str, value: str, met) -> None:
        status = NYM if met is None else "–" if met == "info" else "met" if met else "**missed**"
        out.append({"workload": w, "target": text, "value": value, "status": status})

    def ratio(w: str, ph: str, text: str, bound: float, key: str = "throughput", peer=aq) -> None:
        """Shoal over the peer's ``key`` in ``w`` ``ph``: at least ``bound`` (CPU: at most)."""
        r = _ratio(sh(w, ph), peer(w, ph), key)
        met = None if r is None else r <= bound if key == "cpu_us" else r >= bound
        add(w, text, f"{r:.2f}×" if r else NYM, met)

    # The workload's target, then the goal beyond it.
    for at_least, at_most, goal in ((1.5, 0.7, ""), (2.0, 0.35, " (goal)")):
        ceiling = ", or within 10% of the client's ceiling" if goal else ""
        ratio("W1", "main", f"throughput ≥ {at_least:g}× ActiveMQ{ceiling}{goal}", at_least)
        ratio("W1", "main", f"broker CPU/msg ≤ {at_most:g}× ActiveMQ{goal}", at_most, "cpu_us")
    for w, at_least in (("W2", 2.5), ("W4", 2.0)):
        ratio(w, "main", f"throughput ≥ {at_least:g}× ActiveMQ (goal)", at_least)
    for w, ph in (("W1", "main"), ("W6", "8p-nodisk"), ("W6", "8p")):
        r = _ratio(sh(w, ph), _find(rows, "nullsink", w, ph), "throughput")
        if r is not None:
            where = "" if ph == "main" else ph + ": "
            text = f"{where}throughput within {CEILING_MARGIN:.0%} of the client's ceiling (the null sink, same run)"
            add(w, text, f"{r:.2f}×", r >= 1 - CEILING_MARGIN)
    ratio("W2", "main", "throughput ≥ 1.5× ActiveMQ", 1.5)
    w3 = sh("W3")
    if w3 and w3.get("viol_cross") and w3.get("viol_consumer"):
        tot = w3["viol_cross"]["max"] + w3["viol_consumer"]["max"]
        add("W3", "0 order violations (every rep)", f"{tot} (worst rep)", tot == 0)
    else:
        add("W3", "0 order violations (every rep)", NYM, None)
    a, b = sh("W5"), aq("W5")
    if a and b and a.get("p99") and b.get("p99"):
        x, y = a["p99"]["median"], b["p99"]["median"]
        add("W5", "p99 no worse than ActiveMQ", f"{_ms(x)} vs {_ms(y)} ms", x <= y)
    else:
        add("W5", "p99 no worse than ActiveMQ", NYM, None)
    ratio("W6", "8p", "8 producers: throughput ≥ 3× ActiveMQ", 3)
    for phase, goal in (("1p", 1.2), ("32p", 2.0)):
        ratio(
            "W6", phase, f"{phase[:-1]} producer(s): throughput ≥ {goal:g}× ActiveMQ (goal)", goal
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
        text = (
            "8 producers without fsync (non-persistent): the ceiling of Shoal and this client "
            "together (the client alone is the null sink's row), vs 3× ActiveMQ's persistent 8p"
        )
        add("W6", text, f"{_num(ceiling)} vs {_num(goal)} msg/s", "info")
    a, b = sh("W7", "loaded"), sh("W7", "unloaded")
    w7 = "other groups' p99 < 2× their unloaded p99"
    if a and b and a.get("p99") and b.get("p99"):
        x, y = a["p99"]["median"], b["p99"]["median"]
        add("W7", w7, f"{_ms(x)} vs {_ms(y)} ms", (not math.isinf(x)) and x < 2 * y)
    else:
        add("W7", w7, NYM, None)
    a = sh("W8")
    if a and a.get("rss_per_group_end"):
        v = max(a["rss_per_group_end"]["median"], 0)
        value = f"{v:,.0f} B/group"
        if not fresh_broker_each_rep(a):
            first = max(a["rss_per_group_end"]["values"][0], 0)
            value += f" (old method, reps on one broker; the first rep, on a fresh broker: {first:,.0f} B/group)"
            v = max(v, first)
        add("W8", "≤ 300 B broker RSS per group", value, v <= 300)
    else:
        add("W8", "≤ 300 B broker RSS per group", NYM, None)
    return out


# --- plots -------------------------------------------------------------------------------


def write_plots(s: dict, label: str) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = s["rows"]
    keys = [
        (w, ph)
        for w in WORKLOADS
        for ph in WORKLOADS[w].phases
        if any(r["workload"] == w and r["phase"] == ph for r in rows)
    ]
    brokers = [b for b in BROKER_ORDER if any(r["broker"] == b for r in rows)]
    if not keys or not brokers:
        return []
    width = 0.8 / len(brokers)

    def points(b: int, metric: str) -> tuple[list[float], list[dict]]:
        """x positions and figures of broker ``b``'s measured keys."""
        found = [(j, _find(rows, brokers[b], w, ph)) for j, (w, ph) in enumerate(keys)]
        found = [
            (j, r[metric])
            for j, r in found
            if r and r.get(metric) and not math.isinf(r[metric]["median"])
        ]
        return [j + (b - (len(brokers) - 1) / 2) * width for j, _ in found], [st for _, st in found]

    def plot(name: str, ylabel: str, title: str, draw: Callable, **legend) -> str:
        fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(keys) + 2), 4.2))
        for i, b in enumerate(brokers):
            draw(ax, i, BROKER_LABEL.get(b, b))
        ax.set_xticks(range(len(keys)), [w if ph == "main" else f"{w}\n{ph}" for w, ph in keys])
        ax.set_yscale("log")
        ax.set_ylabel(ylabel)
        ax.set_title(f"{title} ({label})")
        ax.legend(**legend)
        ax.grid(axis="y", alpha=0.3)
        fig.tight_layout()
        fig.savefig(DOCS / name, dpi=110)
        plt.close(fig)
        return name

    def bars(ax, i: int, name: str) -> None:
        xs, sts = points(i, "throughput")
        yerr = [[t["median"] - t["min"] for t in sts], [t["max"] - t["median"] for t in sts]]
        ax.bar(xs, [t["median"] for t in sts], width, yerr=yerr, capsize=2, label=name)

    def percentiles(ax, i: int, name: str) -> None:
        for pct, mk in {"p50": "o", "p99": "s", "p999": "^"}.items():
            xs, sts = points(i, pct)
            ys = [max(st["median"], 1e-3) for st in sts]
            ax.scatter(xs, ys, marker=mk, color=f"C{i}", label=f"{name} {pct}")

    return [
        plot("bench-throughput.png", "msg/s (median, min–max)", "Throughput per workload", bars),
        plot(
            "bench-latency.png",
            "latency, ms (median of reps)",
            "Latency percentiles per workload",
            percentiles,
            fontsize=7,
            ncol=len(brokers),
        ),
    ]


# --- docs/benchmarks.md ----------------------------------------------------------------------


def _brokers_lines(s: dict) -> list[str]:
    """One line per broker the run started: its build(s), or why it could not run."""
    out = []
    for b, info in (s.get("brokers") or {}).items():
        if info.get("error"):
            out.append(
                f"* **{BROKER_LABEL.get(b, b)} could not be run:** `{info['error'].splitlines()[0][:300]}`"
            )
        else:
            # sorted: the rows come from several runs, merged in no fixed order
            builds = sorted({_build(r) for r in s["rows"] if r["broker"] == b})
            notes = f" ({info['notes']})" if info.get("notes") else ""
            out.append(
                f"* {BROKER_LABEL.get(b, b)}: {', '.join(builds) or info.get('version')}{notes}"
            )
    return out


def _run_line(s: dict, where: str = "bench/recorded") -> str:
    return (
        f"Run `{s['run_id']}` (`{where}/{s['run_id']}.json`, `{s.get('command')}`), "
        f"{s.get('started')} to {s.get('finished')} (UTC). Machine: {_machine_line(s)}. "
        f"Other load during the measured runs: {_other_line(s['rows'])}."
    )


def _matrix_row(rows: list[dict], b: str, w: str, ph: str) -> str:
    r = _find(rows, b, w, ph)
    assert r is not None
    ratio = ""
    if b != "shoal":
        sh = _find(rows, "shoal", w, ph)
        t, c = _ratio(sh, r, "throughput"), _ratio(sh, r, "cpu_us")
        ratio = f"{t:.2f}×, {c:.2f}×" if t and c else "–"
        if b == "nullsink":  # Shoal's share of the client's ceiling
            near = t is not None and t >= 1 - CEILING_MARGIN
            ratio = f"{t:.2f}× ({'' if near else 'not '}within 10%)" if t else "–"
    stall = f" ({r['stalled']} stalled)" if r.get("stalled") else ""
    cells = [f"{BROKER_LABEL[b]}{stall}", ph, _mm(r["throughput"])]
    cells += [_med(r[p], _ms) for p in ("p50", "p99", "p999")]
    cells += [
        _mm(r["cpu_us"]),
        _med(r["rss_mib"]),
        f"{_allv(r['missing'])} / {_allv(r['duplicates'])}",
    ]
    cells += [f"{_allv(r['viol_consumer'])} / {_allv(r['viol_cross'])}", _allv(r["moved"])]
    return _row([*cells, _med(r["other"]), ratio, _build(r)])


MATRIX_COLUMNS = (  # noqa: SIM905
    "broker|phase|msg/s|p50 ms|p99 ms|p999 ms|broker CPU µs/msg|RSS MiB (end)|missing / dup|"
    "order viol. (consumer / cross)|groups on >1 consumer|other cores|Shoal/peer msg/s, CPU|build"
).split("|")


def _matrix_section(s: dict | None, plots: list[str]) -> str:
    out = ["## Results: standard matrix", ""]
    if s is None:
        out.append(f"{NYM}: no matrix run is recorded yet (`make bench` makes one).")
        return "\n".join(out) + "\n"
    out += [_run_line(s), ""]
    if s.get("note"):
        out += [_first_paragraph(s["note"]), ""]
    out += _brokers_lines(s)
    ran = set(s.get("brokers") or {})
    out += [
        f"* {BROKER_LABEL[b]}: not in this run"
        for b in BROKER_ORDER
        if b not in ran and b != "artemis"
    ]
    out += ["", "Each row's last column names the build it ran on.", ""]
    rows = s["rows"]
    for w in STANDARD:
        wl = WORKLOADS[w]
        out += [f"### {w}: {wl.title}", ""]
        again = (s.get("reruns") or {}).get(w)
        if again:
            out += [
                f"Measured again after the matrix, every broker in one run: "
                f"`{again['run_id']}` (`bench/recorded/{again['run_id']}.json`, "
                f"`{again.get('command')}`; the matrix's own rows for {w} are in "
                f"`bench/recorded/{s['run_id']}.json`).",
                "",
            ]
            if again.get("note"):
                out += [_first_paragraph(again["note"]), ""]
        out += md_table(MATRIX_COLUMNS, [])
        for ph in wl.phases:
            for b in BROKER_ORDER:
                if _find(rows, b, w, ph) is not None:
                    out.append(_matrix_row(rows, b, w, ph))
                elif b in ran or b == "shoal":
                    out.append(f"| {BROKER_LABEL[b]} | {ph} | {NYM} |" + "  |" * 11)
        for b in BROKER_ORDER if w == "W8" else ():
            r = _find(rows, b, w, "main")
            if r and r.get("rss_per_group_end"):
                out.append(
                    f"\n{BROKER_LABEL[b]}: RSS per group {_mm(r['rss_per_group_end'])} B at the end, "
                    f"{_mm(r['rss_per_group_peak'])} B at the peak."
                )
                if b == "shoal" and not fresh_broker_each_rep(r):
                    out.append("\n" + _w8_old_method(r))
        errs = {
            e
            for b in BROKER_ORDER
            for ph in wl.phases
            for e in ((_find(rows, b, w, ph) or {}).get("errors") or [])
        }
        if errs:
            out += ["", "Errors: " + "; ".join(f"`{e[:200]}`" for e in sorted(errs))]
        out.append("")
    out += ["### Targets", "", *md_table(["workload", "target", "value", "status"], [])]
    out += [
        _row([t["workload"], t["target"], t["value"], t["status"]]) for t in evaluate_targets(s)
    ]
    out.append("")
    if s.get("failures"):
        out += ["### Failures", ""]
        for f in s["failures"]:
            out.append(
                f"* {f.get('broker')} {f.get('workload')} {f.get('phase', '')} "
                f"rep {f.get('rep', '-')}: `{str(f.get('error'))[:300]}`"
            )
        out.append("")
    out += [f"![{p}]({p})" for p in plots]
    return "\n".join(out) + "\n"


def _x(ratio: float | None) -> str:
    return "–" if ratio is None else f"{ratio:.2f}×"


def _beside_section(peer: str) -> str:
    """Shoal against ``peer`` in the latest run that had both: msg/s, CPU, order."""
    label, s = BROKER_LABEL[peer], latest_with(peer)
    out = [f"## Shoal beside {label}", ""]
    if s is None:
        return "\n".join([*out, f"{NYM}.", ""])
    rows, ahead = [], 0
    for w, ph in ((n, ph) for n in STANDARD for ph in WORKLOADS[n].phases):
        a, b = _find(s["rows"], "shoal", w, ph), _find(s["rows"], peer, w, ph)
        if a and b:
            t, c = _ratio(a, b, "throughput"), _ratio(a, b, "cpu_us")
            ahead += bool(t and c and t > 1 > c)
            rows.append(
                [w if ph == "main" else f"{w} {ph}"]
                + [
                    _mm(r["throughput"])
                    + (f" ({r['stalled']} stalled)" if r.get("stalled") else "")
                    for r in (a, b)
                ]
                + [_x(t), _mm(a["cpu_us"]), _mm(b["cpu_us"]), _x(c)]
                + [f"{_allv(r['viol_consumer'])} / {_allv(r['viol_cross'])}" for r in (a, b)]
                + [f"{_allv(a['moved'])} / {_allv(b['moved'])}"]
            )
    columns = ["workload", "Shoal msg/s", f"{label} msg/s", "Shoal/peer msg/s", "Shoal CPU µs/msg"]
    columns += [f"{label} CPU µs/msg", "Shoal/peer CPU", "Shoal order viol. (consumer / cross)"]
    columns += [f"{label} order viol.", "groups on >1 consumer (Shoal / peer)"]
    out += [_run_line(s), "", *([_first_paragraph(s["note"]), ""] if s.get("note") else [])]
    out += [*_brokers_lines(s), "", *md_table(columns, rows), ""]
    goal = f"Goal: more msg/s than {label} at less broker CPU per message; met on {ahead} of"
    out += [f"{goal} {len(rows)} rows.", ""]
    return "\n".join(out)


def _behaviour_section() -> str:
    """The latest recorded run of the side-by-side group scenarios: outcome per broker."""
    out = ["## Group behaviour side by side", ""]
    runs = recorded_runs("behaviour-*.json", "scenarios")
    if not runs:
        return "\n".join([*out, f"{NYM}.", ""])
    path, d = runs[-1]
    brokers = [b for b in BROKER_ORDER if b in d["brokers"]]
    rows = [[title, *(got.get(b, NYM) for b in brokers)] for title, got in d["scenarios"].items()]
    out += [
        f"`bench/recorded/{path.name}`, {d['date']}: `{d['command']}`. Each scenario runs the "
        "same STOMP 1.2 clients (ack `client-individual`) against each broker and asserts what "
        "that broker does; each cell is the outcome it measured. Builds: "
        + "; ".join(d["brokers"][b] for b in brokers)
        + ".",
        "",
        *([_first_paragraph(d["note"]), ""] if d.get("note") else []),
        *md_table(["scenario", *(BROKER_LABEL[b] for b in brokers)], rows),
        "",
    ]
    return "\n".join(out)


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
    workload_rows = "\n".join(
        f"| {w} | {WORKLOADS[w].title}{f'. {WORKLOADS[w].notes}' if WORKLOADS[w].notes else ''} "
        f"| {WORKLOADS[w].target or '–'} |"
        for w in STANDARD
    )
    sections = [_matrix_section(matrix, plots), _beside_section("artemis"), _behaviour_section()]
    sections.append(_history_section())
    for title, pattern, key, module in OTHER_SECTIONS:
        section = importlib.import_module(f"bench.{module}").section
        runs = recorded_runs(pattern, key)
        lines = section(*runs[-1]) if runs else [f"{NYM}."]
        sections.append("\n".join([f"## {title}", "", *lines, ""]))
    text = TEMPLATE.read_text().format(
        nym=NYM,
        workload_rows=workload_rows,
        peers=_peers(matrix),
        sections="".join("\n" + s for s in sections) + "\n",
    )
    if matrix:
        shown = {k: v for k, v in matrix.items() if k not in ("reruns", "matrix_rows")}
        record(shown | {"rows": matrix["matrix_rows"]})
    for summary in single_runs()[-12:]:
        record(summary)
    DOC.write_text(text)
    write_history()
    return DOC


if __name__ == "__main__":
    print(write_docs())
