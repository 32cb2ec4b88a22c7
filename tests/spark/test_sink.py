"""The exactly-once shoal sink against a real broker."""

from __future__ import annotations

import pyarrow as pa
import pytest

pytest.importorskip("pyspark")
from pyspark.sql.types import (
    BinaryType,
    LongType,
    StringType,
    StructField,
    StructType,
)
from spark_support import (
    create_log_queue,
    get_json,
    log_view,
    publish,
    read_log,
    wait_for,
)

from shoal.spark.client import BrokerHttpError
from shoal.spark.datasource import SCHEMA, ShoalCommitMessage, ShoalStreamWriter

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(900)]


def test_sink_publishes_every_row_once_in_group_order(spark, broker, tmp_path) -> None:
    url = broker.http_url
    create_log_queue(url, "in", buckets=4)
    create_log_queue(url, "out", buckets=4)
    seqs: dict[str, int] = {}
    sent = []
    for i in range(2000):
        g = f"K{i % 25}"
        seqs[g] = seqs.get(g, 0) + 1
        sent.append((g, seqs[g], f"v{i}".encode()))
    publish(broker.stomp_port, "/queue/in", sent)

    src = (
        spark.readStream.format("shoal")
        .option("url", url)
        .option("queue", "in")
        .option("maxRowsPerBatch", "700")
        .load()
    )
    out = src.selectExpr("group_id as key", "group_seq as n", "upper(cast(body as string)) as text")
    q = (
        out.writeStream.format("shoal")
        .option("url", url)
        .option("destination", "/queue/out")
        .option("groupColumn", "key")
        .option("seqColumn", "n")
        .option("bodyColumn", "text")
        .option("stageRows", "150")  # several staging chunks per task
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination(240)
    assert q.exception() is None
    batches = [p["batchId"] for p in q.recentProgress if p["numInputRows"]]
    assert len(batches) >= 3

    got = read_log(url, "out")
    assert len(got) == 2000
    assert sorted(zip(got["group_id"], got["group_seq"], got["body"], strict=True)) == sorted(
        (g, s, b.upper()) for g, s, b in sent
    )
    for _, grp in got.sort_values("offset").groupby("group_id"):
        assert grp["group_seq"].tolist() == list(range(1, len(grp) + 1))
    sinks = get_json(url + "/api/sinks")
    assert sinks["sinks"][str(q.id)]["last_batch_id"] == max(batches)
    assert sinks["staged_handles"] == 0

    # Spark replaying a batch after a crash: its commit is dropped, nothing doubles.
    schema = StructType(
        [
            StructField("group_id", StringType()),
            StructField("group_seq", LongType()),
            StructField("body", BinaryType()),
        ]
    )
    writer = ShoalStreamWriter(
        {"url": url, "destination": "/queue/out", "groupcolumn": "group_id", "sinkid": str(q.id)},
        schema,
    )
    batch = pa.RecordBatch.from_pydict({"group_id": ["K0"], "group_seq": [999], "body": [b"again"]})
    msg = writer.write(iter([batch]))
    assert msg.rows == 1 and msg.handles
    writer.commit([msg, None], max(batches))
    assert sum(log_view(url, "out")["end"].values()) == 2000
    assert get_json(url + "/api/sinks")["staged_handles"] == 0
    # abort discards the staged rows
    msg = writer.write(iter([batch]))
    writer.abort([msg], max(batches) + 1)
    assert get_json(url + "/api/sinks")["staged_handles"] == 0
    # the next batch id goes through, once
    msg = writer.write(iter([batch]))
    writer.commit([msg], max(batches) + 1)
    writer.commit([msg], max(batches) + 1)
    assert sum(log_view(url, "out")["end"].values()) == 2001


def test_lost_stagings_fail_the_commit_loudly(broker) -> None:
    url = broker.http_url
    writer = ShoalStreamWriter({"url": url, "destination": "/queue/x", "sinkId": "s"}, SCHEMA)
    lost = ShoalCommitMessage("s", 0, ["never-staged"], 1)
    with pytest.raises(BrokerHttpError) as err:
        writer.commit([lost], 0)
    assert err.value.status == 409 and "gone" in err.value.message
    wait_for(lambda: get_json(url + "/api/sinks")["sinks"] == {})


def test_published_batch_stays_a_duplicate_across_broker_restart(broker) -> None:
    url = broker.http_url
    create_log_queue(url, "o", buckets=2)
    schema = StructType([StructField("group_id", StringType()), StructField("body", BinaryType())])
    writer = ShoalStreamWriter({"url": url, "destination": "/queue/o", "sinkId": "q1"}, schema)
    batch = pa.RecordBatch.from_pydict({"group_id": ["A", "B"], "body": [b"1", b"2"]})
    writer.commit([writer.write(iter([batch]))], 4)
    broker.restart()  # stagings are gone, the published batch ids are not
    writer.commit([writer.write(iter([batch]))], 4)  # a replay of batch 4: dropped
    assert sum(log_view(url, "o")["end"].values()) == 2
    assert get_json(url + "/api/sinks")["sinks"]["q1"]["last_batch_id"] == 4
    # a batch staged before the restart cannot be published after it
    msg = writer.write(iter([batch]))
    broker.restart()
    with pytest.raises(BrokerHttpError) as err:
        writer.commit([msg], 5)
    assert err.value.status == 409
    writer.commit([writer.write(iter([batch]))], 5)  # re-run: goes through once
    assert sum(log_view(url, "o")["end"].values()) == 4
