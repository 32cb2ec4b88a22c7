"""The core's side of log queues (queue-type = "log"), with a stand-in LogQueue."""

from __future__ import annotations

import sys
import types

import pytest

from shoal.errors import InvalidDestination, NotFound
from shoal.records import MessageStored, Recovered


class FakeLogQueue:
    def __init__(self, name, settings, core):
        self.name = name
        self.settings = settings
        self.core = core
        self.offered = []
        self.restored = []

    def offer(self, message, now):
        self.offered.append(message)
        self.core.records.append(
            MessageStored(
                self.name,
                message.id,
                message.destination,
                message.headers,
                message.body,
                message.group,
                message.group_seq,
                message.expires,
                message.priority,
                message.timestamp,
                0,
                0,
                len(self.offered) - 1,
            )
        )

    def restore_message(self, record):
        self.restored.append(record)

    def info(self):
        return {"depth": len(self.offered)}


@pytest.fixture(autouse=True)
def fake_logqueue(monkeypatch):
    mod = types.ModuleType("shoal.broker.logqueue")
    mod.LogQueue = FakeLogQueue
    monkeypatch.setitem(sys.modules, "shoal.broker.logqueue", mod)


def test_log_queue_gets_messages_and_shares_records(h):
    h.send("a", dest="/queue/events?queue-type=log", group="k")
    lq = h.b.log_queue("events")
    assert isinstance(lq, FakeLogQueue)
    [m] = lq.offered
    assert m.body == b"a" and m.group == "k"
    assert len(h.store._state.messages["events"]) == 1  # its records went out with ours


def test_subscribing_to_a_log_queue_is_refused(h):
    h.send("a", dest="/queue/events?queue-type=log")
    with pytest.raises(InvalidDestination, match="read over HTTP"):
        h.sub(2, "a", dest="/queue/events")
    with pytest.raises(InvalidDestination):
        h.sub(2, "b", dest="/queue/other?queue-type=log")
    assert h.b.consumer_infos() == []


def test_log_queue_lookup(h):
    h.send("a", dest="/queue/classic")
    with pytest.raises(NotFound):
        h.b.log_queue("classic")


def test_restore_passes_bucketed_records(h):
    h.b.create_queue("events", {"queue-type": "log"}, h.now)
    decl = h.b.take_records()[0]
    rec = MessageStored("events", 7, "/queue/events", {}, b"x", None, 0, 0, 4, 0, 0, 1, 0)
    from shoal.broker.core import Broker
    from shoal.broker.settings import AddressSettings

    b = Broker(AddressSettings(), h.now)
    b.restore(
        Recovered(queues={"events": decl}, messages={"events": [rec]}, next_message_id=8), h.now
    )
    assert b.log_queue("events").restored == [rec]
    b.connect(1, h.now)
    b.send(1, "/queue/x", {}, b"", h.now)
    assert b.browse("x", 1)[0].id == 8


def test_queue_infos_include_log_queues(h):
    h.send("a", dest="/queue/events?queue-type=log")
    info = {i["name"]: i for i in h.b.queue_infos()}
    assert info["events"]["type"] == "log" and info["events"]["depth"] == 1
