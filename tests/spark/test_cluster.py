"""The matching pipeline on a Spark standalone cluster (a master and two workers on
loopback), a worker killed with -9 mid-stream: still every order once, trades equal
to the reference matcher. And a clear line when PYSPARK_PYTHON lacks shoal."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("pyspark")
from spark_support import log_view, wait_for
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


def test_a_python_without_shoal_is_named_up_front(tmp_path) -> None:
    bare = tmp_path / "python"
    bare.write_text(
        "#!/bin/sh\necho \"ModuleNotFoundError: No module named 'shoal'\" >&2\nexit 1\n"
    )
    bare.chmod(0o755)
    with pytest.raises(SetupError) as err:
        check_python(str(bare))
    text = str(err.value)
    assert f"PYSPARK_PYTHON={bare}" in text and "No module named 'shoal'" in text
    assert "pip install 'shoal[spark]'" in text and "\n" not in text
    check_python(sys.executable)  # this one has it
