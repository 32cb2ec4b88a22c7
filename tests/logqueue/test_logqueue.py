"""LogQueue alone and inside the real broker core: buckets, offsets, commits, restore."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shoal.broker.core import Broker
from shoal.broker.hashing import bucket_of
from shoal.broker.logqueue import UNGROUPED_KEY, LogQueue
from shoal.broker.model import Message
from shoal.broker.settings import AddressSettings, QueueSettings
from shoal.errors import Conflict, InvalidDestination, InvalidHeader, NotFound, StoreError
from shoal.records import LogCommitted, MessageStored
from shoal.store.replay_fold import replay

T0 = 1_700_000_000.0
LOG = "?queue-type=log&log-buckets=4"


def msg(i: int, group: str | None, body: bytes = b"x", seq: int = 0) -> Message:
    return Message(i, "q", "/queue/q", {"k": str(i)}, body, group, seq, False, 0, 4, 1000 + i)


def make(buckets: int = 4, **kw) -> tuple[LogQueue, list]:
    records: list = []
    core = SimpleNamespace(records=records)
    return LogQueue("q", QueueSettings(queue_type="log", log_buckets=buckets, **kw), core), records


def test_groups_go_to_their_stable_bucket_with_dense_offsets() -> None:
    q, records = make()
    groups = [f"S{i % 7}" for i in range(50)]
    for i, g in enumerate(groups):
        q.offer(msg(i + 1, g), T0)
    seen: dict[int, int] = {}
    for i, rec in enumerate(records):
        assert isinstance(rec, MessageStored)
        assert rec.bucket == bucket_of(groups[i], 4)
        assert rec.offset == seen.get(rec.bucket, 0)  # dense, in acceptance order
        seen[rec.bucket] = rec.offset + 1
    assert q.end_offsets() == {b: seen.get(b, 0) for b in range(4)}
    # offset order is group order
    for b in range(4):
        entries = q.read(b, 0)
        for g in {e.group for e in entries}:
            ids = [e.id for e in entries if e.group == g]
            assert ids == sorted(ids)


def test_every_message_is_stored_even_non_persistent() -> None:
    q, records = make()
    m = msg(1, "A")
    assert m.persistent is False
    q.offer(m, T0)
    assert len(records) == 1 and records[0].bucket >= 0 and records[0].offset == 0


def test_ungrouped_messages_hash_the_empty_key() -> None:
    q, records = make()
    q.offer(msg(1, None), T0)
    q.offer(msg(2, ""), T0)
    assert [r.bucket for r in records] == [bucket_of(UNGROUPED_KEY, 4)] * 2
    assert [r.offset for r in records] == [0, 1]


def test_read_is_deterministic_and_bounded() -> None:
    q, _ = make(buckets=1)
    for i in range(10):
        q.offer(msg(i + 1, "A", bytes([i])), T0)
    first = q.read(0, 2, 7)
    assert [e.offset for e in first] == [2, 3, 4, 5, 6]
    for _ in range(3):
        assert q.read(0, 2, 7) == first
    q.offer(msg(99, "A"), T0)  # appending later does not change an old range
    assert q.read(0, 2, 7) == first
    assert [e.offset for e in q.read(0, 2, 7, max_rows=2)] == [2, 3]
    assert [e.offset for e in q.read(0, 9, 100)] == [9, 10]  # clamped to the log end
    assert q.read(0, 11, 20) == []
    with pytest.raises(NotFound):
        q.read(0, 5, 3)
    with pytest.raises(NotFound):
        q.read(1, 0, 1)


def test_commit_is_idempotent_monotonic_and_trims() -> None:
    q, records = make(buckets=1)
    for i in range(10):
        q.offer(msg(i + 1, "A", b"abc"), T0)
    records.clear()
    assert q.commit(0, 4) is True
    assert records == [LogCommitted("q", 0, 4)]
    assert q.commit(0, 4) is False and q.commit(0, 2) is False
    assert len(records) == 1
    assert q.start_offsets() == {0: 4}
    assert q.info()["bytes"] == 18 and q.info()["lag"] == 6
    with pytest.raises(Conflict):
        q.read(0, 3, 6)  # trimmed
    assert [e.offset for e in q.read(0, 4, 6)] == [4, 5]
    with pytest.raises(Conflict):
        q.commit(0, 11)  # past the end
    assert q.commit(0, 10) is True
    assert q.info()["depth"] == 0 and q.info()["bytes"] == 0
    q.offer(msg(50, "A"), T0)
    assert q.end_offsets() == {0: 11}


def test_info_has_per_bucket_offsets_and_lag() -> None:
    q, _ = make(buckets=2)
    for i in range(6):
        q.offer(msg(i + 1, f"G{i}"), T0)
    b = bucket_of("G0", 2)
    q.commit(b, 1)
    info = q.info()
    assert info["log_buckets"] == 2
    assert info["enqueued"] == 6 and info["acked"] == 1
    rows = {r["bucket"]: r for r in info["buckets"]}
    assert rows[b]["committed"] == 1 and rows[b]["start"] == 1
    assert sum(r["lag"] for r in rows.values()) == info["lag"] == 5
    assert all(r["lag"] == r["end"] - r["committed"] for r in rows.values())


def test_restore_rejects_a_hole_and_a_wrong_bucket() -> None:
    q, _ = make(buckets=2)
    base = dict(
        queue="q",
        destination="/queue/q",
        headers={},
        body=b"",
        group="A",
        group_seq=0,
        expires=0,
        priority=4,
        timestamp=0,
    )
    q.restore_message(MessageStored(id=1, bucket=0, offset=5, **base))
    q.restore_message(MessageStored(id=2, bucket=0, offset=5, **base))  # duplicate: ignored
    assert q.end_offsets()[0] == 6
    with pytest.raises(StoreError):
        q.restore_message(MessageStored(id=3, bucket=0, offset=8, **base))
    with pytest.raises(StoreError):
        q.restore_message(MessageStored(id=4, bucket=7, offset=0, **base))


# --- inside the broker core -------------------------------------------------------


def broker(**kw) -> Broker:
    b = Broker(AddressSettings(), T0, **kw)
    b.connect(1, T0)
    return b


def send(b: Broker, dest: str, group: str | None, body: bytes, **headers: str) -> None:
    h = dict(headers)
    if group is not None:
        h["JMSXGroupID"] = group
    b.send(1, dest, h, body, T0)


def restart(b: Broker, records: list, **kw) -> Broker:
    nb = Broker(AddressSettings(), T0 + 1, **kw)
    nb.restore(replay(records), T0 + 1)
    nb.connect(1, T0 + 1)
    return nb


def test_core_routes_to_log_queue_and_restores_it() -> None:
    b = broker()
    journal: list = []
    for i in range(40):
        send(b, "/queue/orders" + LOG, f"S{i % 5}", f"o{i}".encode())
    journal += b.take_records()
    q = b.log_queue("orders")
    assert sum(q.end_offsets().values()) == 40
    before = {bk: [(e.id, e.body) for e in q.read(bk, 0)] for bk in range(4)}
    busy = max(range(4), key=lambda bk: q.end_offsets()[bk])
    q.commit(busy, 3)
    journal += b.take_records()

    b2 = restart(b, journal)
    q2 = b2.log_queue("orders")
    assert q2.end_offsets() == q.end_offsets()
    assert q2.committed_offsets() == q.committed_offsets()
    for bk in range(4):
        start = q2.start_offsets()[bk]
        assert [(e.id, e.body) for e in q2.read(bk, start)] == before[bk][start:]
    # new messages continue the offsets and the ids
    send(b2, "/queue/orders", "S0", b"next")
    rec = next(r for r in b2.take_records() if isinstance(r, MessageStored))
    assert rec.offset == q.end_offsets()[rec.bucket]
    assert rec.id > max(e.id for bk in range(4) for e in q.read(bk, q.start_offsets()[bk]))


def test_fully_committed_bucket_keeps_its_end_after_restart() -> None:
    b = broker()
    journal: list = []
    for i in range(5):
        send(b, "/queue/orders?queue-type=log&log-buckets=1", "A", b"x")
    b.log_queue("orders").commit(0, 5)
    journal += b.take_records()
    b2 = restart(b, journal)
    q2 = b2.log_queue("orders")
    assert q2.end_offsets() == {0: 5} and q2.start_offsets() == {0: 5}
    send(b2, "/queue/orders", "A", b"y")
    assert q2.read(0, 5)[0].body == b"y"


def test_log_queue_on_a_topic_is_one_more_subscription() -> None:
    b = broker(
        queues_config={
            "trades-log": {
                "address": "trades",
                "routing": "multicast",
                "queue-type": "log",
                "log-buckets": 2,
            }
        },
        topics=("trades",),
    )
    b.subscribe(1, "s1", "/topic/trades", "auto", {}, T0)
    for i in range(6):
        send(b, "/topic/trades", f"G{i % 3}", f"t{i}".encode())
    delivered = [e for e in b.take_effects() if type(e).__name__ == "Deliver"]
    assert len(delivered) == 6
    q = b.log_queue("trades-log")
    assert sum(q.end_offsets().values()) == 6


def test_stomp_subscribe_to_a_log_queue_is_refused() -> None:
    b = broker()
    send(b, "/queue/orders" + LOG, "A", b"x")
    with pytest.raises(InvalidDestination):
        b.subscribe(1, "s", "/queue/orders", "auto", {}, T0)


def test_default_group_is_the_hash_key_of_ungrouped_messages() -> None:
    b = broker()
    send(b, "/queue/orders?queue-type=log&log-buckets=8&default-group=misc", None, b"x")
    rec = next(r for r in b.take_records() if isinstance(r, MessageStored))
    assert rec.group == "misc" and rec.bucket == bucket_of("misc", 8)


def test_queue_infos_show_log_queues_with_buckets() -> None:
    b = broker()
    send(b, "/queue/orders" + LOG, "A", b"x")
    info = next(q for q in b.queue_infos() if q["name"] == "orders")
    assert info["type"] == "log" and info["lag"] == 1 and len(info["buckets"]) == 4


ops = st.lists(
    st.one_of(
        st.tuples(st.just("send"), st.sampled_from(["A", "B", "C", "D", None])),
        st.tuples(st.just("commit"), st.integers(0, 2), st.integers(0, 30)),
        st.tuples(st.just("restart")),
    ),
    max_size=60,
)


@given(ops)
def test_replay_gives_the_same_logs(program) -> None:
    b = broker()
    journal: list = []
    model: dict[int, list[bytes]] = {0: [], 1: [], 2: []}
    committed = {0: 0, 1: 0, 2: 0}
    n = 0
    for op in program:
        if op[0] == "send":
            n += 1
            send(b, "/queue/L?queue-type=log&log-buckets=3", op[1], str(n).encode())
            model[bucket_of(op[1] or "", 3)].append(str(n).encode())
        elif op[0] == "commit":
            q = b.log_queue("L") if "L" in b.queues else None
            if q is None:
                continue
            off = min(op[2], len(model[op[1]]))
            q.commit(op[1], off)
            committed[op[1]] = max(committed[op[1]], off)
        else:
            journal += b.take_records()
            b = restart(b, journal)
        journal += b.take_records()
    if "L" not in b.queues:
        return
    q = b.log_queue("L")
    for bk in range(3):
        assert q.end_offsets()[bk] == len(model[bk])
        assert q.committed_offsets()[bk] == committed[bk]
        assert [e.body for e in q.read(bk, committed[bk])] == model[bk][committed[bk] :]


def test_barrier_makes_shown_offsets_durable_once() -> None:
    q, records = make(buckets=2)
    assert q.barrier() is False and records == []  # nothing to cover
    q.offer(msg(1, "A"), T0)
    records.clear()
    assert q.barrier() is True
    assert records == [LogCommitted("q", 0, 0)]  # a no-op re-commit: the sync barrier
    assert q.barrier() is False and len(records) == 1  # covered already
    q.offer(msg(2, "B"), T0)
    assert q.barrier() is True


def test_barrier_records_replay_to_nothing() -> None:
    b = broker()
    journal: list = []
    for i in range(4):
        send(b, "/queue/orders?queue-type=log&log-buckets=2", f"G{i}", b"x")
    q = b.log_queue("orders")
    q.barrier()
    journal += b.take_records()
    b2 = restart(b, journal)
    q2 = b2.log_queue("orders")
    assert q2.end_offsets() == q.end_offsets() and q2.committed_offsets() == {0: 0, 1: 0}
    assert q2.barrier() is False  # recovered messages are on disk already


def _rows(n: int) -> list:
    return [
        (
            f"S{i % 7}",
            {"JMSXGroupID": f"S{i % 7}", "JMSXGroupSeq": str(i + 1), "persistent": "true"},
            b"b%d" % i,
        )
        for i in range(n)
    ]


def test_send_many_matches_one_send_per_row() -> None:
    one, many = Broker(AddressSettings(), T0), Broker(AddressSettings(), T0)
    for b in (one, many):
        b.connect(1, T0)
        b.send(1, "/queue/t" + LOG, {}, b"first", T0)  # ids and offsets already advanced
        b.take_records()
    for _, headers, body in _rows(40):
        one.send(1, "/queue/t", headers, body, T0 + 1)
    assert many.send_many(1, "/queue/t", _rows(40), T0 + 1) == 40
    assert many.take_records() == one.take_records()
    assert many.log_queue("t").end_offsets() == one.log_queue("t").end_offsets()
    assert many.connections[1].sent == one.connections[1].sent == 41
    assert many.next_id() == one.next_id()


def test_send_many_is_all_or_nothing_and_leaves_other_targets_to_send() -> None:
    b = Broker(AddressSettings(), T0)
    b.connect(1, T0)
    b.send(1, "/queue/t" + LOG, {}, b"x", T0)
    b.take_records()
    bad = _rows(5)
    bad[3][1]["JMSXGroupSeq"] = "three"
    with pytest.raises(InvalidHeader):
        b.send_many(1, "/queue/t", bad, T0)
    assert b.take_records() == [] and sum(b.log_queue("t").end_offsets().values()) == 1
    temp = _rows(2)
    temp[1][1]["reply-to"] = "/temp-queue/r"
    assert b.send_many(1, "/queue/t", temp, T0) == 0  # send() rewrites it: one at a time
    assert b.send_many(1, "/queue/plain", _rows(3), T0) == 0  # a classic queue
    assert b.send_many(1, "/queue/t", [], T0) == 0
    # the classic queue was created as send() would, but nothing was sent
    assert not [r for r in b.take_records() if isinstance(r, MessageStored)]
