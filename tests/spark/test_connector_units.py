"""The connector's checks and messages without a SparkSession: options, one-line
errors, failOnDataLoss, the pipeline's progress totals."""

from __future__ import annotations

import io
import time

import pytest

from shoal.spark import explain
from shoal.spark.client import BrokerHttp, BrokerUnavailable
from shoal.spark.options import ShoalOptionError, validate_read, validate_write
from shoal.spark.progress import Progress


def refused(options: dict[str, str], write: bool = False) -> str:
    with pytest.raises(ShoalOptionError) as err:
        (validate_write if write else validate_read)(options)
    return str(err.value)


def test_kafka_options_are_refused_with_the_shoal_one_or_aliased() -> None:
    assert 'option("queue", "<log queue>[,<log queue>...]")' in refused({"subscribe": "t"})
    assert 'option("queuePattern"' in refused({"subscribepattern": "t.*"})
    assert 'option("url"' in refused({"kafka.bootstrap.servers": "h:9092"})
    assert "Kafka client option" in refused({"queue": "q", "kafka.security.protocol": "SSL"})
    assert 'option("destination"' in refused({"topic": "t"}, write=True)
    opts = validate_read(
        {
            "queue": "q",
            "maxoffsetspertrigger": "9",
            "failondataloss": "false",
            "includeheaders": "true",
        }
    )
    assert opts["maxrowsperbatch"] == "9" and opts["failondataloss"] == "false"
    # the same value under both names is fine
    assert (
        validate_read({"queue": "q", "maxoffsetspertrigger": "9", "maxrowsperbatch": "9"})[
            "maxrowsperbatch"
        ]
        == "9"
    )


def test_offsets_values_name_the_allowed_ones() -> None:
    assert "earliest, latest or JSON" in refused({"queue": "q", "startingoffsets": "first"})
    assert "'endingOffsets' must be latest or JSON" in refused(
        {"queue": "q", "endingoffsets": "earliest"}
    )
    assert "must be" in refused({"queue": "q", "startingoffsets": '{"0": -1}'})
    ok = validate_read({"queue": "q", "startingoffsets": '{"0": 3}', "endingoffsets": "LATEST"})
    assert ok["startingoffsets"] == '{"0": 3}' and ok["endingoffsets"] == "latest"
    assert "required" in refused({}, write=False) and "required" in refused({}, write=True)
    assert "unknown option 'destinaton'; did you mean 'destination'" in refused(
        {"destinaton": "/queue/x"}, write=True
    )


def test_several_queues_a_pattern_and_a_timestamp_are_checked_at_load() -> None:
    assert "not both" in refused({"queue": "a", "queuepattern": "a.*"})
    assert "empty name" in refused({"queue": "a,,b"})
    assert "not a regular expression" in refused({"queuepattern": "orders.("})
    assert "milliseconds since the epoch" in refused(
        {"queue": "q", "startingtimestamp": "yesterday"}
    )
    assert "must be error or latest, not 'earliest'" in refused(
        {"queue": "q", "startingoffsetsbytimestampstrategy": "earliest"}
    )
    ok = validate_read(
        {
            "queuepattern": r"orders\..*",
            "startingtimestamp": "1700000000000",
            "startingoffsets": '{"orders.a": {"0": 5}, "orders.b": {"1": 0}}',
        }
    )
    assert ok["startingoffsetsbytimestampstrategy"] == "error"
    assert validate_read({"queue": "q", "startingoffsets": "{}"})["startingoffsets"] == "{}"
    assert "several queues" in refused({"queue": "a,b", "startingoffsets": '{"a": {"0": -1}}'})


