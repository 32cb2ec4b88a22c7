"""Rotation, compaction (with the small state carried forward) and load_body."""

from __future__ import annotations

import os

import pytest
from store_helpers import ids, msg, segments

from shoal.records import (
    DeliveryCounted,
    GroupBound,
    GroupParked,
    LogCommitted,
    MessageRemoved,
    QueueDeclared,
    QueueDeleted,
    SinkBatchPublished,
)
from shoal.store.journal import JournalStore

SEG = 4096
BODY = b"b" * 300


def store(directory, **kw):
    s = JournalStore(directory, segment_size=SEG, **kw)
    return s, s.open()


def reopen(s):
    s.close()
    return store(s.directory)


def fill_and_drain(s, start, n):
    """Store then remove n messages, each pair in one segment's worth of batches."""
    for i in range(start, start + n):
        s.append([msg(i, "churn", body=BODY)])
        s.append([MessageRemoved("churn", i)])
        s.sync()


def test_segments_rotate_when_full(tmp_path):
    s, _ = store(tmp_path)
    for i in range(1, 41):
        s.append([msg(i, body=BODY)])
        s.sync()
    names = [p.name for p in segments(tmp_path)]
    assert len(names) >= 4
    assert names[0] == "0000000000000001.seg" and names[1] == "0000000000000002.seg"
    assert all(p.stat().st_size == SEG for p in segments(tmp_path))  # preallocated
    s, rec = reopen(s)
    assert ids(rec) == list(range(1, 41))
    s.close()


def test_without_preallocation_files_grow_as_written(tmp_path):
    s = JournalStore(tmp_path, segment_size=SEG, preallocate=False)
    s.open()
    for i in range(1, 30):
        s.append([msg(i, body=BODY)])
        s.sync()
    s.close()
    assert all(p.stat().st_size <= SEG for p in segments(tmp_path))
    s = JournalStore(tmp_path, segment_size=SEG, preallocate=False)
    assert ids(s.open()) == list(range(1, 30))
    s.close()


def test_a_batch_bigger_than_a_segment_gets_a_segment_of_its_own(tmp_path):
    s, _ = store(tmp_path)
    s.append([msg(1)])
    s.append([msg(i, body=BODY) for i in range(2, 40)])  # ~13 KiB in one frame
    s.append([msg(40)])
    s.sync()
    s, rec = reopen(s)
    assert ids(rec) == list(range(1, 41))
    sizes = sorted(p.stat().st_size for p in segments(tmp_path))
    assert sizes[-1] > SEG
    s.close()


def test_dead_segments_are_deleted_and_the_state_carried_forward(tmp_path):
    s, _ = store(tmp_path)
    decl = QueueDeclared("q", "q", "anycast", {"group-buckets": 8})
    s.append([decl, GroupParked("q", "stuck"), SinkBatchPublished("spark", 9)])
    s.append([LogCommitted("log", 1, 4), GroupBound("q", "g", "n2")])
    s.append([msg(1000, "churn")])  # the highest id, removed right away
    s.append([MessageRemoved("churn", 1000)])
    s.sync()
    fill_and_drain(s, 1, 60)
    live = [p.name for p in segments(tmp_path)]
    assert "0000000000000001.seg" not in live  # the segment with the declarations is gone
    assert len(live) <= 2
    s, rec = reopen(s)
    assert rec.queues == {"q": decl}
    assert rec.parked == {("q", "stuck")}
    assert rec.sink_batches == {"spark": 9}
    assert rec.log_commits == {("log", 1): 4}
    assert rec.bindings == {("q", "g"): "n2"}
    assert rec.next_message_id == 1001  # although no segment holds id 1000 any more
    assert rec.messages == {}
    s.close()


def test_a_long_lived_message_keeps_only_its_own_segment(tmp_path):
    s, _ = store(tmp_path)
    s.append([msg(1, "slow", body=BODY)])
    s.sync()
    fill_and_drain(s, 100, 80)
    names = [p.name for p in segments(tmp_path)]
    assert names[0] == "0000000000000001.seg"  # still holds message 1
    assert len(names) <= 3  # the middle ones went
    assert s.live_counts()[1] == 1
    s, rec = reopen(s)
    assert ids(rec, "slow") == [1] and "churn" not in rec.messages
    s.close()


def test_a_segment_with_removals_of_older_messages_stays_while_they_are_on_disk(tmp_path):
    """Segment 2 removes messages of segment 1 and holds nothing live itself.
    Deleting it while segment 1 exists would bring those messages back."""
    s, _ = store(tmp_path)
    for i in range(1, 11):
        s.append([msg(i, body=BODY)])
    s.sync()
    first = {p.name for p in segments(tmp_path)}
    fill_and_drain(s, 100, 12)  # rotate
    s.append([MessageRemoved("q", i) for i in range(2, 11)])  # keep message 1
    s.sync()
    fill_and_drain(s, 200, 40)
    s, rec = reopen(s)
    assert ids(rec) == [1]
    assert first & {p.name for p in segments(tmp_path)}
    # once message 1 goes, everything old can go
    s.append([MessageRemoved("q", 1)])
    s.sync()
    fill_and_drain(s, 300, 30)
    assert len(segments(tmp_path)) <= 2
    s, rec = reopen(s)
    assert rec.messages == {}
    s.close()


