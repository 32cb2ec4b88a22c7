"""The matching pipeline on a Spark standalone cluster (a master and two workers on
loopback), a worker killed with -9 mid-stream: still every order once, trades equal
to the reference matcher; a user's own job the same way, every row once. And a clear
line when PYSPARK_PYTHON lacks shoal."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pyspark")
from spark_support import create_log_queue, log_view, publish, read_log, wait_for
from test_pipeline import BATCH, ORDERS, assert_audit, committed, matching_argv

from shoal.spark.cluster import LocalCluster
from shoal.spark.jobs import SetupError, check_python

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(900)]


def test_pipeline_on_a_cluster_survives_a_worker_kill9(spark, broker, tmp_path) -> None:
    url = broker.http_url
    with LocalCluster(2, directory=tmp_path / "cluster") as cluster:
        cmd = [
            sys.executable,
            "-m",
            "shoal.spark.pipeline",
            *matching_argv(
                broker,
                tmp_path,
                "--master",
                cluster.master_url,
                "--driver-memory",
                "1g",
                "--rate",
                "1500",
            ),
        ]
        cmd[cmd.index("--timeout") + 1] = "500"
        env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
        log = tmp_path / "driver.log"
        with open(log, "wb") as out:
            driver = subprocess.Popen(
                cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
            try:
                wait_for(
                    lambda: committed(url, "orders.match") >= BATCH or driver.poll() is not None,
                    timeout=400,
                    interval=0.5,
                )
                assert driver.poll() is None, log.read_text()[-3000:]
                assert committed(url, "orders.match") < ORDERS, "the kill came too late"
                cluster.workers[0].kill()  # the worker and its executor, -9
                assert driver.wait(500) == 0, log.read_text()[-3000:]
            finally:
                if driver.poll() is None:
                    os.killpg(driver.pid, 9)
                    driver.wait(30)
    text = log.read_text()
    assert "matching done" in text and "rows/s" in text, text[-3000:]
    assert log_view(url, "orders.match")["lag"] == 0
    assert_audit(spark, tmp_path)


def test_a_python_without_shoal_is_named_up_front(tmp_path, monkeypatch) -> None:
    bare = tmp_path / "python"
    bare.write_text(
        "#!/bin/sh\necho \"ModuleNotFoundError: No module named 'shoal'\" >&2\nexit 1\n"
    )
    bare.chmod(0o755)
    monkeypatch.setenv("PYSPARK_PYTHON", str(bare))
    with pytest.raises(SetupError) as err:
        check_python(str(bare))
    text = str(err.value)
    assert f"PYSPARK_PYTHON={bare}" in text and "No module named 'shoal'" in text
    assert "pip install 'shoal[spark]'" in text and "\n" not in text
    check_python(sys.executable)  # this one has it


def test_a_user_job_on_a_cluster_survives_a_worker_kill9(broker, tmp_path) -> None:
    """tests/spark/user_job.py, a plain pyspark job, as the driver of a standalone cluster."""
    url = broker.http_url
    create_log_queue(url, "ticks", buckets=4)
    create_log_queue(url, "kept", buckets=4)
    sent, seqs = [], {}
    for i in range(6000):
        g = f"S{i % 10}"
        seqs[g] = seqs.get(g, 0) + 1
        sent.append((g, seqs[g], f"t{i}".encode()))
    publish(broker.stomp_port, "/queue/ticks", sent)
    job = Path(__file__).with_name("user_job.py")
    with LocalCluster(2, directory=tmp_path / "cluster") as cluster:
        env = dict(os.environ, PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
        log = tmp_path / "driver.log"
        with open(log, "wb") as out:
            driver = subprocess.Popen(
                [sys.executable, str(job), cluster.master_url, url, str(tmp_path / "ck")],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
            try:
                wait_for(
                    lambda: committed(url, "ticks") >= 400 or driver.poll() is not None,
                    timeout=400,
                    interval=0.2,
                )
                assert driver.poll() is None, log.read_text()[-3000:]
                assert committed(url, "ticks") < 6000, "the kill came too late"
                cluster.workers[0].kill()  # the worker and its executor, -9
                assert driver.wait(500) == 0, log.read_text()[-3000:]
            finally:
                if driver.poll() is None:
                    os.killpg(driver.pid, 9)
                    driver.wait(30)
    assert "user job done" in log.read_text()
    got = read_log(url, "kept")
    want = sorted((g, s, b.upper()) for g, s, b in sent if g < "S5")
    assert sorted(zip(got["group_id"], got["group_seq"], got["body"], strict=True)) == want
    for _, grp in got.sort_values("offset").groupby("group_id"):
        assert grp["group_seq"].tolist() == list(range(1, len(grp) + 1))
