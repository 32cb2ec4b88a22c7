"""A node started before ZooKeeper answers: no ready line and status
`JOINING` until it has joined; ready (and a member) once ZooKeeper is up."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest
from tests.support import free_port, parse_ready_line

from shoal.server.cluster.zkserver import ZooKeeperServer

pytestmark = [pytest.mark.e2e, pytest.mark.cluster]


def cluster_status(http: int, *args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "shoal.cli", "cluster", "status"]
        + ["--http", f"http://127.0.0.1:{http}", *args],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_ready_waits_until_the_node_has_joined(tmp_path):
    zk = ZooKeeperServer(tmp_path / "zookeeper", free_port())  # not started yet
    http = free_port()
    config = tmp_path / "n1.toml"
    config.write_text(
        f'[cluster]\nnode = "n1"\nlink = "127.0.0.1:0"\nzookeeper = "{zk.connect_string}"\n'
    )
    node = subprocess.Popen(
        [sys.executable, "-m", "shoal.cli", "serve", "--data", str(tmp_path / "n1")]
        + ["--stomp", "127.0.0.1:0", "--amqp", "", "--http", f"127.0.0.1:{http}"]
        + ["--config", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 30
        while True:  # the management API answers before the node has joined
            try:
                status = json.loads(cluster_status(http, "--json"))
                break
            except AssertionError:
                assert time.monotonic() < deadline and node.poll() is None
                time.sleep(0.2)
        assert status["joined"] is False
        assert "JOINING" in cluster_status(http)
        zk.start()
        assert node.stdout is not None
        line = node.stdout.readline()  # printed only now
        assert parse_ready_line(line)["http"] == http
        status = json.loads(cluster_status(http, "--json", "--wait", "1"))
        assert status["joined"] is True and status["fenced"] is False
        assert [(n["node"], n["member"], n["joined"]) for n in status["nodes"]] == [
            ("n1", True, True)
        ]
    finally:
        node.send_signal(signal.SIGTERM)
        node.wait(20)
        zk.stop()