def test_delivery_counts_of_old_messages_survive_compaction(tmp_path):
    s, _ = store(tmp_path)
    s.append([msg(1, body=BODY)])
    s.sync()
    fill_and_drain(s, 100, 15)
    s.append([DeliveryCounted("q", 1, 4)])
    s.sync()
    fill_and_drain(s, 200, 40)
    s, rec = reopen(s)
    assert [(m.id, m.delivery_count) for m in rec.messages["q"]] == [(1, 4)]
    s.close()


def test_queue_deletion_in_a_later_segment_is_kept_while_needed(tmp_path):
    s, _ = store(tmp_path)
    s.append([QueueDeclared("x", "x", "anycast")] + [msg(i, "x", body=BODY) for i in range(1, 4)])
    s.append([msg(50, "keep", body=BODY)])  # pins segment 1
    s.sync()
    fill_and_drain(s, 100, 15)
    s.append([QueueDeleted("x")])
    s.sync()
    fill_and_drain(s, 200, 40)
    s, rec = reopen(s)
    assert "x" not in rec.queues and "x" not in rec.messages
    assert ids(rec, "keep") == [50]
    s.close()


def test_compaction_happens_at_open_too(tmp_path, monkeypatch):
    # e.g. the process died between the sync and the deletions: none happens
    # (os.unlink, not a JournalStore method: a compiled store calls its own)
    monkeypatch.setattr(os, "unlink", lambda path: None)
    s, _ = store(tmp_path)
    for i in range(1, 30):
        s.append([msg(i, body=BODY)])
        s.sync()
    s.append([MessageRemoved("q", i) for i in range(1, 30)])
    s.close()
    monkeypatch.undo()
    before = len(segments(tmp_path))
    assert before > 2
    s, rec = store(tmp_path)
    assert rec.messages == {}
    assert len(segments(tmp_path)) < before
    s.close()


def test_recovery_after_compaction_many_times(tmp_path):
    s, _ = store(tmp_path)
    live: list[int] = []
    nxt = 1
    for round_ in range(6):
        for _ in range(25):
            s.append([msg(nxt, body=BODY)])
            live.append(nxt)
            nxt += 1
            if len(live) > 7:
                s.append([MessageRemoved("q", live.pop(0))])
            s.sync()
        s, rec = reopen(s)
        assert ids(rec) == live, round_
        assert rec.next_message_id == nxt
    assert len(segments(tmp_path)) <= 4
    s.close()


# -- load_body ----------------------------------------------------------------


def test_load_body_reads_live_bodies_back(tmp_path):
    s, _ = store(tmp_path)
    bodies = {i: bytes([i]) * (i * 37) for i in range(1, 40)}
    for i, b in bodies.items():
        s.append([msg(i, body=b)])
    s.sync()
    assert all(s.load_body(i) == b for i, b in bodies.items())
    s.append([MessageRemoved("q", 5)])
    s.sync()
    with pytest.raises(KeyError):
        s.load_body(5)
    s, _rec = reopen(s)
    assert s.load_body(39) == bodies[39]
    assert s.load_body(1, queue="q") == bodies[1]
    with pytest.raises(KeyError):
        s.load_body(1, queue="other")
    s.close()


def test_load_body_of_an_unsynced_message_reads_the_pending_batch(tmp_path):
    s, _ = store(tmp_path)
    s.append([msg(1)])
    assert s.load_body(1) == b"body-1"
    with pytest.raises(KeyError):
        s.load_body(2)
    s.sync()
    assert s.load_body(1) == b"body-1"
    s.close()


def test_load_body_after_the_broker_dropped_the_body_from_memory(tmp_path):
    """Records are mutable: paging may empty m.body once it is appended."""
    s, _ = store(tmp_path)
    m = msg(1, body=b"paged out" * 10)
    s.append([m])
    m.body = b""
    assert s.load_body(1) == b"paged out" * 10  # from the pending batch
    s.sync()
    assert s.load_body(1) == b"paged out" * 10  # from the segment
    s.close()


def test_load_body_with_the_same_id_in_two_queues(tmp_path):
    s, _ = store(tmp_path)
    s.append([msg(1, "a", body=b"same"), msg(1, "b", body=b"same")])
    s.append([MessageRemoved("a", 1)])
    s.sync()
    assert s.load_body(1, queue="b") == b"same"
    s.close()


def test_load_body_of_wide_encoded_messages(tmp_path):
    s, _ = store(tmp_path)
    s.append([msg(1, headers={"nul": "a\0b"}, body=b"wide")])
    s.sync()
    assert s.load_body(1) == b"wide"
    s, rec = reopen(s)
    assert rec.messages["q"][0].headers == {"nul": "a\0b"}
    assert s.load_body(1) == b"wide"
    s.close()


def test_stats(tmp_path):
    s, _ = store(tmp_path)
    for i in range(1, 30):
        s.append([msg(i, body=BODY)])
        s.sync()
    s.append([msg(99)])
    st = s.stats()
    assert st["segments"] == len(segments(tmp_path)) >= 2
    assert st["bytes"] == sum(p.stat().st_size for p in segments(tmp_path))
    assert st["live_messages"] == 29 and st["pending_batches"] == 1
    assert st["batches_written"] >= 29
    assert all(isinstance(v, int) for v in st.values())
    s.close()
