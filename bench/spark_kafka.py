"""The matching pipeline over Apache Kafka, for the Spark figures' anchor (S1 over Kafka).

The same job as over Shoal (``jobs.parsed_orders`` -> ``jobs.matched_trades``),
with Spark's own Kafka connector (``spark-sql-kafka-0-10``) at both ends:

* orders: topic ``orders``, key = the symbol (so a symbol's orders stay in
  one partition, in order: Kafka's way to per-group order), value = the same
  body as over Shoal, header ``group_seq`` = the symbol's order number;
* trades: a topic, key = the symbol, value = the trade's body, header
  ``trade_seq``.

Spark's Kafka sink is at-least-once: a micro-batch retried after a failure
writes its trades again. The per-group state itself is exactly once on both
brokers (``apply_in_group_order`` drops rows at or below the last offset
applied), so a duplicate can only come from the sink.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from shoal.spark import jobs

# spark-sql-kafka-0-10 for Scala 2.13 at the installed Spark's version when Maven
# Central has it; 4.2.0 is the newest 4.x there and runs on Spark 4.3's API.
CONNECTOR = "org.apache.spark:spark-sql-kafka-0-10_2.13:{version}"
CONNECTOR_FALLBACK = "4.2.0"
ORDERS_TOPIC = "orders"
LATENCY_TOPICS = ("lat-orders", "lat-trades")


def connector(version: str | None = None) -> str:
    return CONNECTOR.format(version=version or CONNECTOR_FALLBACK)


def build_spark(opts: dict[str, Any], app: str) -> Any:
    """A session as ``jobs.build_spark`` builds it, with the Kafka connector on its class path."""
    return jobs.build_spark(
        opts.get("master", "local[2]"),
        app,
        shuffle_partitions=4,
        driver_memory="4g",
        conf={"spark.jars.packages": opts["kafka_connector"]},
    )


def _header(name: str, column: str) -> str:
    return (
        f"array(named_struct('key', '{name}', 'value', cast(cast({column} as string) as binary)))"
    )


def write_orders(spark: Any, bootstrap: str, topic: str, orders: list[Any]) -> None:
    """One batch write of ``orders`` (generate_orders tuples) to ``topic``; returns when acked."""
    import pandas as pd

    from shoal.spark.matching import encode_order

    pdf = pd.DataFrame(
        {
            "symbol": [o[0] for o in orders],
            "group_seq": [o[1] for o in orders],
            "body": [encode_order(o[2], o[3], o[4], o[5]).decode() for o in orders],
        }
    )
    (
        spark.createDataFrame(pdf, "symbol string, group_seq bigint, body string")
        .selectExpr(
            "symbol as key", "body as value", _header("group_seq", "group_seq") + " as headers"
        )
        # one task, so one producer writes every symbol's orders in their order (several
        # tasks would interleave a symbol's orders in its partition)
        .coalesce(1)
        .write.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", topic)
        .save()
    )


def load_orders(opts: dict[str, Any]) -> dict[str, Any]:
    """Measure kind ``kafka-load``: the bench's orders into the orders topic."""
    from shoal.spark.matching import generate_orders

    spark = build_spark(opts, "shoal-bench-kafka-load")
    orders = list(generate_orders(opts["orders"], opts["symbols"]))
    t0 = time.perf_counter()
    for i in range(0, len(orders), 100_000):  # bounded driver memory per write
        write_orders(spark, opts["kafka"], ORDERS_TOPIC, orders[i : i + 100_000])
    seconds = time.perf_counter() - t0
    spark.stop()
    return {
        "kind": "kafka-load",
        "seconds": round(seconds, 2),
        "orders_per_s": round(len(orders) / seconds),
    }


def _subscribe(reader: Any, bootstrap: str, topic: str) -> Any:
    """A (stream or batch) reader of ``topic`` from its first record."""
    return (
        reader.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
    )


def orders_source(spark: Any, bootstrap: str, topic: str, max_rows: int) -> Any:
    """The orders topic as the log columns ``jobs.parsed_orders`` reads (offset orders a symbol)."""
    return (
        _subscribe(spark.readStream, bootstrap, topic)
        .option("maxOffsetsPerTrigger", str(max_rows))
        .load()
        .selectExpr("cast(key as string) as group_id", "offset", "value as body")
    )


def matching_writer(spark: Any, bootstrap: str, orders: str, topic: str, max_rows: int) -> Any:
    """``orders`` topic -> matching -> trades ``topic`` (Spark's Kafka sink: at least once)."""
    src = orders_source(spark, bootstrap, orders, max_rows)
    trades = jobs.matched_trades(jobs.parsed_orders(src))
    return (
        trades.selectExpr(
            "symbol as key", "body as value", _header("trade_seq", "trade_seq") + " as headers"
        )
        .writeStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", topic)
    )


def trades_writer(spark: Any, opts: dict[str, Any], topic: str) -> Any:
    """The bench's matching query over Kafka, writing to ``topic``."""
    return matching_writer(spark, opts["kafka"], ORDERS_TOPIC, topic, opts["max_rows"])


