"""Topics, durable subscriptions, temporary queues and topics."""

from __future__ import annotations

import pytest

from shoal.broker.effects import CloseConnection
from shoal.errors import NotFound
from shoal.records import QueueDeclared, QueueDeleted


def test_topic_fans_out_with_new_ids(h):
    h.sub(2, "a", dest="/topic/t")
    h.sub(3, "b", dest="/topic/t")
    h.send("x", dest="/topic/t")
    [da] = h.by_sub[(2, "a")]
    [db] = h.by_sub[(3, "b")]
    assert da.message.body == db.message.body == b"x"
    assert da.message.id != db.message.id
    assert da.message.destination == "/topic/t"


def test_topic_without_subscribers_drops(h):
    h.send("x", dest="/topic/t")
    h.sub(2, "a", dest="/topic/t")
    assert h.delivered == []


def test_non_durable_subscription_goes_with_subscriber(h):
    h.sub(2, "a", dest="/topic/t")
    assert "t::2/a" in h.b.queues
    h.unsub(2, "a")
    assert "t::2/a" not in h.b.queues
    h.sub(3, "b", dest="/topic/t")
    h.disconnect(3)
    assert [q for q in h.b.queues if q.startswith("t::")] == []
    assert not any(isinstance(r, QueueDeclared) for r in h.store._state.queues.values())


def test_durable_subscription_survives_disconnect(h):
    h.sub(2, "a", dest="/topic/t", durable_subscription_name="audit")
    h.disconnect(2)
    h.send("while-away", dest="/topic/t")
    h.sub(3, "b", dest="/topic/t", durable_subscription_name="audit")
    assert h.got(3, "b") == ["while-away"]
    assert "t::audit" in h.store._state.queues


def test_durable_subscription_with_client_id(h):
    h.connect(2, client_id="c1")
    h.sub(2, "a", dest="/topic/t", **{"activemq.subscriptionName": "audit"})
    assert "t::c1.audit" in h.b.queues


def test_shared_durable_subscription_competes(h):
    for conn, sub in [(2, "a"), (3, "b")]:
        h.sub(conn, sub, dest="/topic/t", durable_subscription_name="work")
    for i in range(4):
        h.send(str(i), dest="/topic/t")
    assert h.got(2, "a") == ["0", "2"] and h.got(3, "b") == ["1", "3"]


def test_durable_unsubscribe_deletes_the_subscription(h):
    h.sub(2, "a", dest="/topic/t", durable_subscription_name="audit")
    h.send("x", dest="/topic/t")
    h.unsub(2, "a", durable=True)
    assert "t::audit" not in h.b.queues
    assert "t::audit" not in h.store._state.queues
    h.sub(2, "b", dest="/topic/t", durable_subscription_name="audit")
    assert h.got(2, "b") == []


def test_durable_subscription_survives_restart(h):
    h.sub(2, "a", dest="/topic/t", durable_subscription_name="audit")
    h.disconnect(2)
    h.send("p", dest="/topic/t", persistent="true")
    h.send("np", dest="/topic/t")
    h2 = h.restart()
    h2.send("after", dest="/topic/t")
    h2.sub(3, "b", dest="/topic/t", durable_subscription_name="audit")
    assert h2.got(3, "b") == ["p", "after"]


def test_temp_queue_is_scoped_and_deleted_on_disconnect(h):
    h.sub(2, "replies", dest="/temp-queue/r")
    assert "tmp.2.r" in h.b.queues
    h.send("x", dest="/temp-queue/r", conn=2)
    assert h.got(2, "replies") == ["x"]
    h.disconnect(2)
    assert "tmp.2.r" not in h.b.queues
    assert h.store._state.queues == {}  # never persisted


def test_temp_queue_reply_to_is_rewritten(h):
    h.sub(2, "replies", dest="/temp-queue/r")
    h.sub(3, "server", dest="/queue/requests")
    h.send("req", dest="/queue/requests", conn=2, **{"reply-to": "/temp-queue/r"})
    [req] = h.by_sub[(3, "server")]
    reply_to = req.message.headers["reply-to"]
    assert reply_to == "/temp-queue/tmp.2.r"
    h.send("resp", dest=reply_to, conn=3)
    assert h.got(2, "replies") == ["resp"]


def test_temp_queue_of_gone_connection(h):
    h.sub(2, "replies", dest="/temp-queue/r")
    h.disconnect(2)
    with pytest.raises(NotFound):
        h.send("late", dest="/temp-queue/tmp.2.r", conn=3)


def test_temp_queue_consumer_of_other_connection_is_closed(h):
    h.sub(2, "replies", dest="/temp-queue/r")
    h.sub(3, "spy", dest="/temp-queue/tmp.2.r")
    h.disconnect(2)
    assert CloseConnection(3, "queue 'tmp.2.r' was deleted") in h.closed


def test_temp_topic(h):
    h.sub(2, "a", dest="/temp-topic/news")
    h.send("x", dest="/temp-topic/news", conn=2)
    assert h.got(2, "a") == ["x"]
    h.disconnect(2)
    assert "tmp.2.news" not in h.b.topics


def test_runtime_queue_records(h):
    h.send("x", dest="/queue/auto?group-buckets=4")
    recs = list(h.store._state.queues.values())
    assert recs == [QueueDeclared("auto", "auto", "anycast", {"group-buckets": 4}, None, None)]


def test_config_queues_are_not_recorded(make):
    h = make(queues_config={"orders": {"group-buckets": 2}})
    h.send("x", dest="/queue/orders")
    assert h.store._state.queues == {}
    info = {i["name"]: i for i in h.b.queue_infos()}
    assert info["orders"]["settings"]["group-buckets"] == 2


def test_delete_queue_records(h):
    h.send("x", dest="/queue/auto", persistent="true")
    h.b.delete_queue("auto", h.now)
    recs = h.b.take_records()
    assert recs == [QueueDeleted("auto")]
