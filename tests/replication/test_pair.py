"""ReplicationPrimary and ReplicationBackup joined by hand: streaming,
receipts under both sync modes, catch-up by copying, degradation through
the in-sync flag, fencing by epoch."""

from __future__ import annotations

import pytest

from shoal.replication import (
    Ack,
    Apply,
    Copy,
    CopyWanted,
    Data,
    Hello,
    Install,
    Message,
    RecordInSync,
    ReplicationBackup,
    ReplicationPrimary,
    Stale,
)


def pass_all(
    src: ReplicationPrimary | ReplicationBackup,
    dst: ReplicationPrimary | ReplicationBackup,
    now: int = 0,
) -> list[Message]:
    msgs = src.take_outgoing()
    for m in msgs:
        dst.receive(m, now)
    return msgs


def record_flag(p: ReplicationPrimary) -> list[RecordInSync]:
    """ZooKeeper accepts every RecordInSync asked so far."""
    reqs = [r for r in p.take_requests() if isinstance(r, RecordInSync)]
    for r in reqs:
        p.in_sync_recorded(r.version)
    return reqs


def in_sync_pair(sync: str = "fsync") -> tuple[ReplicationPrimary, ReplicationBackup]:
    """A primary of epoch 1 and a backup that followed it from the start."""
    p = ReplicationPrimary(1, 0, sync=sync, timeout_ms=1000, resend_ms=100)
    b = ReplicationBackup(1, 0, term=1, seq=0)
    pass_all(b, p)  # Hello(1, 1, 0): streams from batch 1
    assert p.streaming
    p.append(b"r1", 0)
    pass_all(p, b)
    assert [type(w) for w in b.take_writes()] == [Apply]
    b.synced(1, 1)
    pass_all(b, p)
    assert [r.in_sync for r in record_flag(p)] == [True]
    assert p.in_sync and not p.degraded
    return p, b


def test_a_new_term_starts_degraded_and_receipts_alone() -> None:
    p = ReplicationPrimary(1, 0)
    assert p.degraded
    seq = p.append(b"r1", 0)
    assert seq == 1 and p.may_receipt(1)
    assert p.take_outgoing() == []  # no backup yet


def test_fsync_receipts_wait_for_the_backups_disk() -> None:
    p, b = in_sync_pair("fsync")
    seq = p.append(b"r2", 10)
    assert not p.may_receipt(seq)
    pass_all(p, b)
    writes = b.take_writes()
    assert isinstance(writes[0], Apply) and writes[0].payload == b"r2"
    pass_all(b, p)  # received, not durable
    assert not p.may_receipt(seq) and p.received == 2
    b.synced(1, 2)
    pass_all(b, p)
    assert p.may_receipt(seq) and p.lag_records == 0


def test_received_receipts_need_the_backups_memory_only() -> None:
    p, b = in_sync_pair("received")
    seq = p.append(b"r2", 10)
    assert not p.may_receipt(seq)
    pass_all(p, b)
    pass_all(b, p)
    assert p.may_receipt(seq)


def test_a_backup_from_another_term_is_copied_then_streamed() -> None:
    p = ReplicationPrimary(2, 0)
    for i in range(3):
        p.append(b"r%d" % i, 0)
    b = ReplicationBackup(2, 0, term=1, seq=9)  # last term's journal
    pass_all(b, p)
    assert [type(r) for r in p.take_requests()] == [CopyWanted]
    p.copy_ready(p.last_seq, b"IMAGE", 0)
    p.append(b"r3", 0)  # appended while the copy travels
    assert pass_all(p, b) == [Copy(2, 3, b"IMAGE")]
    assert [(type(w), w.seq) for w in b.take_writes()] == [(Install, 3)]
    pass_all(b, p)  # the copy's ack: the stream goes on after it
    assert pass_all(p, b) == [Data(2, 4, b"r3")]
    assert [(type(w), w.seq) for w in b.take_writes()] == [(Apply, 4)]
    b.synced(2, 4)
    pass_all(b, p)
    assert [r.in_sync for r in record_flag(p)] == [True]
    assert p.copies == 1 and b.copies == 1


def test_a_backup_behind_in_the_same_term_resumes_where_it_was() -> None:
    p, b = in_sync_pair()
    p.append(b"r2", 0)
    p.take_outgoing()  # lost
    b2 = ReplicationBackup(1, 50, term=1, seq=1)  # restarted with batch 1 on disk
    pass_all(b2, p, 50)
    assert pass_all(p, b2, 50) == [Data(1, 2, b"r2")]
    assert p.take_requests() == []


def test_lost_data_is_sent_again_after_resend_ms() -> None:
    p, b = in_sync_pair()
    p.append(b"r2", 0)
    p.take_outgoing()  # lost on the way
    assert p.next_timer() == 100
    p.handle_timer(99)
    assert p.take_outgoing() == []
    p.handle_timer(100)
    assert p.take_outgoing() == [Data(1, 2, b"r2")]


def test_a_silent_backup_degrades_the_pair_once_recorded() -> None:
    p, _b = in_sync_pair()
    seq = p.append(b"r2", 5000)
    p.handle_timer(5999)
    assert p.take_requests() == []
    p.handle_timer(6000)
    reqs = p.take_requests()
    assert [(type(r), getattr(r, "in_sync", None)) for r in reqs] == [(RecordInSync, False)]
    assert not p.may_receipt(seq)  # not before ZooKeeper says the backup is out
    assert isinstance(reqs[0], RecordInSync)
    p.in_sync_recorded(reqs[0].version)
    assert p.degraded and p.may_receipt(seq) and p.degradations == 1


