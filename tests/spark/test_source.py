"""The shoal streaming source against a real broker, in one shared local SparkSession."""

from __future__ import annotations

import pickle
import time

import pandas as pd
import pytest

pytest.importorskip("pyspark")
from spark_support import create_log_queue, log_view, publish, wait_for

from shoal.broker.hashing import bucket_of
from shoal.spark.datasource import ShoalStreamReader, plan_end

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(900)]


def items(n: int, groups: int, start: int = 0):
    seqs = [0] * groups
    out = []
    for i in range(start + n):
        g = i % groups
        seqs[g] += 1
        if i >= start:
            out.append((f"G{g:02d}", seqs[g], f"m{i}".encode()))
    return out


def test_plan_end_honours_read_max_rows() -> None:
    start = {"0": 0, "1": 10, "2": 5}
    ends = {"0": 100, "1": 12, "2": 5}
    assert plan_end(start, ends, None) == ends
    got = plan_end(start, ends, 30)
    assert sum(got[b] - start[b] for b in got) == 30 and got["1"] == 12 and got["2"] == 5
    assert plan_end(start, ends, 1000) == ends
    assert plan_end(start, start, 10) == start
    # several queues: the limit is spread over every (queue, bucket)
    two = {("a", "0"): 0, ("a", "1"): 0, ("b", "0"): 0}
    got = plan_end(two, dict.fromkeys(two, 100), 30)
    assert got == dict.fromkeys(two, 10)


