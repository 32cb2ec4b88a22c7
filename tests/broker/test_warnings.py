"""Destination parameters that differ from an existing queue's settings are
ignored with a warning (DESIGN "Destination parameters"): the core lists
them (Broker.take_warnings), the server logs them at WARNING."""

from __future__ import annotations

import asyncio
import logging

from shoal.server.app import BrokerServer
from shoal.server.config import Config

from .conftest import Harness


def test_differing_parameters_warn_once_per_destination(h: Harness):
    h.sub(2, "a", dest="/queue/q?group-buckets=2")
    assert h.warnings == []
    h.send("x", dest="/queue/q?group-buckets=4&group-rebalance=true", conn=5)
    h.send("y", dest="/queue/q?group-buckets=4&group-rebalance=true", conn=5)
    assert len(h.warnings) == 1  # the parsed destination is cached: once, not per message
    conn_id, text = h.warnings[0]
    assert conn_id == 5
    assert "'q'" in text and "group-buckets=4" in text and "queue has 2" in text
    assert "group-rebalance=True" in text
    assert h.b.queue("q").groups.buckets == 2  # ignored


def test_same_or_no_parameters_do_not_warn(h: Harness):
    h.sub(2, "a", dest="/queue/q?group-buckets=2")
    h.send("x", dest="/queue/q?group-buckets=2")
    h.send("x", dest="/queue/q")
    h.sub(3, "b", dest="/queue/q?exclusive=true")  # a subscription flag too
    assert h.warnings == []


def test_subscribe_and_durable_subscription_parameters_warn(h: Harness):
    h.send("x", dest="/queue/q")
    h.sub(2, "a", dest="/queue/q?max-delivery-attempts=3")
    h.sub(3, "d", dest="/topic/t", durable_subscription_name="n")
    h.sub(4, "e", dest="/topic/t?group-mode=shared", durable_subscription_name="n")
    assert [c for c, _ in h.warnings] == [2, 4]
    assert "max-delivery-attempts=3" in h.warnings[0][1]
    assert "group-mode='shared'" in h.warnings[1][1] and "'t::n'" in h.warnings[1][1]


def test_server_flush_logs_warnings(caplog):
    async def run() -> None:
        server = BrokerServer(Config(stomp=("127.0.0.1", 0), http=None, amqp=None, data=None))
        await server.start()
        try:
            b = server.broker
            b.connect(1, 0.0)
            b.send(1, "/queue/w?group-buckets=2", {}, b"x", 0.0)
            b.send(1, "/queue/w?group-buckets=3", {}, b"x", 0.0)
            server.flush()
            assert b.warnings == []
        finally:
            await server.stop()

    with caplog.at_level(logging.WARNING, logger="shoal.server"):
        asyncio.run(run())
    msgs = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("'w' already exists" in m and "group-buckets=3" in m for m in msgs), msgs