def read_topic(spark: Any, bootstrap: str, topic: str, seq_header: str) -> Any:
    """A topic as the pipeline archive's columns: group_id, group_seq, bucket, offset, body."""
    return (
        _subscribe(spark.read, bootstrap, topic)
        .option("endingOffsets", "latest")
        .option("includeHeaders", "true")
        .load()
        .selectExpr(
            "cast(key as string) as group_id",
            "cast(cast(filter(headers, h -> h.key = '"
            + seq_header
            + "')[0].value as string) as bigint) as group_seq",
            "cast(partition as bigint) as bucket",
            "offset",
            "cast(value as string) as body",
            "timestamp",
        )
    )


def audit(opts: dict[str, Any]) -> dict[str, Any]:
    """Measure kind ``audit``: ``shoal.spark.audit`` over an archive of orders and trades.

    Over Shoal the driver has written the archive from the log queues; over
    Kafka (``opts["kafka"]`` set) the topics are copied into it here first.
    """
    from shoal.spark.audit import audit as check

    out = opts["output"]
    if opts.get("kafka"):
        spark = build_spark(opts, "shoal-bench-kafka-audit")
        for name, topic, header in (
            ("orders", ORDERS_TOPIC, "group_seq"),
            ("trades", opts["trades_topic"], "trade_seq"),
        ):
            read_topic(spark, opts["kafka"], topic, header).drop("timestamp").write.parquet(
                str(Path(out) / name)
            )
    else:
        spark = jobs.build_spark("local[2]", "shoal-bench-audit", shuffle_partitions=4)
    try:
        report = check(spark, out, opts["orders"])
    finally:
        spark.stop()
    return {"kind": "audit", **report}


def latency(opts: dict[str, Any]) -> dict[str, Any]:
    """Measure kind ``kafka-latency``: as ``bench.spark.measure_latency`` does over Shoal.

    A running query (processingTime 0) from a topic of its own to a trades
    topic; bursts of orders every 2 s, each a batch write that returns when
    Kafka acknowledged it. The broker stamps every record with its append time
    (``log.message.timestamp.type=LogAppendTime``), so a burst's end-to-end
    latency is the append time of its last trade minus the write's return: the
    moment the trade is readable from the topic, not yet the moment a consumer
    has it (which Shoal's figure includes).
    """
    from shoal.spark.matching import generate_orders

    bursts, burst = opts["bursts"], opts["burst"]
    orders_topic, trades_topic = LATENCY_TOPICS
    spark = build_spark(opts, "shoal-bench-kafka-latency")
    orders = list(generate_orders(bursts * burst + 2000, opts["symbols"], seed=11))
    # the topic exists before the query starts, so it reads from its first order
    write_orders(spark, opts["kafka"], orders_topic, orders[:2000])
    import tempfile

    q = (
        matching_writer(spark, opts["kafka"], orders_topic, trades_topic, 100_000)
        .option("checkpointLocation", tempfile.mkdtemp(prefix="shoal-bench-kafka-lat-"))
        .trigger(processingTime="0 seconds")
        .start()
    )

    def consumed() -> int:
        """Orders the query has read so far (0 while it cannot tell)."""
        try:
            end = q.lastProgress["sources"][0]["endOffset"] or {}
            if isinstance(end, str):
                end = json.loads(end)
            return sum(int(v) for parts in end.values() for v in parts.values())
        except (TypeError, KeyError, IndexError, ValueError):
            return 0

    sent_at: list[tuple[int, int, float]] = []
    try:
        time.sleep(15)  # warm-up: the first batch of a run costs several seconds extra
        pos = 2000
        for _ in range(bursts):
            chunk = orders[pos : pos + burst]
            pos += burst
            write_orders(spark, opts["kafka"], orders_topic, chunk)
            t_sent = time.time()
            sent_at.append((chunk[0][2], chunk[-1][2], t_sent))
            # wait until the query has run a batch past the burst (at most 10 s)
            deadline = time.perf_counter() + 10
            while time.perf_counter() < deadline and consumed() < pos:
                time.sleep(0.02)
            while time.perf_counter() < deadline and q.status["isTriggerActive"]:
                time.sleep(0.02)
            time.sleep(max(0.0, 2.0 - (time.time() - t_sent)))
        time.sleep(2)
    finally:
        q.stop()
    rows = read_topic(spark, opts["kafka"], trades_topic, "trade_seq").select("body", "timestamp")
    appended: dict[int, float] = {}
    for r in rows.collect():
        appended[int(r["body"].split(",")[0])] = r["timestamp"].timestamp()
    spark.stop()
    results = []
    for first, last, t_sent in sent_at:
        mine = [t for a, t in appended.items() if first <= a <= last]
        if mine:
            results.append(max(mine) - t_sent)
    return latency_summary("kafka-latency", results, burst)


def latency_summary(kind: str, results: list[float], burst: int) -> dict[str, Any]:
    """A latency step's record from its bursts' end-to-end seconds."""
    import statistics

    results = sorted(results)
    return {
        "kind": kind,
        "bursts": len(results),
        "burst_orders": burst,
        "e2e_p50_s": round(statistics.median(results), 3) if results else None,
        "e2e_max_s": round(max(results), 3) if results else None,
        "e2e_min_s": round(min(results), 3) if results else None,
    }


def section(path: Path, data: dict[str, Any]) -> list[str]:
    """docs/benchmarks.md's S1 section: the latest run of matching over Shoal and over Kafka."""
    from bench.spark import run_lines  # bench.spark imports this module

    note = (data.get("note") or "").split("\n\n")[0]
    return [*run_lines(path.name, data)[:-1], *(["", f"*{note}*"] if note else [])]