SPARK_TEXT = """[STREAM_FAILED] Query [id = 1, runId = 2] terminated with exception: \
[PYTHON_STREAMING_DATA_SOURCE_RUNTIME_ERROR] Failed when Python streaming data source perform \
commit: Traceback (most recent call last):
  File "x.py", line 1, in commit
shoal.spark.datasource.SinkCommitFailed: shoal sink: batch 4 of sink 'q1' was not published: \
409 conflict: sink 'q1' batch 4: 2 staged handle(s) are gone (broker restarted or stagings \
collected), e.g. 'h'; re-run the batch; the query fails and, restarted from its checkpoint, \
re-runs the batch (exactly once)
 SQLSTATE: 38000
\tat org.apache.spark.sql.errors.QueryExecutionErrors$.x(QueryExecutionErrors.scala:1)
"""


def test_explain_finds_the_connector_line_in_a_spark_error_whole() -> None:
    line = explain(SPARK_TEXT)
    assert line.startswith("shoal sink: batch 4") and line.endswith("(exactly once)")
    assert "re-run the batch" in line and "\n" not in line
    other = "Traceback (most recent call last):\n  File 'y'\nZeroDivisionError: division by zero\n"
    assert explain(other) == "ZeroDivisionError: division by zero"
    assert explain(RuntimeError("plain")) == "plain"


def test_broker_outage_message_names_host_port_and_what_to_do() -> None:
    from support import free_port

    port = free_port()
    with pytest.raises(BrokerUnavailable) as err:
        BrokerHttp(f"http://127.0.0.1:{port}", retry_seconds=0.2).get_json("/api/logs/q")
    text = str(err.value)
    assert f"127.0.0.1:{port}" in text and "connection refused" in text
    assert "start the broker" in text and "\n" not in text


def test_fail_on_data_loss() -> None:
    pytest.importorskip("pyspark")
    from shoal.spark.datasource import LogRangeReader

    views = {"q": {"start": {"0": 5, "1": 0}, "end": {"0": 9, "1": 4}}}
    strict = LogRangeReader({"queue": "q"})
    ok = strict.from_spark({"0": 5, "1": 0})
    assert strict._kept(ok, views) == ok and strict.to_spark(ok) == {"0": 5, "1": 0}
    with pytest.raises(RuntimeError) as err:
        strict._kept(strict.from_spark({"0": 2, "1": 0}), views)
    assert "'q' bucket 0 [2, 5)" in str(err.value) and "failOnDataLoss" in str(err.value)
    lenient = LogRangeReader({"queue": "q", "failondataloss": "false"})
    assert lenient._kept({("q", "0"): 2, ("q", "1"): 1}, views) == {("q", "0"): 5, ("q", "1"): 1}
    # several queues: Kafka's {"queue": {"bucket": offset}} in the checkpoint
    two = LogRangeReader({"queue": "q, r"})
    assert two.queues == ["q", "r"] and two.nested
    nested = {"q": {"0": 1}, "r": {"0": 2, "1": 3}}
    assert two.to_spark(two.from_spark(nested)) == nested


class FakeQuery:
    def __init__(self, progress: list[dict]) -> None:
        self.recentProgress = progress
        self.lastProgress = progress[-1] if progress else None


def test_progress_clock_starts_at_pipeline_start_and_totals_per_query() -> None:
    out = io.StringIO()
    queries = {
        "matching": FakeQuery(
            [{"batchId": 0, "numInputRows": 600}, {"batchId": 1, "numInputRows": 400}]
        )
    }
    progress = Progress(None, queries, [-1], 0, 2.0, out, started=time.monotonic() - 10)
    progress.observe()
    # a restarted query re-runs batch 1 and goes on: batch 1 counts once
    queries["matching"] = FakeQuery(
        [
            {"batchId": 1, "numInputRows": 400},
            {"batchId": 2, "numInputRows": 0},
            {"batchId": 3, "numInputRows": 1000},
        ]
    )
    progress.observe()
    progress.print_totals()
    text = out.getvalue()
    elapsed = float(text.split("elapsed ")[1].split(" s")[0])
    assert 10 <= elapsed < 60
    assert "matching: 2,000 rows in 3 batches" in text
    rate = int(text.split("batches, ")[1].split(" rows/s")[0].replace(",", ""))
    assert rate == pytest.approx(2000 / elapsed, abs=2)
