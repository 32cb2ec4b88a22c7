"""Spark's own anchor: the matching pipeline over Apache Kafka beside Shoal (bench.spark --kafka).

The Kafka peer (bench/peers/kafka.py) is fetched with Maven and needs Java;
Spark's Kafka connector comes from Maven Central through spark.jars.packages.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # bench/

from bench import spark as bench_spark  # noqa: E402

from skips import needs_tools  # noqa: E402

needs_java = needs_tools("java", "mvn", remedy="make sysdeps: Kafka and its Spark connector")


def test_kafka_steps_follow_their_shoal_twins() -> None:
    assert bench_spark.kafka_steps(["source", "matching", "latency"], kafka=True) == [
        "source",
        "matching",
        "kafka-matching",
        "latency",
        "kafka-latency",
    ]
    assert bench_spark.kafka_steps(["source"], kafka=True) == ["source", "kafka-matching"]
    assert bench_spark.kafka_steps(["kafka-matching"], kafka=True) == ["kafka-matching"]
    assert bench_spark.kafka_steps(["matching"], kafka=False) == ["matching"]


def test_s1_ratios_above_one_mean_shoal_ahead() -> None:
    ratios = bench_spark.s1_ratios(
        {
            "matching": {"rows_per_s": 300, "warm_rows_per_s": 400},
            "kafka-matching": {"rows_per_s": 100, "warm_rows_per_s": 200},
            "latency": {"e2e_p50_s": 0.5},
            "kafka-latency": {"e2e_p50_s": 1.0},
        }
    )
    assert ratios == {"rows_per_s_cold": 3.0, "rows_per_s_warm": 2.0, "e2e_p50": 2.0}
    assert bench_spark.s1_ratios({})["rows_per_s_cold"] is None


@needs_java
@pytest.mark.slow
def test_kafka_peer_starts_lists_topics_and_stops(tmp_path: Path) -> None:
    from bench.peers.kafka import create_topics, list_topics, metadata, start_kafka

    h = start_kafka(tmp_path / "kafka", partitions=3)
    try:
        brokers, topics = metadata(h.ports["kafka"])
        assert brokers == 1
        assert topics == list_topics(h.ports["kafka"]) == {}
        create_topics(h.ports["kafka"], ["orders", "trades"])
        assert list_topics(h.ports["kafka"]) == {"orders": 3, "trades": 3}
    finally:
        h.stop()
    assert not h.alive()


@needs_java
@pytest.mark.slow
@pytest.mark.spark
def test_matching_over_kafka_end_to_end(tmp_path: Path) -> None:
    """A tiny run over Kafka: the orders keep each symbol's order, the trades pass the audit."""
    pytest.importorskip("pyspark")
    out = tmp_path / "spark-kafka.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench.spark", "--orders", "400", "--symbols", "4"]
        + ["--buckets", "2", "--steps", "kafka-matching", "--idle-cores", "99"]
        + ["--retry-noisy", "0", "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads(out.read_text())
    run = results["kafka-matching"]
    assert "error" not in run, run
    assert run["rows"] == 400
    audit = run["audit"]
    assert audit["ok"], audit
    assert audit["orders"]["out_of_order"] == 0
    assert audit["archived_trades"] == audit["reference_trades"] > 0
    assert results["kafka"]["partitions"] == 2
    assert "at least once" in results["guarantees"]["kafka"]
