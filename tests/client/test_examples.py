"""examples/ run as the README says, against a real broker."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run(script: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(EXAMPLES / script), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(proc: subprocess.Popen) -> str:
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    return out


def test_producer_enricher_and_two_consumers(shoal_server):
    srv = shoal_server()
    url = ["--url", f"stomp://127.0.0.1:{srv.stomp_port}"]
    assert "sent 30 orders" in finish(run("grouped_producer.py", "--count", "30", *url))
    assert "forwarded 30 orders" in finish(run("async_enricher.py", "--timeout", "1", *url))
    consumers = [
        run("grouped_consumer.py", "--queue", "/queue/priced", "--timeout", "1", *url)
        for _ in range(2)
    ]
    summaries = [json.loads(finish(p)) for p in consumers]
    assert all(s["out_of_order"] == 0 for s in summaries)
    groups = [set(s["groups"]) for s in summaries]
    assert not groups[0] & groups[1]  # each symbol went to one consumer
    assert groups[0] | groups[1] == {"AAPL", "IBM", "MSFT"}
    assert sum(n for s in summaries for n in s["groups"].values()) == 30


def test_stomp_producer_and_two_proton_group_consumers(shoal_server):
    srv = shoal_server()
    url = ["--url", f"stomp://127.0.0.1:{srv.stomp_port}"]
    assert "sent 30 orders" in finish(run("grouped_producer.py", "--count", "30", *url))
    amqp = ["--url", f"amqp://127.0.0.1:{srv.amqp_port}", "--timeout", "1"]
    consumers = [run("amqp_group_consumer.py", "--queue", "orders", *amqp) for _ in range(2)]
    summaries = [json.loads(finish(p)) for p in consumers]
    assert all(s["out_of_order"] == 0 for s in summaries)
    groups = [set(s["groups"]) for s in summaries]
    assert not groups[0] & groups[1]  # each symbol went to one consumer
    assert groups[0] | groups[1] == {"AAPL", "IBM", "MSFT"}
    assert sum(n for s in summaries for n in s["groups"].values()) == 30
