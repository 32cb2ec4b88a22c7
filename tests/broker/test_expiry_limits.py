"""Expiry, dead letters, max-size-bytes / global-max-size and producer flow."""

from __future__ import annotations

import pytest

from shoal.broker.core import Broker
from shoal.broker.effects import ProducerFlow
from shoal.broker.settings import AddressSettings
from shoal.errors import ResourceFull
from shoal.records import MessageRemoved, MessageStored


def ms(h, seconds):
    return int((h.now + seconds) * 1000)


def test_expired_message_is_not_delivered(h):
    h.send("old", expires=ms(h, 1))
    h.send("fresh", expires=ms(h, 100))
    h.send("never", expires=0)
    h.now += 2
    h.sub(2, "a")
    assert h.got(2, "a") == ["fresh", "never"]
    assert h.b.queue_infos()[0]["expired"] == 1


def test_tick_expires_pending_messages_and_reports_deadline(h):
    h.send("a", expires=ms(h, 1))
    h.send("b", expires=ms(h, 3))
    assert h.b.tick(h.now) == pytest.approx(h.now + 1)
    h.advance(1.5)
    info = h.b.queue_infos()[0]
    assert info["depth"] == 1 and info["expired"] == 1
    assert h.b.tick(h.now) == pytest.approx(h.now + 1.5)
    h.advance(2)
    assert h.b.queue_infos()[0]["depth"] == 0
    assert h.b.tick(h.now) is None


def test_expiry_in_a_group_lets_the_group_go_on(h):
    h.sub(2, "a", prefetch_count=1)
    d = h.send("0", group="g")[0]
    h.send("1", group="g", expires=ms(h, 1))
    h.send("2", group="g")
    h.advance(2)
    h.ack(d)
    assert h.got(2, "a") == ["0", "2"]
    assert h.groups()["g"]["backlog"] == 0


def test_expiry_address_gets_a_copy(h):
    dest = "/queue/q?expiry-address=EXP"
    h.send("x", dest=dest, expires=ms(h, 1), persistent="true")
    h.advance(2)
    [m] = h.b.browse("EXP", 10)
    assert m.body == b"x" and m.headers["original-destination"] == "/queue/q"
    assert "expires" not in m.headers and m.expires == 0
    assert list(h.store._state.messages["EXP"]) == [m.id]
    assert not h.store._state.messages.get("q")


def test_in_flight_messages_do_not_expire(h):
    h.sub(2, "a")
    d = h.send("x", expires=ms(h, 1))[0]
    h.advance(2)
    h.ack(d)
    info = h.b.queue_infos()[0]
    assert info["expired"] == 0 and info["acked"] == 1


def test_returned_expired_message_is_dropped(h):
    h.sub(2, "a", prefetch_count=1)
    d = h.send("x", expires=ms(h, 1))[0]
    h.send("y")
    h.now += 2
    h.nack(d)
    assert h.got(2, "a") == ["x", "y"]
    assert h.b.queue_infos()[0]["expired"] == 1


def test_dead_letter_record_flow_for_persistent(h):
    dest = "/queue/q?max-delivery-attempts=1"
    h.sub(2, "a", dest=dest)
    d = h.send("x", dest=dest, persistent="true")[0]
    h.b.nack(2, d.ack_id, h.now)
    recs = h.b.take_records()
    assert isinstance(recs[0], MessageRemoved) and recs[0].queue == "q"
    stored = [r for r in recs if isinstance(r, MessageStored)]
    assert stored[0].queue == "DLQ" and stored[0].headers["original-destination"] == "/queue/q"


def test_custom_dead_letter_address(h):
    dest = "/queue/q?max-delivery-attempts=1&dead-letter-address=orders.dlq"
    h.sub(2, "a", dest=dest)
    h.nack(h.send("x", dest=dest)[0])
    assert [m.body for m in h.b.browse("orders.dlq", 5)] == [b"x"]


def test_disconnect_counts_as_a_delivery_attempt(h):
    dest = "/queue/q?max-delivery-attempts=2"
    h.sub(2, "a", dest=dest)
    h.send("x", dest=dest)
    h.disconnect(2)
    h.sub(3, "b", dest=dest)
    h.disconnect(3)
    assert [m.body for m in h.b.browse("DLQ", 5)] == [b"x"]


def test_max_size_fail_rejects(h):
    dest = "/queue/q?max-size-bytes=10&address-full-policy=fail"
    h.send("12345", dest=dest)
    h.send("12345", dest=dest)
    with pytest.raises(ResourceFull):
        h.send("1", dest=dest)
    assert h.b.queue_infos()[0]["depth"] == 2


def test_max_size_block_accepts_and_flows(h):
    dest = "/queue/q?max-size-bytes=10"
    h.send("12345", dest=dest, conn=1)
    assert h.flow == []
    h.send("12345", dest=dest, conn=1)
    assert h.flow == [ProducerFlow(1, True)]
    h.send("more", dest=dest, conn=5)  # still accepted: blocking is flow control
    assert h.flow == [ProducerFlow(1, True), ProducerFlow(5, True)]
    assert h.b.queue_infos()[0]["depth"] == 3
    h.sub(2, "a", ack="auto")
    assert sorted(h.flow[2:], key=lambda f: f.conn_id) == [
        ProducerFlow(1, False),
        ProducerFlow(5, False),
    ]


def test_block_until_acked(h):
    dest = "/queue/q?max-size-bytes=5"
    h.sub(2, "a", dest=dest)
    d = h.send("12345", dest=dest)[0]
    assert h.flow == [ProducerFlow(1, True)]  # in-flight messages still count
    h.ack(d)
    assert h.flow[-1] == ProducerFlow(1, False)


def test_global_max_size():
    b = Broker(AddressSettings(), 0.0, global_max_size=8)
    b.connect(1, 0.0)
    b.send(1, "/queue/a", {}, b"12345", 0.0)
    b.send(1, "/queue/b", {}, b"12345", 0.0)
    assert b.take_effects() == [ProducerFlow(1, True)]
    with pytest.raises(ResourceFull):
        b.send(1, "/queue/c?address-full-policy=fail", {}, b"1", 0.0)
    b.purge_queue("a", 0.0)
    assert b.take_effects() == [ProducerFlow(1, False)]
