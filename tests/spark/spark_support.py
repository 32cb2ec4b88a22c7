"""Helpers for the Spark tests: feed a real broker over STOMP, read its logs over HTTP."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterable
from typing import Any


def http_json(url: str, method: str = "GET", body: Any = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


def create_log_queue(http_url: str, name: str, buckets: int = 4, topic: str | None = None) -> None:
    settings: dict[str, Any] = {"queue-type": "log", "log-buckets": buckets}
    if topic is not None:
        settings.update({"address": topic, "routing": "multicast"})
    http_json(http_url + "/api/queues", "POST", {"name": name, "settings": settings})


def log_view(http_url: str, queue: str) -> dict[str, Any]:
    return http_json(f"{http_url}/api/logs/{queue}")


def publish(stomp_port: int, destination: str, items: Iterable[tuple[str | None, int, bytes]],
            window: int = 500) -> int:
    """Send (group, seq, body) items persistently; returns once the broker confirmed all."""
    from shoal.spark.generator import connect_producer

    todo = list(items)
    with connect_producer(f"127.0.0.1:{stomp_port}") as client:
        for n, (group, seq, body) in enumerate(todo, 1):
            last = n % window == 0 or n == len(todo)
            client.send(destination, body, group=group, group_seq=seq if group else None,
                        persistent=True, receipt=last)
    return len(todo)


def read_log(http_url: str, queue: str) -> Any:
    """Every kept record of a log queue as one pandas DataFrame (via the Arrow endpoint)."""
    import pandas as pd
    import pyarrow as pa

    view = log_view(http_url, queue)
    frames = []
    for b, start in view["start"].items():
        with urllib.request.urlopen(
            f"{http_url}/api/logs/{queue}/{b}?start={start}&max_rows=1000000", timeout=30
        ) as resp:
            frames.append(pa.ipc.open_stream(resp.read()).read_all().to_pandas())
    return pd.concat(frames, ignore_index=True)


def wait_for(pred: Any, timeout: float = 30.0, interval: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s: {pred}")
        time.sleep(interval)
