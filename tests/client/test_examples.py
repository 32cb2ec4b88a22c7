"""examples/ run as their README says, against a real broker: the consumers
start first, then the producer."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from support import get_json, wait_for

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


def consumers_of(srv, queue: str) -> int:
    return len(get_json(f"{srv.http_url}/api/consumers?queue={queue}")["consumers"])


def assert_spread(summaries: list[dict]) -> None:
    """Each symbol went to one consumer, in order, and each consumer got some."""
    assert all(s["out_of_order"] == 0 for s in summaries)
    groups = [set(s["groups"]) for s in summaries]
    assert not groups[0] & groups[1]  # each symbol went to one consumer
    assert groups[0] and groups[1]  # consumers started first share the symbols
    assert groups[0] | groups[1] == {"AAPL", "IBM", "MSFT"}
    assert sum(n for s in summaries for n in s["groups"].values()) == 30


def test_producer_enricher_and_two_consumers(shoal_server):
    srv = shoal_server()
    url = ["--url", f"stomp://127.0.0.1:{srv.stomp_port}"]
    consumers = [
        run("grouped_consumer.py", "--queue", "/queue/priced", "--timeout", "1", *url)
        for _ in range(2)
    ]
    wait_for(lambda: consumers_of(srv, "priced") == 2, timeout=30)
    assert "sent 30 orders" in finish(run("grouped_producer.py", "--count", "30", *url))
    assert "forwarded 30 orders" in finish(run("async_enricher.py", "--timeout", "1", *url))
    assert_spread([json.loads(finish(p)) for p in consumers])


def test_stomp_producer_and_two_proton_group_consumers(shoal_server):
    srv = shoal_server()
    url = ["--url", f"stomp://127.0.0.1:{srv.stomp_port}"]
    amqp = ["--url", f"amqp://127.0.0.1:{srv.amqp_port}", "--timeout", "1"]
    consumers = [run("amqp_group_consumer.py", "--queue", "orders", *amqp) for _ in range(2)]
    wait_for(lambda: consumers_of(srv, "orders") == 2, timeout=30)
    assert "sent 30 orders" in finish(run("grouped_producer.py", "--count", "30", *url))
    assert_spread([json.loads(finish(p)) for p in consumers])
