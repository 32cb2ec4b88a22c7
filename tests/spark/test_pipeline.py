"""The matching pipeline end to end: kill -9 of the Spark driver, and a broker restart.

Both end with the batch audit over the Parquet archive: every order once and
in per-symbol order, trades exactly equal to the plain-Python reference
matcher, per-symbol trade sequences without gap or duplicate.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

pytest.importorskip("pyspark")
from spark_support import log_view, wait_for

from shoal.spark import jobs, pipeline
from support import http_json

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(900)]

ORDERS = 24_000
SYMBOLS = 40
BATCH = 3_000


def matching_argv(broker, tmp: Path, *extra: str) -> list[str]:
    return [
        "matching",
        "--http",
        broker.http_url,
        "--stomp",
        f"127.0.0.1:{broker.stomp_port}",
        "--orders",
        str(ORDERS),
        "--symbols",
        str(SYMBOLS),
        "--buckets",
        "4",
        "--max-rows-per-batch",
        str(BATCH),
        "--checkpoint",
        str(tmp / "checkpoint"),
        "--output",
        str(tmp / "archive"),
        "--progress-interval",
        "5",
        "--timeout",
        "280",
        *extra,
    ]


def parse(argv: list[str]):
    import argparse

    parser = argparse.ArgumentParser()
    pipeline.add_pipeline_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["pipeline", *argv])


def committed(url: str, queue: str) -> int:
    try:
        status, view = http_json(f"{url}/api/logs/{queue}", timeout=30.0)
    except OSError:  # the broker is restarting
        return 0
    if status == 404:  # not created yet
        return 0
    assert status == 200, f"GET /api/logs/{queue}: {status} {view}"
    return sum(view["committed"].values())


def assert_audit(spark, tmp: Path) -> None:
    report = pipeline.audit(spark, str(tmp / "archive"), ORDERS)
    assert report["trades_equal_reference"], report
    assert report["missing_trades"] == 0 and report["extra_trades"] == 0, report
    for kind in ("orders", "trades"):
        r = report[kind]
        assert r["out_of_order"] == 0 and r["duplicate_seqs"] == 0 and r["gaps"] == 0, report
        assert r["duplicate_offsets"] == 0 and r["bad_starts"] == 0, report
    assert report["orders"]["rows"] == ORDERS and report["orders"]["groups"] == SYMBOLS
    assert report["reference_trades"] > ORDERS // 2
    assert report["ok"]


def first_error(text: str, lines: int = 40) -> str:
    """The first exception in a log and the lines after it (the tail alone cuts its cause off)."""
    rows = text.splitlines()
    for i, row in enumerate(rows):
        if "Exception" in row or "Error" in row:
            return "\n".join(rows[i : i + lines])
    return ""


def kill9_then_restart(
    spark, broker, tmp_path: Path, moment: Callable[[], bool], *, min_commits: int = 0
) -> None:
    """Run the pipeline, kill -9 its whole process group once ``moment()`` holds,
    run it again on the same checkpoint: it finishes with exactly-once output."""
    url = broker.http_url
    cmd = [sys.executable, "-m", "shoal.spark.pipeline", *matching_argv(broker, tmp_path)]
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    log1 = open(tmp_path / "driver1.log", "wb")  # noqa: SIM115 - closed below
    driver = subprocess.Popen(
        cmd, stdout=log1, stderr=subprocess.STDOUT, env=env, start_new_session=True
    )
    try:
        wait_for(moment, timeout=240, interval=0.2)
    finally:
        os.killpg(driver.pid, signal.SIGKILL)  # driver, JVM and Python workers
        driver.wait(30)
        log1.close()
    assert committed(url, "orders.match") < ORDERS, "the kill came too late to be mid-stream"
    commits = list((tmp_path / "checkpoint" / "matching" / "commits").glob("[0-9]*"))
    assert len(commits) >= min_commits, f"{len(commits)} batches committed before the kill"

    rerun = subprocess.run(cmd, capture_output=True, env=env, timeout=300, check=False)
    out = rerun.stdout.decode(errors="replace")
    err = rerun.stderr.decode(errors="replace")
    (tmp_path / "driver2.log").write_text(out + err)  # the whole story, kept with tmp_path
    assert rerun.returncode == 0, f"{out[-3000:]}\n{first_error(err)}\n{err[-2000:]}"
    assert "matching done" in out
    assert log_view(url, "orders.match")["lag"] == 0
    assert_audit(spark, tmp_path)


def test_kill9_of_the_driver_mid_stream_then_restart(spark, broker, tmp_path) -> None:
    def mid_stream() -> bool:  # at least two matching batches committed, more to come
        return (
            "orders.match" in (tmp_path / "driver1.log").read_text()
            and committed(broker.http_url, "orders.match") >= 2 * BATCH
        )

    kill9_then_restart(spark, broker, tmp_path, mid_stream, min_commits=1)


def test_kill9_of_the_driver_in_its_first_batch_then_restart(spark, broker, tmp_path) -> None:
    # The matching query has planned batch 0 (offsets/0 written) and is running
    # it: its first state store version and the sink's first publish are in flight.
    first_batch = tmp_path / "checkpoint" / "matching" / "offsets" / "0"
    kill9_then_restart(spark, broker, tmp_path, first_batch.exists)


def _rate_query(spark, tmp_path: Path, checkpoint: Path):
    rows = spark.readStream.format("rate").option("rowsPerSecond", 5).load()
    return (
        rows.writeStream.format("parquet")
        .option("path", str(tmp_path / "out"))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )


def test_a_write_the_killed_driver_left_unfinished_does_not_block_the_restart(
    spark, tmp_path
) -> None:
    """What a kill -9 in the first batch can leave (seen in CI): Spark's temp
    file for offsets/0, never renamed into place. Spark refuses to start the
    query beside it; the pipeline removes it first (jobs.discard_unfinished_writes)."""
    checkpoint = tmp_path / "checkpoint"
    (checkpoint / "offsets").mkdir(parents=True)
    stray = checkpoint / "offsets" / ".0.8ee5abc5-b80a-42ed-9dec-7c4b726a8b8b.tmp"
    stray.write_text('v1\n{"batchWatermarkMs":0,"batchTimestampMs":0}\n')
    (checkpoint / "offsets" / f".{stray.name}.crc").write_bytes(b"crc")
    query = _rate_query(spark, tmp_path, checkpoint)
    with pytest.raises(Exception, match="STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY"):
        query.awaitTermination(120)
    assert {p.name for p in jobs.discard_unfinished_writes(checkpoint)} == {
        stray.name,
        f".{stray.name}.crc",
    }
    query = _rate_query(spark, tmp_path, checkpoint)
    query.awaitTermination(120)
    assert query.exception() is None
    assert (checkpoint / "commits" / "0").exists()


def test_broker_restart_under_the_running_query(spark, broker, tmp_path) -> None:
    url = broker.http_url
    args = parse(matching_argv(broker, tmp_path, "--rate", "800", "--trigger-ms", "200"))
    result: dict[str, object] = {}

    def run() -> None:
        try:
            result["rc"] = pipeline.run_matching(args, spark=spark)
        except BaseException as exc:  # reported below
            result["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    try:
        wait_for(
            lambda: committed(url, "orders.match") >= BATCH or "error" in result,
            timeout=240,
            interval=0.2,
        )
        assert "error" not in result, str(result.get("error"))[:3000]
        assert committed(url, "orders.match") < ORDERS, "the restart came too late"
        broker.restart()  # SIGTERM, then `shoal serve` again on the same ports and journal
    finally:
        t.join(300)
    assert not t.is_alive(), "the pipeline did not finish"
    assert result.get("rc") == 0, result
    assert_audit(spark, tmp_path)
