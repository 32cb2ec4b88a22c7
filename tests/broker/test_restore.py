"""Records and restart: only persistent messages survive; order and counts do."""

from __future__ import annotations

from shoal.records import DeliveryCounted, MessageRemoved, MessageStored


def test_records_for_persistent_messages_only(h):
    h.sub(2, "a")
    h.connect(1)
    h.b.send(1, "/queue/q", {"persistent": "true"}, b"p", h.now)
    h.b.send(1, "/queue/q", {}, b"np", h.now)
    recs = h.b.take_records()
    stored = [r for r in recs if isinstance(r, MessageStored)]
    assert [r.body for r in stored] == [b"p"]
    ds = h.pump()
    for d in ds:
        h.b.ack(2, d.ack_id, h.now)
    recs = h.b.take_records()
    assert recs == [MessageRemoved("q", stored[0].id)]


def test_default_persistent_setting(h):
    h.send("x", dest="/queue/q?default-persistent=true")
    h.send("y", persistent="false")
    assert list(h.store._state.messages["q"]) == [h.b.browse("q", 1)[0].id]


def test_restart_keeps_persistent_in_order_and_drops_the_rest(h):
    for i in range(6):
        h.send(str(i), group="g", persistent="true" if i % 2 == 0 else "false")
    h2 = h.restart()
    h2.sub(2, "a")
    assert h2.got(2, "a") == ["0", "2", "4"]
    assert all(not d.redelivered for d in h2.by_sub[(2, "a")])


def test_restart_redelivered_flag_survives(h):
    h.sub(2, "a")
    d = h.send("x", persistent="true")[0]
    h.b.nack(2, d.ack_id, h.now)
    assert DeliveryCounted("q", d.message.id, 1) in h.b.records
    h.pump()
    h2 = h.restart()
    h2.sub(3, "b")
    [again] = h2.by_sub[(3, "b")]
    assert again.redelivered and again.message.delivery_count == 1


def test_restart_ids_keep_increasing(h):
    h.send("x", persistent="true")
    h.send("y", persistent="true")
    h2 = h.restart()
    h2.sub(2, "a")
    h2.send("z")
    ids = [d.message.id for d in h2.by_sub[(2, "a")]]
    assert ids == sorted(ids) and len(set(ids)) == 3


def test_restart_keeps_parked_groups(h):
    h.b.create_queue("q", {}, h.now)
    h.b.park_group("q", "g", h.now)
    h.send("0", group="g", persistent="true")
    h2 = h.restart()
    h2.sub(2, "a")
    assert h2.got(2, "a") == []
    assert h2.groups()["g"]["state"] == "parked"
    h2.b.resume_group("q", "g", h2.now)
    h2.pump()
    assert h2.got(2, "a") == ["0"]


def test_restart_unsettled_come_back_in_group_order(h):
    h.sub(2, "a", prefetch_count=2)
    for i in range(4):
        h.send(str(i), group="g", persistent="true")
    h.ack(h.by_sub[(2, "a")][0])
    h2 = h.restart()
    h2.sub(3, "b")
    assert h2.got(3, "b") == ["1", "2", "3"]


def test_restart_queue_settings_survive(h):
    h.send("x", dest="/queue/orders?group-buckets=3", persistent="true")
    h2 = h.restart()
    info = {i["name"]: i for i in h2.b.queue_infos()}
    assert info["orders"]["settings"]["group-buckets"] == 3
    assert info["orders"]["depth"] == 1


def test_restore_emits_no_records(h):
    h.send("x", persistent="true")
    h2 = h.restart()
    assert h2.b.take_records() == []
