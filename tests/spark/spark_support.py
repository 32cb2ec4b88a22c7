"""Helpers for the Spark tests: feed a real broker over STOMP, read its logs over HTTP."""

from __future__ import annotations

import functools
import urllib.request
from collections.abc import Iterable
from typing import Any

import support

# The broker shares the two cores with a Spark JVM here: wait longer than elsewhere.
get_json = functools.partial(support.get_json, timeout=30.0)
wait_for = functools.partial(support.wait_for, timeout=30.0, interval=0.1)


def create_log_queue(http_url: str, name: str, buckets: int = 4, topic: str | None = None) -> None:
    settings: dict[str, Any] = {"queue-type": "log", "log-buckets": buckets}
    if topic is not None:
        settings.update({"address": topic, "routing": "multicast"})
    get_json(http_url + "/api/queues", "POST", {"name": name, "settings": settings})


def log_view(http_url: str, queue: str) -> dict[str, Any]:
    return get_json(f"{http_url}/api/logs/{queue}")


def publish(
    stomp_port: int,
    destination: str,
    items: Iterable[tuple[str | None, int, bytes]],
    window: int = 500,
) -> int:
    """Send (group, seq, body) items persistently; returns once the broker confirmed all."""
    from shoal.spark.generator import connect_producer

    todo = list(items)
    with connect_producer(f"127.0.0.1:{stomp_port}") as client:
        for n, (group, seq, body) in enumerate(todo, 1):
            last = n % window == 0 or n == len(todo)
            client.send(
                destination,
                body,
                group=group,
                group_seq=seq if group else None,
                persistent=True,
                receipt=last,
            )
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
