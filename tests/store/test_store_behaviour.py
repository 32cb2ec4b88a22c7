"""Store behaviour through the Store protocol: every test runs on both stores."""

from __future__ import annotations

import threading

import pytest
from store_helpers import ids, msg

from shoal.records import (
    DeliveryCounted,
    GroupBound,
    GroupParked,
    GroupResumed,
    LogCommitted,
    MessageRemoved,
    MessageStored,
    QueueDeclared,
    QueueDeleted,
    SinkBatchPublished,
)


def test_empty_store_recovers_nothing(harness):
    rec = harness.open()
    assert rec.queues == {} and rec.messages == {} and rec.parked == set()
    assert rec.log_commits == {} and rec.sink_batches == {}
    assert rec.next_message_id == 1
    assert rec.notes == []


def test_messages_keep_their_order_per_queue_across_restart(harness):
    harness.open()
    s = harness.store
    s.append([msg(1, "a"), msg(2, "b")])
    s.append([msg(3, "a")])
    s.append([msg(4, "b"), msg(5, "a")])
    s.sync()
    rec = harness.restart()
    assert ids(rec, "a") == [1, 3, 5]
    assert ids(rec, "b") == [2, 4]
    assert rec.messages["a"][0] == msg(1, "a")
    assert rec.next_message_id == 6


def test_removed_messages_stay_removed(harness):
    harness.open()
    s = harness.store
    s.append([msg(i) for i in range(1, 6)])
    s.append([MessageRemoved("q", 2), MessageRemoved("q", 4)])
    s.append([MessageRemoved("q", 99), MessageRemoved("nope", 1)])  # unknown: ignored
    s.sync()
    rec = harness.restart()
    assert ids(rec) == [1, 3, 5]
    assert rec.next_message_id == 6


def test_delivery_counts_survive_restart(harness):
    harness.open()
    s = harness.store
    s.append([msg(1), msg(2, delivery_count=1)])
    s.append([DeliveryCounted("q", 1, 1)])
    s.append([DeliveryCounted("q", 1, 3), DeliveryCounted("q", 77, 5)])
    s.sync()
    rec = harness.restart()
    assert [(m.id, m.delivery_count) for m in rec.messages["q"]] == [(1, 3), (2, 1)]


def test_message_fields_round_trip(harness):
    harness.open()
    m = MessageStored(
        queue="orders",
        id=42,
        destination="/queue/orders?group-buckets=4",
        headers={"JMSXGroupID": "g1", "JMSXGroupSeq": "-1", "ünï": "cödé", "empty": ""},
        body=bytes(range(256)) * 3,
        group="g1",
        group_seq=-1,
        expires=1_800_000_000_000,
        priority=9,
        timestamp=1_700_000_000_123,
        delivery_count=2,
    )
    harness.store.append([m, msg(43, "orders", group="", headers={})])
    harness.store.sync()
    rec = harness.restart()
    assert rec.messages["orders"] == [m, msg(43, "orders", group="", headers={})]


def test_queue_declarations_and_deletions(harness):
    harness.open()
    s = harness.store
    qa = QueueDeclared("a", "a", "anycast", {"group-buckets": 4, "exclusive": True})
    sub = QueueDeclared("t.sub", "t", "multicast", {}, subscription="sub", client_id="c1")
    s.append([qa, sub, QueueDeclared("gone", "gone", "anycast")])
    s.append([msg(1, "gone"), msg(2, "a")])
    s.append([GroupParked("gone", "g"), LogCommitted("gone", 0, 5)])
    s.append([QueueDeleted("gone")])
    s.sync()
    rec = harness.restart()
    assert rec.queues == {"a": qa, "t.sub": sub}
    assert "gone" not in rec.messages
    assert ids(rec, "a") == [2]
    assert rec.parked == set() and rec.log_commits == {}


def test_redeclared_queue_starts_empty(harness):
    harness.open()
    s = harness.store
    s.append([QueueDeclared("x", "x", "anycast"), msg(1, "x")])
    s.append([QueueDeleted("x")])
    s.append([QueueDeclared("x", "x", "anycast", {"exclusive": True}), msg(2, "x")])
    s.sync()
    rec = harness.restart()
    assert rec.queues["x"].settings == {"exclusive": True}
    assert ids(rec, "x") == [2]


def test_undeclared_queues_keep_messages(harness):
    # Queues from the configuration file are never declared in the store.
    harness.open()
    harness.store.append([msg(1, "configured")])
    harness.store.sync()
    assert ids(harness.restart(), "configured") == [1]


def test_parked_groups(harness):
    harness.open()
    s = harness.store
    s.append([GroupParked("q", "g1"), GroupParked("q", "g2")])
    s.append([GroupResumed("q", "g1"), GroupParked("r", "g1")])
    s.sync()
    assert harness.restart().parked == {("q", "g2"), ("r", "g1")}


