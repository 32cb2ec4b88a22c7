"""What a Kafka-source user expects of format("shoal"): options checked at load(),
commits without a listener, errors in one line, batch read and write, Kafka aliases."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark")
from pyspark.errors import PySparkException
from spark_support import create_log_queue, get_json, log_view, publish, read_log, wait_for

from shoal.spark import explain
from shoal.spark.jobs import ship_package

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(900)]


def grouped(n: int, groups: int, start: int = 0) -> list[tuple[str, int, bytes]]:
    seqs = [0] * groups
    out = []
    for i in range(start + n):
        seqs[i % groups] += 1
        if i >= start:
            out.append((f"G{i % groups}", seqs[i % groups], f"m{i}".encode()))
    return out


def load_error(spark, **options: str) -> str:
    reader = spark.readStream.format("shoal")
    for k, v in options.items():
        reader = reader.option(k, v)
    with pytest.raises(PySparkException) as err:
        reader.load()
    return explain(err.value)


def test_options_are_checked_at_load(spark) -> None:
    line = load_error(spark, subscribe="orders")
    assert "'subscribe'" in line and 'option("queue"' in line
    line = load_error(spark, url="http://127.0.0.1:1")
    assert line.startswith("shoal source:") and '"queue" is required' in line
    line = load_error(spark, queue="q", startingOffsets="earlist")
    assert "'startingOffsets'" in line and "earliest, latest" in line and "'earlist'" in line
    line = load_error(spark, queue="q", maxRowsPerBach="5")
    assert "did you mean 'maxRowsPerBatch'" in line
    line = load_error(spark, queue="q", maxOffsetsPerTrigger="5", maxRowsPerBatch="6")
    assert "maxOffsetsPerTrigger" in line and "different values" in line
    line = load_error(spark, queue="q", fetchRows="many")
    assert "'fetchRows' must be an integer" in line
    # the same checks for a batch read
    with pytest.raises(PySparkException) as err:
        spark.read.format("shoal").option("subscribe", "x").load()
    assert "'subscribe'" in explain(err.value)


def test_stream_commits_without_listener_even_when_idle_and_honours_kafka_alias(
    spark, broker, tmp_path
) -> None:
    url = broker.http_url
    create_log_queue(url, "idle", buckets=2)
    publish(broker.stomp_port, "/queue/idle", grouped(300, 7))
    df = (
        spark.readStream.format("shoal")
        .option("url", url)
        .option("queue", "idle")
        .option("maxOffsetsPerTrigger", "100")
        .load()
    )
    q = (
        df.writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(processingTime="100 milliseconds")
        .start()
    )
    try:
        # the last batch is committed while the query sits idle: nothing trails behind
        wait_for(lambda: log_view(url, "idle")["lag"] == 0, timeout=120)
        sizes = [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]
        assert sum(sizes) == 300 and max(sizes) <= 100  # maxOffsetsPerTrigger = maxRowsPerBatch
        publish(broker.stomp_port, "/queue/idle", grouped(50, 7, start=300))
        wait_for(lambda: sum(log_view(url, "idle")["committed"].values()) == 350, timeout=120)
    finally:
        q.stop()


def test_broker_outage_is_one_line_naming_the_address(spark, tmp_path) -> None:
    from support import free_port

    port = free_port()
    df = (
        spark.readStream.format("shoal")
        .option("url", f"http://127.0.0.1:{port}")
        .option("queue", "q")
        .option("retrySeconds", "0.5")
        .load()
    )
    q = df.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "ck")).start()
    with pytest.raises(PySparkException):
        q.awaitTermination(120)
    line = explain(q.exception())
    assert "\n" not in line
    assert f"127.0.0.1:{port}" in line and "start the broker" in line, line


def test_batch_read_of_an_offset_range(spark, broker) -> None:
    url = broker.http_url
    create_log_queue(url, "hist", buckets=2)
    sent = grouped(400, 9)
    publish(broker.stomp_port, "/queue/hist", sent)
    df = spark.read.format("shoal").option("url", url).option("queue", "hist").load()
    pdf = df.toPandas()
    assert sorted(pdf["body"]) == sorted(b for _, _, b in sent)
    assert not pdf.duplicated(["bucket", "offset"]).any()
    # a range: bucket 0 from offset 10 to 20, bucket 1 from 5 to its end
    end = log_view(url, "hist")["end"]
    part = (
        spark.read.format("shoal")
        .option("url", url)
        .option("queue", "hist")
        .option("startingOffsets", '{"0": 10, "1": 5}')
        .option("endingOffsets", '{"0": 20}')
        .option("partitionRows", "3")
        .load()
        .toPandas()
    )
    got = sorted(zip(part["bucket"], part["offset"], strict=True))
    assert got == [(0, o) for o in range(10, 20)] + [(1, o) for o in range(5, end["1"])]
    assert log_view(url, "hist")["lag"] == 400  # a batch read never commits
    with pytest.raises(PySparkException) as err:
        (
            spark.read.format("shoal")
            .option("url", url)
            .option("queue", "hist")
            .option("endingOffsets", f'{{"0": {end["0"] + 5}}}')
            .load()
            .count()
        )
    assert "past the end" in explain(err.value)


def test_batch_write_exactly_once_and_modes(spark, broker) -> None:
    url = broker.http_url
    create_log_queue(url, "bw", buckets=2)
    df = spark.createDataFrame(
        [(f"K{i % 4}", i, f"v{i}") for i in range(50)], "key string, n bigint, text string"
    )

    def write(mode: str | None = "append", **opts: str) -> None:
        w = (
            df.write.format("shoal")
            .option("url", url)
            .option("destination", "/queue/bw")
            .option("groupColumn", "key")
            .option("seqColumn", "n")
            .option("bodyColumn", "text")
        )
        for k, v in opts.items():
            w = w.option(k, v)
        if mode is not None:
            w = w.mode(mode)
        w.save()

    write()
    got = read_log(url, "bw")
    assert sorted(got["body"]) == sorted(f"v{i}".encode() for i in range(50))
    # foreachBatch's pattern: the same (sinkId, batchId) twice is published once
    write(sinkId="backfill", batchId="7")
    write(sinkId="backfill", batchId="7")
    assert sum(log_view(url, "bw")["end"].values()) == 100
    assert get_json(url + "/api/sinks")["staged_handles"] == 0
    with pytest.raises(PySparkException) as err:
        write("overwrite")
    assert 'mode("append")' in explain(err.value)
    with pytest.raises(PySparkException) as err:
        write(None)  # Spark's default, ErrorIfExists: refused by Spark before the source runs
    assert "UNSUPPORTED_DATA_SOURCE_SAVE_MODE" in str(err.value)
    with pytest.raises(PySparkException) as err:
        write(topic="x")
    assert 'option("destination"' in explain(err.value)


def test_update_mode_through_foreach_batch_is_exactly_once(spark, broker, tmp_path) -> None:
    """The documented pattern for update/complete output: foreachBatch + a batch write."""
    url = broker.http_url
    create_log_queue(url, "clicks", buckets=2)
    create_log_queue(url, "counts", buckets=2)
    publish(broker.stomp_port, "/queue/clicks", grouped(200, 5))
    counts = (
        spark.readStream.format("shoal")
        .option("url", url)
        .option("queue", "clicks")
        .option("maxRowsPerBatch", "80")
        .load()
        .groupBy("group_id")
        .count()
        .selectExpr("group_id", "cast(count as string) as body")
    )

    def publish_batch(batch, batch_id: int) -> None:
        (
            batch.write.format("shoal")
            .mode("append")
            .option("url", url)
            .option("destination", "/queue/counts")
            .option("sinkId", "counts-job")
            .option("batchId", str(batch_id))
            .save()
        )

    ck = str(tmp_path / "ck")
    q = (
        counts.writeStream.outputMode("update")
        .foreachBatch(publish_batch)
        .option("checkpointLocation", ck)
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination(240)
    assert q.exception() is None
    batches = [p["batchId"] for p in q.recentProgress if p["numInputRows"]]
    assert len(batches) >= 3
    # a replay of the last batch (a restart) is dropped by the broker
    publish_batch(
        spark.createDataFrame([("G0", "999")], "group_id string, body string"), max(batches)
    )
    got = read_log(url, "counts")
    assert b"999" not in set(got["body"])
    last = got.sort_values("offset").groupby("group_id")["body"].last()
    assert {g: int(b) for g, b in last.items()} == {f"G{i}": 40 for i in range(5)}


def test_shipped_package_lives_in_the_session_dir(spark, tmp_path) -> None:
    import tempfile
    from pathlib import Path

    from pyspark import SparkFiles

    before = set(Path(tempfile.gettempdir()).glob("shoal-pyfiles-*"))
    path = Path(ship_package(spark))
    assert path.is_file() and Path(SparkFiles.getRootDirectory()) in path.parents
    assert set(Path(tempfile.gettempdir()).glob("shoal-pyfiles-*")) == before