def test_source_reads_every_record_once_in_group_order(spark, broker, tmp_path) -> None:
    url = broker.http_url
    create_log_queue(url, "events", buckets=4)
    publish(broker.stomp_port, "/queue/events", items(3000, 30))

    df = (
        spark.readStream.format("shoal")
        .option("URL", url)  # option keys arrive lower-cased; any case works
        .option("Queue", "events")
        .option("maxRowsPerBatch", "1000")
        .option("fetchRows", "300")
        .load()
    )
    ck = str(tmp_path / "ck")
    got: list = []

    def collect(batch, batch_id) -> None:
        got.append(batch.toPandas())

    q = (
        df.writeStream.foreachBatch(collect)
        .queryName("src_test")
        .option("checkpointLocation", ck)
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination(240)
    sizes = [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]
    assert sum(sizes) == 3000 and max(sizes) <= 1000 and len(sizes) >= 3  # ReadMaxRows
    pdf = pd.concat(got, ignore_index=True)
    assert len(pdf) == 3000
    assert list(pdf.columns) == [
        "group_id",
        "group_seq",
        "bucket",
        "offset",
        "timestamp",
        "headers",
        "body",
        "queue",
    ]
    assert not pdf.duplicated(["bucket", "offset"]).any()
    for b, grp in pdf.groupby("bucket"):
        assert sorted(grp["offset"]) == list(range(len(grp)))  # dense from 0
    assert all(bucket_of(g, 4) == b for g, b in zip(pdf["group_id"], pdf["bucket"], strict=True))
    for _, grp in pdf.sort_values("offset").groupby("group_id"):
        assert grp["group_seq"].tolist() == list(range(1, len(grp) + 1))  # group order
    row = pdf.iloc[0]
    assert dict(row["headers"])["JMSXGroupID"] == row["group_id"]
    assert row["body"] == f"m{int(row['group_id'][1:]) + 30 * (row['group_seq'] - 1)}".encode()
    # the source committed the last batch by itself, no listener: nothing left to read
    wait_for(lambda: log_view(url, "events")["lag"] == 0)

    # restart on the same checkpoint: only the new records
    publish(broker.stomp_port, "/queue/events", items(500, 30, start=3000))
    got.clear()
    q2 = (
        df.writeStream.foreachBatch(collect)
        .queryName("src_test2")
        .option("checkpointLocation", ck)
        .trigger(availableNow=True)
        .start()
    )
    q2.awaitTermination(240)
    again = pd.concat(got, ignore_index=True)
    assert sorted(again["body"]) == sorted(f"m{i}".encode() for i in range(3000, 3500))
    wait_for(lambda: log_view(url, "events")["lag"] == 0)


def test_reader_pickles_without_sockets(broker) -> None:
    url = broker.http_url
    create_log_queue(url, "p", buckets=2)
    reader = ShoalStreamReader({"url": url, "queue": "p", "maxrowsperbatch": "10"})
    assert reader.initialOffset() == {"0": 0, "1": 0}  # opened a connection in this thread
    clone = pickle.loads(pickle.dumps(reader))
    assert clone.max_rows == 10
    for value in vars(clone).values():
        assert not hasattr(value, "sock") and not hasattr(value, "recv")
    assert vars(clone.http).keys() >= {"url", "host", "port"}
    assert not any(hasattr(v, "sock") for v in vars(clone.http).values())


def collect_stream(spark, ck, **options):
    """Run a stream of format("shoal") to its end (availableNow); its rows as pandas."""
    got: list = []
    reader = spark.readStream.format("shoal")
    for k, v in options.items():
        reader = reader.option(k, v)
    q = (
        reader.load()
        .writeStream.foreachBatch(lambda b, _: got.append(b.toPandas()))
        .option("checkpointLocation", str(ck))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination(240)
    assert q.exception() is None
    return pd.concat(got, ignore_index=True) if got else pd.DataFrame()


def test_several_queues_and_a_pattern_in_one_source(spark, broker, tmp_path) -> None:
    url = broker.http_url
    for name in ("t.a", "t.b", "other"):
        create_log_queue(url, name, buckets=2)
    publish(broker.stomp_port, "/queue/t.a", items(300, 6))
    publish(broker.stomp_port, "/queue/t.b", items(200, 4))
    publish(broker.stomp_port, "/queue/other", items(50, 2))

    # Kafka's subscribe "a,b": both queues, offsets per (queue, bucket), each committed
    both = collect_stream(spark, tmp_path / "ck1", url=url, queue="t.a,t.b", maxRowsPerBatch="120")
    assert sorted(both.groupby("queue").size().items()) == [("t.a", 300), ("t.b", 200)]
    assert not both.duplicated(["queue", "bucket", "offset"]).any()
    wait_for(lambda: log_view(url, "t.a")["lag"] == 0 and log_view(url, "t.b")["lag"] == 0)
    assert log_view(url, "other")["lag"] == 50

    # Kafka's subscribePattern: queues matching now, then a new one from its earliest offset
    for name in ("p.a", "p.b"):
        create_log_queue(url, name, buckets=2)
    publish(broker.stomp_port, "/queue/p.a", items(300, 6))
    publish(broker.stomp_port, "/queue/p.b", items(200, 4))
    ck = tmp_path / "ck2"
    first = collect_stream(spark, ck, url=url, queuePattern=r"p\..*")
    assert sorted(first.groupby("queue").size().items()) == [("p.a", 300), ("p.b", 200)]
    create_log_queue(url, "p.c", buckets=2)
    publish(broker.stomp_port, "/queue/p.c", items(70, 3))
    publish(broker.stomp_port, "/queue/p.a", items(10, 6, start=300))
    later = collect_stream(spark, ck, url=url, queuePattern=r"p\..*")
    assert sorted(later.groupby("queue").size().items()) == [("p.a", 10), ("p.c", 70)]
    assert sorted(later[later["queue"] == "p.a"]["body"]) == sorted(
        f"m{i}".encode() for i in range(300, 310)
    )
    wait_for(lambda: all(log_view(url, f"p.{x}")["lag"] == 0 for x in "abc"))


def test_starting_timestamp_starts_each_bucket_at_that_time(spark, broker) -> None:
    url = broker.http_url
    create_log_queue(url, "ts", buckets=3)
    publish(broker.stomp_port, "/queue/ts", items(400, 12))
    time.sleep(0.05)
    since = int(time.time() * 1000)  # every message before this was confirmed before it
    time.sleep(0.05)
    publish(broker.stomp_port, "/queue/ts", items(250, 12, start=400))
    base = spark.read.format("shoal").option("url", url).option("queue", "ts")
    got = base.option("startingTimestamp", str(since)).load().toPandas()
    assert sorted(got["body"]) == sorted(f"m{i}".encode() for i in range(400, 650))

    future = str(since + 3_600_000)
    with pytest.raises(Exception, match="no message at or after startingTimestamp"):
        base.option("startingTimestamp", future).load().count()
    assert (
        base.option("startingTimestamp", future)
        .option("startingOffsetsByTimestampStrategy", "latest")
        .load()
        .count()
        == 0
    )


def test_a_batch_read_of_nothing_is_empty(spark, broker) -> None:
    url = broker.http_url
    create_log_queue(url, "none", buckets=2)
    df = spark.read.format("shoal").option("url", url).option("queue", "none").load()
    assert df.count() == 0  # Spark reads one InputPartition(None) when there are none