def test_an_older_flag_write_landing_late_keeps_receipts_waiting() -> None:
    p = ReplicationPrimary(1, 0, timeout_ms=1000)
    b = ReplicationBackup(1, 0, term=1, seq=0)
    pass_all(b, p)
    p.append(b"r1", 0)
    pass_all(p, b)
    b.synced(1, 1)
    pass_all(b, p)
    [asked_true] = p.take_requests()  # caught up: True asked, not recorded yet
    p.append(b"r2", 0)
    p.handle_timer(1000)  # the backup is silent: False asked
    [asked_false] = p.take_requests()
    assert isinstance(asked_true, RecordInSync) and isinstance(asked_false, RecordInSync)
    p.in_sync_recorded(asked_true.version)  # True landed: a takeover is possible now
    assert p.in_sync and not p.may_receipt(2)
    p.in_sync_recorded(asked_false.version)
    assert p.degraded and p.may_receipt(2)


def test_a_backup_too_far_behind_is_dropped_and_copies_later() -> None:
    p, b = in_sync_pair()
    p.max_lag_bytes = 10
    for i in range(6):
        p.append(b"xx%d" % i, 0)
    reqs = record_flag(p)
    assert [r.in_sync for r in reqs] == [False]
    p.append(b"more", 0)
    assert not p.streaming and p.may_receipt(p.last_seq)
    p.take_outgoing()
    b.handle_timer(10_000)  # hears nothing: hello again
    pass_all(b, p, 10_000)
    assert [type(r) for r in p.take_requests()] == [CopyWanted]


def test_a_higher_epoch_fences_the_primary() -> None:
    p, _b = in_sync_pair()
    p.append(b"r2", 0)
    p.receive(Stale(2), 0)
    assert p.fenced and p.receiptable() == 0
    assert p.take_outgoing() == [] and p.next_timer() is None
    with pytest.raises(ValueError, match="fenced"):
        p.append(b"r3", 0)


def test_a_backup_refuses_an_old_terms_data() -> None:
    b = ReplicationBackup(3, 0, term=3, seq=0)
    b.take_outgoing()
    b.receive(Data(2, 1, b"stale"), 0)
    assert b.take_writes() == [] and b.take_outgoing() == [Stale(3)] and b.refused == 1


def test_a_backup_that_hears_of_a_new_term_says_hello_and_waits_for_a_copy() -> None:
    b = ReplicationBackup(1, 0, term=1, seq=5)
    b.take_outgoing()
    b.receive(Data(2, 1, b"new"), 0)
    assert b.take_writes() == []
    assert b.take_outgoing() == [Hello(2, 1, 5)]
    assert not b.can_take_over(2, True)
    b.receive(Copy(2, 7, b"img"), 0)
    assert b.can_take_over(2, True) and not b.can_take_over(2, False)


def test_a_backup_acks_a_gap_or_a_repeat_with_where_it_is() -> None:
    b = ReplicationBackup(1, 0, term=1, seq=0)
    b.take_outgoing()
    b.receive(Data(1, 2, b"gap"), 0)
    b.receive(Data(1, 1, b"one"), 0)
    b.receive(Data(1, 1, b"one"), 0)
    assert [w.seq for w in b.take_writes()] == [1]
    assert b.take_outgoing() == [Ack(1, 1, 0)]  # cumulative: only the last one


def test_a_silent_primary_gets_hello_again() -> None:
    b = ReplicationBackup(1, 0, hello_ms=300)
    assert b.take_outgoing() == [Hello(1, 0, 0)]
    b.handle_timer(299)
    assert b.take_outgoing() == []
    b.handle_timer(300)
    assert b.take_outgoing() == [Hello(1, 0, 0)]


@pytest.mark.parametrize(
    "kwargs",
    [{"sync": "disk"}, {"timeout_ms": 0}, {"resend_ms": -1}, {"max_lag_bytes": 0}],
)
def test_bad_settings_are_refused(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        ReplicationPrimary(1, 0, **kwargs)  # type: ignore[arg-type]


def test_a_zombie_primarys_batches_are_refused_by_the_new_live_process() -> None:
    old, b = in_sync_pair()
    # the old live process pauses past its session; its backup takes over
    assert b.can_take_over(1, True)
    new = ReplicationPrimary(2, 0)
    seq = old.append(b"late", 0)  # the zombie runs on
    for m in old.take_outgoing():
        new.receive(m, 0)
    assert new.take_outgoing() == [Stale(2)]
    assert not old.may_receipt(seq)  # it waits for a backup that is gone
    old.receive(Stale(2), 0)
    assert old.fenced and not old.may_receipt(seq)


def test_two_primaries_of_one_epoch_refuse_each_other() -> None:
    p = ReplicationPrimary(3, 0)
    p.receive(Data(3, 1, b"x"), 0)
    assert p.take_outgoing() == [Stale(3)] and not p.fenced


def test_a_backup_learns_a_new_term_from_a_stale_answer() -> None:
    b = ReplicationBackup(1, 0, term=1, seq=3)
    b.take_outgoing()
    b.receive(Stale(2), 0)
    assert b.epoch == 2 and b.take_outgoing() == [Hello(2, 1, 3)]


def test_an_ack_counts_in_the_term_of_the_backups_batches() -> None:
    # a backup that heard of term 2 but still holds term 1's batches 1..5
    b = ReplicationBackup(2, 0, term=1, seq=5)
    b.take_outgoing()
    b.receive(Data(1, 6, b"old"), 0)  # refused: Stale
    b.synced(1, 5)
    p = ReplicationPrimary(2, 0)
    p.append(b"new", 0)
    p.receive(Hello(2, 1, 5), 0)
    p.copy_ready(0, b"", 0)
    p.receive(Ack(1, 5, 5), 0)  # term 1's numbers: not term 2's batch 1
    assert p.received == 0 and not p.streaming
    assert Stale(2) not in p.take_outgoing()
