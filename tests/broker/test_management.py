"""Management reads and operations (pure)."""

from __future__ import annotations

import pytest

from shoal.errors import Conflict, InvalidSetting, NotFound
from shoal.records import GroupParked, GroupResumed, QueueDeclared


def test_queue_infos_fields(h):
    h.sub(2, "a", prefetch_count=1)
    h.send("0")
    h.send("1", group="g")
    h.nack(h.by_sub[(2, "a")][0])
    [q] = h.b.queue_infos()
    for key in (
        "name",
        "address",
        "routing",
        "settings",
        "depth",
        "in_flight",
        "consumers",
        "enqueued",
        "delivered",
        "acked",
        "redelivered",
        "dead_lettered",
        "expired",
        "oldest_age_ms",
        "groups",
    ):
        assert key in q
    assert q["name"] == "q" and q["routing"] == "anycast" and q["consumers"] == 1
    assert q["enqueued"] == 2 and q["delivered"] == 2 and q["redelivered"] == 1
    assert q["depth"] == 1 and q["in_flight"] == 1 and q["groups"] == 1
    assert q["settings"]["group-mode"] == "sticky"


def test_oldest_age(h):
    h.send("0")
    h.now += 3
    assert h.b.queue_infos()[0]["oldest_age_ms"] == 0  # age at the broker's last command time
    h.b.tick(h.now)
    assert h.b.queue_infos()[0]["oldest_age_ms"] == 3000


def test_consumer_and_connection_infos(h):
    h.connect(2, user="alice", client_id="c2")
    h.sub(2, "a", prefetch_count=5)
    h.send("0", group="g")
    [c] = h.b.consumer_infos()
    assert c["id"] == "2/a" and c["queue"] == "q" and c["in_flight"] == 1 and c["groups"] == 1
    assert c["prefetch"] == 5 and c["ack_mode"] == "client-individual"
    conns = {c["id"]: c for c in h.b.connection_infos()}
    assert conns[2]["user"] == "alice" and conns[2]["client_id"] == "c2"
    assert conns[2]["in_flight"] == 1 and conns[1]["sent"] == 1


def test_group_state_counts(h):
    h.sub(2, "a")
    h.send("0", group="g")
    h.b.park_group("q", "p", h.now)
    assert h.b.group_state_counts("q") == {"ready": 0, "owned": 1, "draining": 0, "parked": 1}


def test_create_delete_queue(h):
    h.b.create_queue("orders", {"group-buckets": 4}, h.now)
    assert h.b.take_records() == [
        QueueDeclared("orders", "orders", "anycast", {"group-buckets": 4})
    ]
    with pytest.raises(Conflict):
        h.b.create_queue("orders", {}, h.now)
    with pytest.raises(InvalidSetting):
        h.b.create_queue("x", {"nope": 1}, h.now)
    h.sub(2, "a", dest="/queue/orders")
    h.b.delete_queue("orders", h.now)
    h.pump()
    assert "orders" not in h.b.queues
    assert h.closed and h.closed[0].conn_id == 2
    with pytest.raises(NotFound):
        h.b.delete_queue("orders", h.now)


def test_purge_keeps_in_flight(h):
    h.sub(2, "a", prefetch_count=1)
    for i in range(5):
        h.send(str(i), group=f"g{i % 2}", persistent="true")
    assert h.b.purge_queue("q", h.now) == 4
    h.pump()
    q = h.b.queue_infos()[0]
    assert q["depth"] == 0 and q["in_flight"] == 1
    assert len(h.store._state.messages["q"]) == 1
    h.ack(h.by_sub[(2, "a")][0])
    h.send("after", group="g0")
    assert h.got(2, "a") == ["0", "after"]


def test_browse_in_queue_order_without_consuming(h):
    h.sub(2, "a", prefetch_count=1)
    for i in range(5):
        h.send(str(i), group=f"g{i % 2}")
    assert [m.body for m in h.b.browse("q", 3)] == [b"1", b"2", b"3"]
    assert h.b.queue_infos()[0]["depth"] == 4


def test_park_and_resume_records(h):
    h.b.create_queue("q", {}, h.now)
    h.b.park_group("q", "g", h.now)
    h.b.resume_group("q", "g", h.now)
    recs = h.b.take_records()
    assert recs[-2:] == [GroupParked("q", "g"), GroupResumed("q", "g")]


def test_unknown_queue_management(h):
    for call in (
        lambda: h.b.purge_queue("nope", h.now),
        lambda: h.b.browse("nope", 1),
        lambda: h.b.park_group("nope", "g", h.now),
        lambda: h.b.log_queue("nope"),
    ):
        with pytest.raises(NotFound):
            call()


def test_draining_state_visible(h):
    h.sub(2, "a")
    h.send("0", group="g")
    h.b.reset_groups("q", "g", h.now)
    assert h.groups()["g"]["state"] == "draining"
    assert h.groups()["g"]["owner"] == "2/a"