def test_log_commits_drop_committed_messages(harness):
    harness.open()
    s = harness.store
    s.append([msg(i, "log", bucket=i % 2, offset=i // 2) for i in range(10)])
    s.append([LogCommitted("log", 0, 3)])  # drops bucket 0 offsets 0,1,2 = ids 0,2,4
    s.append([LogCommitted("log", 0, 2)])  # never goes back
    s.append([msg(10, "log", bucket=0, offset=1)])  # below the commit: dead on arrival
    s.sync()
    rec = harness.restart()
    assert ids(rec, "log") == [1, 3, 5, 6, 7, 8, 9]
    assert rec.log_commits == {("log", 0): 3}
    assert rec.next_message_id == 11


def test_sink_batches_keep_the_highest(harness):
    harness.open()
    s = harness.store
    s.append([SinkBatchPublished("query-1", 3), SinkBatchPublished("query-2", 1)])
    s.append([SinkBatchPublished("query-1", 2), SinkBatchPublished("query-1", 7)])
    s.sync()
    assert harness.restart().sink_batches == {"query-1": 7, "query-2": 1}


def test_bindings_survive_restart_and_a_release_removes_one(harness):
    harness.open()
    s = harness.store
    s.append([GroupBound("q", "a", "n1"), GroupBound("q", "b", "n2")])
    s.append([GroupBound("q", "a", ""), GroupBound("r", "a", "n3")])
    s.sync()
    s.append([GroupBound("q", "c", "n1")])  # never synced: lost in the crash
    assert harness.crash().bindings == {("q", "b"): "n2", ("r", "a"): "n3"}


def test_next_message_id_counts_removed_messages(harness):
    harness.open()
    s = harness.store
    s.append([msg(10), msg(3)])
    s.append([MessageRemoved("q", 10)])
    s.sync()
    assert harness.restart().next_message_id == 11


def test_duplicate_store_keeps_the_first(harness):
    harness.open()
    s = harness.store
    s.append([msg(1), msg(2), msg(1, body=b"again")])
    s.sync()
    rec = harness.restart()
    assert ids(rec) == [1, 2]
    assert rec.messages["q"][0].body == b"body-1"


def test_same_id_in_two_queues_is_two_messages(harness):
    harness.open()
    s = harness.store
    s.append([msg(1, "sub1"), msg(1, "sub2")])
    s.append([MessageRemoved("sub1", 1)])
    s.sync()
    rec = harness.restart()
    assert ids(rec, "sub1") == [] and ids(rec, "sub2") == [1]


def test_unsynced_appends_are_lost_in_a_crash_synced_ones_are_not(harness):
    harness.open()
    s = harness.store
    s.append([msg(1)])
    s.sync()
    s.append([msg(2)])
    rec = harness.crash()
    assert ids(rec) == [1]


def test_close_syncs(harness):
    harness.open()
    harness.store.append([msg(1)])
    assert ids(harness.restart()) == [1]


def test_recovered_state_is_a_copy(harness):
    harness.open()
    harness.store.append([msg(1)])
    harness.store.sync()
    rec = harness.restart()
    rec.messages["q"].clear()
    harness.store.append([msg(2)])
    harness.store.sync()
    assert ids(harness.restart()) == [1, 2]


def test_many_restarts_accumulate(harness):
    harness.open()
    for i in range(1, 6):
        harness.store.append([msg(i)])
        harness.store.sync()
        rec = harness.restart()
        assert ids(rec) == list(range(1, i + 1))
        assert rec.next_message_id == i + 1


def test_append_during_sync_from_another_thread(harness):
    """append() on one thread, sync() on another: every acknowledged batch is
    recovered, in order, and syncs cover many appends (group commit)."""
    harness.open()
    s = harness.store
    stop = threading.Event()
    syncs = 0
    errors: list[BaseException] = []

    def syncer() -> None:
        nonlocal syncs
        try:
            while not stop.is_set():
                s.sync()
                syncs += 1
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    t = threading.Thread(target=syncer)
    t.start()
    n = 3000
    for i in range(1, n + 1):
        s.append([msg(i, body=b"x" * 50)] + ([MessageRemoved("q", i - 1)] if i % 3 == 0 else []))
    stop.set()
    t.join()
    s.sync()
    assert not errors
    rec = harness.restart()
    assert ids(rec) == [i for i in range(1, n + 1) if (i + 1) % 3 != 0]
    assert syncs > 0


@pytest.mark.parametrize("size", [1, 100, 2000])
def test_one_append_is_atomic_whatever_its_size(harness, size):
    harness.open()
    harness.store.append([msg(i, body=b"y" * 100) for i in range(1, size + 1)])
    harness.store.sync()
    assert ids(harness.restart()) == list(range(1, size + 1))


def test_empty_append_is_a_no_op(harness):
    harness.open()
    harness.store.append([])
    harness.store.sync()
    assert harness.restart().messages == {}


def test_changing_a_message_after_append_does_not_change_the_store(harness):
    """Records are mutable; what the store keeps is what was appended."""
    harness.open()
    m = msg(1, body=b"original")
    harness.store.append([m])
    m.body = b""
    m.headers["k"] = "changed"
    m.delivery_count = 9
    harness.store.sync()
    rec = harness.restart()
    assert rec.messages["q"] == [msg(1, body=b"original")]
    rec.messages["q"][0].body = b"mutated after open"
    assert harness.restart().messages["q"] == [msg(1, body=b"original")]
