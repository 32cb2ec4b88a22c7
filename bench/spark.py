"""Spark figures for docs/benchmarks.md, measured in one run.

    python -m bench.spark --orders 1000000 --symbols 1000 --out spark-bench.json

Runs, against a fresh ``shoal serve`` (journal in a temp dir) and one local
SparkSession per measurement (a fresh ``python`` process each, as the study
did, so the first-batch costs are included every time):

* ``source``: broker log queue -> noop sink (the source alone)
* ``parquet-source``: the same orders from Parquet -> noop sink
* ``matching``: broker -> per-symbol matching (applyInPandasWithState) ->
  broker sink, exactly once (trades into a log queue)
* ``matching-noop``: the same without the sink (Spark's share of the cost)
* ``parquet-matching``: the same job reading the same orders from Parquet
* ``cluster-source``, ``cluster-matching``, ``cluster-parquet-matching``: the
  same on a Spark standalone cluster on loopback (a master and ``--workers``
  workers of one core each, ``shoal.spark.cluster.LocalCluster``, started
  once for all cluster steps); their Spark CPU-s is the driver's alone (the
  executors are the workers' children)
* ``latency``: a running query (processingTime 0), bursts of orders every
  2 s, time from the burst's receipt to the last of its trades arriving at a
  STOMP subscriber
* ``kafka-matching``, ``kafka-latency`` (``--kafka`` adds them after their
  Shoal twins): the same job and bursts over Apache Kafka (one KRaft broker
  on loopback, ``bench.peers.kafka``; the same orders in a topic keyed by
  symbol) with Spark's Kafka connector at both ends (``bench.spark_kafka``).
  Spark's Kafka sink is at least once; Shoal's is exactly once.

``--audit`` (implied by a Kafka step) checks each matching run's trades (the
cold run's) with ``shoal.spark.audit``: per symbol trade_seq 1..n without gap
or duplicate, and equal to the reference matcher over the same orders.
``s1_ratios`` in the results is Shoal over Kafka (above 1: Shoal ahead).

Each reports query seconds (``start()`` to the end, session start excluded)
and rows/s of the session's first query ("cold", what a job pays when it
starts), the same for a second run of the query in the same session
("warm": Python workers up, code generated), batches, and the CPU seconds of
the measuring process tree (cold run) and of the broker. The
machine's load average before and after each step is recorded too, since a
busy neighbour changes every number here.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench import spark_kafka
from shoal.spark import jobs, pipeline
from shoal.spark.client import ensure_log_queue, log_view
from shoal.spark.cluster import LocalCluster
from shoal.spark.generator import connect_producer

REPO = Path(__file__).resolve().parents[1]  # `python -m bench.spark` runs from here


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _loadavg() -> float:
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except OSError:
        return -1.0


def _busy_cpu() -> float:
    """CPU seconds the whole machine was busy (all cores), from /proc/stat."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    vals = [int(v) for v in fields]
    idle = vals[3] + (vals[4] if len(vals) > 4 else 0)
    return (sum(vals[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def wait_idle(threshold: float, max_wait: float) -> float:
    """Wait until other processes use less than ``threshold`` cores; returns what was seen."""
    deadline = time.monotonic() + max_wait
    while True:
        me0, all0 = _tree_cpu(os.getpid()), _busy_cpu()
        time.sleep(3.0)
        foreign = max(0.0, (_busy_cpu() - all0) - (_tree_cpu(os.getpid()) - me0)) / 3.0
        if foreign < threshold or time.monotonic() > deadline:
            return round(foreign, 2)
        print(f"waiting for an idle machine: {foreign:.2f} foreign cores busy", flush=True)


class Foreign:
    """Measures the cores used by processes outside this benchmark during a step.

    Busy time of the whole machine (/proc/stat) minus our own: every process
    ever seen in our tree (sampled twice a second, so Spark's short-lived
    Python workers count as ours even after they exit).
    """

    def __enter__(self) -> Foreign:
        self.start = _proc_times()
        self.seen: dict[int, float] = {}
        self.stop = threading.Event()
        self.all0, self.t0 = _busy_cpu(), time.monotonic()
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self._sample_once()
        self.thread.start()
        return self

    def _sample_once(self) -> None:
        times = _proc_times()
        for pid in _descendants(os.getpid(), times):
            self.seen[pid] = times[pid][1]

    def _sample(self) -> None:
        while not self.stop.wait(0.5):
            self._sample_once()

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()
        self._sample_once()
        wall = max(1e-9, time.monotonic() - self.t0)
        own = sum(cpu - self.start.get(pid, (0, 0.0))[1] for pid, cpu in self.seen.items())
        self.cores = round(max(0.0, (_busy_cpu() - self.all0) - own) / wall, 2)


def _proc_times() -> dict[int, tuple[int, float]]:
    """pid -> (parent pid, own user+system CPU seconds)."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                parts = (d / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            out[int(d.name)] = (int(parts[1]), (int(parts[11]) + int(parts[12])) / tick)
    return out


def _descendants(root: int, times: dict[int, tuple[int, float]]) -> list[int]:
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in times.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        if p in times:
            out.append(p)
        todo.extend(children.get(p, []))
    return out


def _tree_cpu(pid: int) -> float:
    """CPU seconds (user+sys) of a process and its live descendants."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    children: dict[int, list[int]] = {}
    stats: dict[int, float] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            parts = (d / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ppid = int(parts[1])
        children.setdefault(ppid, []).append(int(d.name))
        stats[int(d.name)] = (
            int(parts[11]) + int(parts[12]) + int(parts[13]) + int(parts[14])
        ) / tick
    todo = [pid]
    while todo:
        p = todo.pop()
        total += stats.get(p, 0.0)
        todo.extend(children.get(p, []))
    return total


class Broker:
    """A `shoal serve` subprocess on free loopback ports."""

    def __init__(self, data: Path) -> None:
        self.stomp = _free_port()
        self.http = _free_port()
        self.data = data
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http}"

    def start(self) -> Broker:
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "shoal.cli",
                "serve",
                "--stomp",
                f"127.0.0.1:{self.stomp}",
                "--http",
                f"127.0.0.1:{self.http}",
                "--data",
                str(self.data),
                "--log-level",
                "warning",
                "--amqp",
                "",  # no AMQP listener: its default port may be taken
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
        )
        assert self.proc.stdout is not None
        while b"ready" not in (line := self.proc.stdout.readline()):
            if not line:
                raise RuntimeError("shoal serve did not start")
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(60)


# --- one measurement per process ---------------------------------------------------------


# Measure kinds that are not one streaming query of the Shoal job (bench.spark_kafka).
KAFKA_TASKS = {
    "kafka-load": spark_kafka.load_orders,
    "kafka-latency": spark_kafka.latency,
    "audit": spark_kafka.audit,
}


def _measure(kind: str, opts: dict[str, Any]) -> dict[str, Any]:
    """Runs inside a fresh python process: one SparkSession, one query."""
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    if kind in KAFKA_TASKS:
        return KAFKA_TASKS[kind](opts)
    master = opts.get("master", "local[2]")
    if kind == "kafka-matching":
        spark = spark_kafka.build_spark(opts, f"shoal-bench-{kind}")
    else:
        spark = jobs.build_spark(
            master,
            f"shoal-bench-{kind}",
            shuffle_partitions=4,
            driver_memory="4g" if master.startswith("local") else "1g",
        )
    orders_schema = StructType(
        [
            StructField("group_id", StringType()),
            StructField("group_seq", LongType()),
            StructField("bucket", LongType()),
            StructField("offset", LongType()),
            StructField("body", StringType()),
        ]
    )
    if kind in ("source", "matching", "matching-noop"):
        # commit=false: every step reads the same orders, so none may trim them
        src = (
            spark.readStream.format("shoal")
            .option("url", opts["url"])
            .option("queue", opts["queue"])
            .option("maxRowsPerBatch", str(opts["max_rows"]))
            .option("commit", "false")
            .load()
        )
    else:
        src = (
            spark.readStream.schema(orders_schema)
            .option("maxFilesPerTrigger", 1000)
            .parquet(opts["parquet"])
        )
    ck = tempfile.mkdtemp(prefix=f"shoal-bench-{kind}-")
    if kind == "kafka-matching":
        w = spark_kafka.trades_writer(spark, opts, opts["trades_topic"])
    elif kind.endswith("source"):
        w = src.writeStream.format("noop")
    elif kind == "matching-noop":
        w = jobs.matched_trades(jobs.parsed_orders(src)).writeStream.format("noop")
    else:
        trades = jobs.matched_trades(jobs.parsed_orders(src))
        w = (
            trades.writeStream.format("shoal")
            .option("url", opts["url"])
            .option("destination", opts["trades_destination"])
            .option("groupColumn", "symbol")
            .option("seqColumn", "trade_seq")
            .option("bodyColumn", "body")
        )

    def once(checkpoint: str) -> tuple[float, int, Any]:
        t0 = time.perf_counter()
        q = w.option("checkpointLocation", checkpoint).trigger(availableNow=True).start()
        q.awaitTermination()
        seconds = time.perf_counter() - t0
        if q.exception() is not None:
            raise RuntimeError(str(q.exception()))
        prog = [p for p in q.recentProgress if p["numInputRows"]]
        return seconds, sum(p["numInputRows"] for p in prog), prog

    cpu0 = _tree_cpu(os.getpid())
    seconds, rows, prog = once(ck)  # cold: the session's first query, as people start a job
    cpu = _tree_cpu(os.getpid()) - cpu0
    audit_range: dict[str, Any] = {}
    if kind == "matching" and opts.get("trades_queue"):
        # where the cold run's trades end in the trades log (the audit reads them)
        http = pipeline.broker_http(argparse.Namespace(http=opts["url"], user=None, password=None))
        audit_range["cold_trades_end"] = log_view(http, opts["trades_queue"])["end"]
    elif kind == "kafka-matching":
        w = w.option("topic", opts["trades_topic"] + "-warm")  # the audit reads the cold run's
    # warm: the same query again in the same session (workers up, code generated)
    warm_s, warm_rows, _ = once(tempfile.mkdtemp(prefix=f"shoal-bench-{kind}-warm-"))
    spark.stop()
    return {
        "kind": kind,
        "rows": rows,
        "query_s": round(seconds, 2),
        "rows_per_s": round(rows / seconds),
        "batches": len(prog),
        "batch_ms": [p["durationMs"].get("triggerExecution") for p in prog],
        "cpu_s": round(cpu, 1),
        "warm_query_s": round(warm_s, 2),
        "warm_rows_per_s": round(warm_rows / warm_s),
        **audit_range,
    }


def run_in_process(kind: str, opts: dict[str, Any]) -> dict[str, Any]:
    load0 = _loadavg()
    out = subprocess.run(
        [sys.executable, "-m", "bench.spark", "--measure", kind, "--opts", json.dumps(opts)],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO,
    )
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"{kind} failed: {out.stdout[-2000:]} {out.stderr[-3000:]}")
    res = json.loads(lines[-1][7:])
    res["loadavg_before"] = load0
    res["loadavg_after"] = _loadavg()
    return res


# --- latency -------------------------------------------------------------------------------


_LATENCY_RUNS = [0]


def measure_latency(
    broker: Broker, opts: dict[str, Any], bursts: int, burst: int
) -> dict[str, Any]:
    """Running query, ``bursts`` bursts of ``burst`` orders every 2 s; e2e per burst.

    Every call uses its own log queue, topic and checkpoint, so a repeated
    measurement never sees an earlier one's orders or trades.
    """
    import stomp  # the test extra's client; only the bench uses it

    _LATENCY_RUNS[0] += 1
    run = _LATENCY_RUNS[0]
    orders_queue, trades_topic = f"lat{run}.orders", f"/topic/lat{run}-trades"
    pipeline.broker_http(argparse.Namespace(http=broker.url, user=None, password=None)).post_json(
        "/api/queues", {"name": orders_queue, "settings": {"queue-type": "log", "log-buckets": 8}}
    )

    spark = jobs.build_spark("local[2]", "shoal-bench-latency", shuffle_partitions=4)
    args = argparse.Namespace(
        http=broker.url,
        user=None,
        password=None,
        max_rows_per_batch=100_000,
        available_now=False,
        trigger_ms=0,
    )
    got: dict[int, float] = {}
    lock = threading.Lock()

    class Listener(stomp.ConnectionListener):
        def on_message(self, frame: Any) -> None:
            aggressor = int(frame.body.split(",")[0])
            with lock:
                got[aggressor] = time.perf_counter()

    conn = stomp.Connection([("127.0.0.1", broker.stomp)])
    conn.set_listener("l", Listener())
    conn.connect(wait=True)
    conn.subscribe(trades_topic, id="1", ack="auto")
    src = jobs.log_source(spark, args, orders_queue)
    trades = jobs.matched_trades(jobs.parsed_orders(src))
    q = (
        trades.writeStream.format("shoal")
        .option("url", broker.url)
        .option("destination", trades_topic)
        .option("groupColumn", "symbol")
        .option("seqColumn", "trade_seq")
        .option("bodyColumn", "body")
        .option("checkpointLocation", tempfile.mkdtemp(prefix="shoal-bench-lat-"))
        .trigger(processingTime="0 seconds")
        .start()
    )
    from shoal.spark.matching import encode_order, generate_orders

    orders = list(generate_orders(bursts * burst + 2000, opts["symbols"], seed=11))
    prod = connect_producer(f"127.0.0.1:{broker.stomp}")
    results = []
    try:
        # warm-up burst: the first batch of a run costs several seconds extra
        def send(chunk: list[Any]) -> float:
            for k, (sym, seq, oid, side, p, qty) in enumerate(chunk):
                prod.send(
                    "/queue/" + orders_queue,
                    encode_order(oid, side, p, qty),
                    group=sym,
                    group_seq=seq,
                    persistent=True,
                    receipt=k == len(chunk) - 1,
                )
            return time.perf_counter()

        send(orders[:2000])
        time.sleep(15)
        pos = 2000
        for i in range(bursts):
            chunk = orders[pos : pos + burst]
            pos += burst
            t_sent = send(chunk)
            # which orders of the burst trade is known only afterwards: wait until no
            # new trade of this burst arrived for 1 s (at most 10 s)
            deadline = time.perf_counter() + 10
            while time.perf_counter() < deadline:
                with lock:
                    mine = {a: t for a, t in got.items() if chunk[0][2] <= a <= chunk[-1][2]}
                if mine and time.perf_counter() - max(mine.values()) > 1.0:
                    break
                time.sleep(0.02)
            with lock:
                mine = {a: t for a, t in got.items() if chunk[0][2] <= a <= chunk[-1][2]}
            if mine:
                results.append(max(mine.values()) - t_sent)
            time.sleep(max(0.0, 2.0 - (time.perf_counter() - t_sent)))
    finally:
        prod.close()
        q.stop()
        conn.disconnect()
        spark.stop()
    return spark_kafka.latency_summary("latency", results, burst)


# --- driver ----------------------------------------------------------------------------------


def write_parquet(
    broker: Broker,
    queue: str,
    path: str,
    start: dict[str, Any] | None = None,
    end: dict[str, Any] | None = None,
) -> None:
    """Copy the records of a log queue into Parquet with the log's columns (pyarrow only).

    ``start`` and ``end`` (bucket -> offset) bound what is copied; by default
    everything the log holds.
    """
    import urllib.request

    import pyarrow as pa
    import pyarrow.parquet as pq

    view = log_view(
        pipeline.broker_http(argparse.Namespace(http=broker.url, user=None, password=None)), queue
    )
    start, end = start or view["start"], end or view["end"]
    tables = []
    for b, first in start.items():
        pos, stop = int(first), int(end[b])
        while pos < stop:
            with urllib.request.urlopen(
                f"{broker.url}/api/logs/{queue}/{b}?start={pos}&max_rows={min(200_000, stop - pos)}",
                timeout=120,
            ) as resp:
                t = pa.ipc.open_stream(resp.read()).read_all()
            pos += t.num_rows
            tables.append(t.select(["group_id", "group_seq", "bucket", "offset", "body"]))
    table = pa.concat_tables(tables)
    table = table.set_column(2, "bucket", table.column("bucket").cast(pa.int64()))
    table = table.set_column(4, "body", table.column("body").cast(pa.string()))
    Path(path).mkdir(parents=True, exist_ok=True)
    pq.write_table(table, str(Path(path) / "orders.parquet"))


STEP_TEXT = {
    "source": "broker log queue → noop (the source alone)",
    "parquet-source": "the same orders from Parquet → noop",
    "matching": "broker → matching (per-symbol state) → broker sink, exactly once",
    "matching-noop": "broker → matching → noop (no sink)",
    "parquet-matching": "Parquet → matching → broker sink, exactly once",
    "cluster-source": "cluster: broker log queue → noop (the source alone)",
    "cluster-parquet-source": "cluster: the same orders from Parquet → noop",
    "cluster-matching": "cluster: broker → matching → broker sink, exactly once",
    "cluster-parquet-matching": "cluster: Parquet → matching → broker sink, exactly once",
    "kafka-matching": "Kafka → matching → Kafka sink, at least once (Spark's Kafka connector)",
}
CLUSTER = "cluster-"


def markdown(results: dict[str, Any]) -> str:
    """The Spark section of docs/benchmarks.md from a results JSON."""
    n = results["orders"]
    lines = [
        "| step | query s | rows/s | warm: query s | warm: rows/s | batches | Spark CPU-s "
        "| broker CPU-s | other cores | all attempts: query s (other cores) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for step, text in STEP_TEXT.items():
        r = results.get(step)
        if r is None or "error" in r:
            continue
        tries = ", ".join(f"{t['query_s']} ({t['foreign_cores_during']})" for t in r["attempts"])
        lines.append(
            f"| {text} | {r['query_s']} | {r['rows_per_s']:,} | {r.get('warm_query_s', '–')} "
            f"| {r.get('warm_rows_per_s', 0):,} | {r['batches']} | {r['cpu_s']} "
            f"| {r['broker_cpu_s']} | {r['foreign_cores_during']} | {tries} |"
        )
    cluster = (
        f" Cluster steps: a standalone master and {results.get('workers', 2)} workers "
        "(one core, 1 GB each) on loopback, the driver on the same machine; their Spark "
        "CPU-s is the driver's only."
        if any(k.startswith(CLUSTER) for k in results)
        else ""
    )
    out = [
        f"{n:,} orders, {results['symbols']:,} symbols, {results['buckets']} buckets, "
        f"one micro-batch (trigger availableNow), 4 shuffle partitions; broker ingest over "
        f"STOMP (persistent, receipts per 2,000): {results['ingest']['seconds']} s "
        f"({results['ingest']['orders_per_s']:,} orders/s).{cluster}",
        "",
        *lines,
    ]
    lat = results.get("latency")
    if lat:
        tries = ", ".join(
            f"{t['e2e_p50_s']} ({t['foreign_cores_during']})" for t in lat["attempts"]
        )
        out += [
            "",
            f"Small-batch latency (running query, processingTime 0, {lat['bursts']} bursts "
            f"of {lat['burst_orders']} orders every 2 s, from the burst's receipt to its last "
            f"trade at a STOMP subscriber): p50 {lat['e2e_p50_s']} s, min "
            f"{lat['e2e_min_s']} s, max {lat['e2e_max_s']} s, other cores "
            f"{lat['foreign_cores_during']}; all attempts p50 (other cores): {tries}.",
        ]
    return "\n".join(out + kafka_markdown(results))


def kafka_markdown(results: dict[str, Any]) -> list[str]:
    """The S1 comparison with Kafka (``--kafka``), when the results have it."""
    k = results.get("kafka")
    if not k:
        return []
    out = [
        "",
        f"Over Kafka {k['version']} (KRaft, one node, {k['partitions']} partitions, key = the "
        f"symbol; Spark's connector {k['connector'].rsplit(':', 1)[-1]}): orders loaded by a "
        f"Spark batch write in {k['ingest']['seconds']} s.",
    ]
    lat = results.get(KAFKA + "latency")
    if lat:
        out.append(
            f"Kafka small-batch latency (the same bursts, from the acknowledged write to the "
            f"broker's append time of the burst's last trade): p50 {lat['e2e_p50_s']} s, min "
            f"{lat['e2e_min_s']} s, max {lat['e2e_max_s']} s, other cores "
            f"{lat['foreign_cores_during']}."
        )
    audits = [
        f"{name}: {'passed' if r['audit']['ok'] else 'FAILED'} "
        f"({r['audit']['archived_trades']:,} trades, reference {r['audit']['reference_trades']:,})"
        for name, r in (
            ("Shoal", results.get("matching")),
            ("Kafka", results.get(KAFKA + "matching")),
        )
        if r and "audit" in r
    ]
    if audits:
        out.append(
            "Audit of the cold run's trades (per symbol 1..n, equal to the reference "
            "matcher): " + "; ".join(audits) + "."
        )
    ratios = results.get("s1_ratios") or {}
    out.append(
        "S1 Shoal/Kafka (above 1: Shoal ahead): rows/s cold "
        f"{ratios.get('rows_per_s_cold')}, warm {ratios.get('rows_per_s_warm')}, latency p50 "
        f"{ratios.get('e2e_p50')}."
    )
    return out


KAFKA = "kafka-"
GUARANTEES = {
    "shoal": (
        "exactly once: the Shoal sink stages each task's trades in the broker and publishes "
        "them atomically once per (query id, batch id), so a retried batch publishes nothing "
        "twice"
    ),
    "kafka": (
        "at least once: Spark's Kafka sink (a plain, non-transactional producer) writes a "
        "retried micro-batch's trades again; readers must drop duplicates by "
        "(symbol, trade_seq)"
    ),
}


def kafka_steps(steps: list[str], kafka: bool) -> list[str]:
    """``steps`` with, under ``--kafka``, the Kafka twin of matching and latency after each."""
    if not kafka or any(s.startswith(KAFKA) for s in steps):
        return steps
    out = []
    for s in steps:
        out.append(s)
        if s in ("matching", "latency"):
            out.append(KAFKA + s)
    if KAFKA + "matching" not in out:
        out.append(KAFKA + "matching")
    return out


def start_kafka_peer(
    directory: Path, a: argparse.Namespace, opts: dict[str, Any]
) -> tuple[Any, dict[str, Any], dict[str, Any]]:
    """Kafka on free loopback ports with the bench's orders in its orders topic."""
    from bench.peers.kafka import VERSION, bootstrap, create_topics, start_kafka

    kafka = start_kafka(directory, partitions=a.buckets)
    create_topics(kafka.ports["kafka"], [spark_kafka.ORDERS_TOPIC, *spark_kafka.LATENCY_TOPICS])
    kopts = {
        **opts,
        "kafka": bootstrap(kafka),
        "kafka_connector": a.kafka_connector,
        "orders": a.orders,
        "bursts": a.bursts,
        "burst": a.burst,
    }
    try:
        load = run_in_process("kafka-load", kopts)
    except BaseException:
        kafka.stop()
        raise
    print(f"kafka ingest: {a.orders:,} orders in {load['seconds']} s", flush=True)
    info = {
        "version": VERSION,
        "connector": a.kafka_connector,
        "partitions": a.buckets,
        "ingest": {k: load[k] for k in ("seconds", "orders_per_s")},
    }
    return kafka, kopts, info


def run_kafka_step(step: str, kafka: Any, kopts: dict[str, Any]) -> dict[str, Any]:
    """A Kafka step; a failure is recorded, the Shoal figures of the run are kept."""
    from bench.peers.kafka import create_topics

    if step == KAFKA + "matching":
        topic = kopts["trades_topic"]
        create_topics(kafka.ports["kafka"], [topic, topic + "-warm"])
    try:
        return run_in_process(step, kopts)
    except RuntimeError as exc:
        print(f"{step} failed: {exc}", flush=True)
        return {"kind": step, "error": str(exc)[-2000:]}


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 2) if a and b else None


def s1_ratios(results: dict[str, Any]) -> dict[str, Any]:
    """S1 over Shoal against S1 over Kafka: above 1 means Shoal is ahead."""
    shoal, kafka = results.get("matching", {}), results.get(KAFKA + "matching", {})
    lat, klat = results.get("latency", {}), results.get(KAFKA + "latency", {})
    return {
        "rows_per_s_cold": _ratio(shoal.get("rows_per_s"), kafka.get("rows_per_s")),
        "rows_per_s_warm": _ratio(shoal.get("warm_rows_per_s"), kafka.get("warm_rows_per_s")),
        # latency: Kafka's over Shoal's, so that above 1 still means Shoal is ahead
        "e2e_p50": _ratio(klat.get("e2e_p50_s"), lat.get("e2e_p50_s")),
    }


INTRO = (
    "Targets: broker → matching → broker sink exactly once ≥ 45k rows/s; the source alone "
    "≥ 100k rows/s; compared with the same jobs reading Parquet; small-batch latency (the "
    "study's floor: about 1.2 s)."
)


def section(path: Path, data: dict[str, Any]) -> list[str]:
    """docs/benchmarks.md's section body for the latest recorded run."""
    return [INTRO, "", *run_lines(path.name, data)[:-1]]


def run_lines(name: str, data: dict[str, Any]) -> list[str]:
    """One recorded run as the benchmark pages show it: command and table."""
    command = data.get("command", "python -m bench.spark")
    return [f"`bench/recorded/{name}`, {data.get('date', '')}: `{command}`", "", markdown(data), ""]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.spark")
    ap.add_argument("--orders", type=int, default=1_000_000)
    ap.add_argument("--symbols", type=int, default=1000)
    ap.add_argument("--buckets", type=int, default=8)
    ap.add_argument("--max-rows-per-batch", type=int, default=0, help="0: one batch")
    ap.add_argument(
        "--steps", default="source,parquet-source,matching,matching-noop,parquet-matching,latency"
    )
    ap.add_argument(
        "--workers",
        type=int,
        default=2,
        help="workers (one core each) of the standalone cluster of the cluster-* steps",
    )
    ap.add_argument("--bursts", type=int, default=20)
    ap.add_argument("--burst", type=int, default=100)
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    ap.add_argument(
        "--idle-cores",
        type=float,
        default=0.3,
        help="wait before each step until other processes use fewer cores",
    )
    ap.add_argument("--idle-wait", type=float, default=300.0, help="longest wait for that (s)")
    ap.add_argument(
        "--retry-noisy",
        type=int,
        default=2,
        help="run a step again (at most this often) when other load disturbed it",
    )
    ap.add_argument(
        "--markdown",
        default=None,
        metavar="JSON",
        help="print the docs/benchmarks.md table of a results file and exit",
    )
    ap.add_argument(
        "--kafka",
        action="store_true",
        help="also run matching and latency over Apache Kafka (a Kafka step implies --audit)",
    )
    ap.add_argument(
        "--kafka-connector",
        default=spark_kafka.connector(),
        help="Maven coordinates of Spark's Kafka connector (spark.jars.packages)",
    )
    ap.add_argument(
        "--audit",
        action="store_true",
        help="audit each matching run's trades: per symbol 1..n, equal to the reference matcher",
    )
    ap.add_argument("--measure", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--opts", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.markdown:
        print(markdown(json.loads(Path(a.markdown).read_text())))
        return 0
    if a.measure:
        print("RESULT " + json.dumps(_measure(a.measure, json.loads(a.opts))), flush=True)
        return 0
    steps = kafka_steps(a.steps.split(","), a.kafka)
    audit = a.audit or any(s.startswith(KAFKA) for s in steps)
    tmp = Path(tempfile.mkdtemp(prefix="shoal-spark-bench-"))
    broker = Broker(tmp / "data").start()
    cluster: LocalCluster | None = None
    kafka: Any = None
    results: dict[str, Any] = {
        "orders": a.orders,
        "symbols": a.symbols,
        "buckets": a.buckets,
        "workers": a.workers,
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": "python -m bench.spark " + " ".join(argv if argv is not None else sys.argv[1:]),
    }
    try:
        http = pipeline.broker_http(argparse.Namespace(http=broker.url, user=None, password=None))
        ensure_log_queue(http, "bench.orders", "bench-orders", a.buckets)
        http.post_json(
            "/api/queues",
            {"name": "bench.trades", "settings": {"queue-type": "log", "log-buckets": a.buckets}},
        )
        t0 = time.perf_counter()
        pipeline.publish_orders(
            f"127.0.0.1:{broker.stomp}", a.orders, a.symbols, destination="/topic/bench-orders"
        )
        ingest = time.perf_counter() - t0
        results["ingest"] = {"seconds": round(ingest, 2), "orders_per_s": round(a.orders / ingest)}
        print(f"ingest: {a.orders:,} orders in {ingest:.1f} s", flush=True)
        parquet = str(tmp / "parquet")
        write_parquet(broker, "bench.orders", parquet)
        opts = {
            "url": broker.url,
            "queue": "bench.orders",
            "parquet": parquet,
            "trades_destination": "/queue/bench.trades",
            "max_rows": a.max_rows_per_batch or a.orders + 1,
            "symbols": a.symbols,
        }
        if audit:
            opts["trades_queue"] = "bench.trades"
        kopts: dict[str, Any] = {}
        if any(s.startswith(KAFKA) for s in steps):
            kafka, kopts, results["kafka"] = start_kafka_peer(tmp / "kafka", a, opts)
            results["guarantees"] = GUARANTEES

        def trades_total() -> int:
            return sum(log_view(http, "bench.trades")["end"].values())

        def broker_cpu(step: str) -> float:
            """CPU seconds so far of the broker a step uses."""
            if step.startswith(KAFKA):
                return float(kafka.cpu_s())
            return _proc_times()[broker.proc.pid][1]

        kafka_runs = 0  # names each run's own trades topic and audit directory
        for step in steps:
            runs = []
            for attempt in range(1 + a.retry_noisy):
                trades_before = trades_total()
                trades_view = log_view(http, "bench.trades")
                kafka_runs += 1
                trades_topic = f"trades-{kafka_runs}"
                idle = wait_idle(a.idle_cores, a.idle_wait)
                broker_cpu0 = broker_cpu(step)
                with Foreign() as foreign:
                    if step == "latency":
                        res = measure_latency(broker, opts, a.bursts, a.burst)
                    elif step.startswith(KAFKA):
                        res = run_kafka_step(step, kafka, {**kopts, "trades_topic": trades_topic})
                    elif step.startswith(CLUSTER):
                        if cluster is None:
                            cluster = LocalCluster(a.workers, directory=tmp / "cluster").start()
                        res = run_in_process(
                            step.removeprefix(CLUSTER), {**opts, "master": cluster.master_url}
                        )
                        res["kind"] = step
                    else:
                        res = run_in_process(step, opts)
                # the broker's CPU over the cold and the warm run together
                res["broker_cpu_s"] = round(broker_cpu(step) - broker_cpu0, 1)
                res["foreign_cores_before"] = idle
                res["foreign_cores_during"] = foreign.cores
                if audit and step == "kafka-matching" and "error" not in res:
                    res["audit"] = run_in_process(
                        "audit",
                        {
                            **kopts,
                            "output": str(tmp / f"audit-{kafka_runs}"),
                            "trades_topic": trades_topic,
                        },
                    )
                elif audit and step == "matching":
                    out = tmp / f"audit-{kafka_runs}"
                    out.mkdir()
                    (out / "orders").symlink_to(parquet)
                    write_parquet(
                        broker,
                        "bench.trades",
                        str(out / "trades"),
                        start=trades_view["end"],
                        end=res.pop("cold_trades_end"),
                    )
                    res["audit"] = run_in_process("audit", {"output": str(out), "orders": a.orders})
                if step.endswith("matching") and not step.startswith(KAFKA):
                    # cold and warm run each published every trade once (exactly once)
                    res["trades_published_per_run"] = (trades_total() - trades_before) / 2
                    view = log_view(http, "bench.trades")  # free them again
                    http.post_json("/api/logs/bench.trades/commit", view["end"])
                runs.append(res)
                print(step, "attempt", attempt + 1, json.dumps(res), flush=True)
                if foreign.cores <= a.idle_cores:
                    break
            # the least disturbed run counts; the others are kept for the record
            best = dict(min(runs, key=lambda r: r["foreign_cores_during"]))
            best["attempts"] = [
                {
                    k: r.get(k)
                    for k in ("query_s", "rows_per_s", "e2e_p50_s", "foreign_cores_during")
                    if k in r
                }
                for r in runs
            ]
            results[step] = best
            print(step, json.dumps(results[step]), flush=True)
        if kafka is not None:
            results["s1_ratios"] = s1_ratios(results)
    finally:
        if cluster is not None:
            cluster.stop()
        if kafka is not None:
            kafka.stop()
        broker.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    if a.out:
        Path(a.out).write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
