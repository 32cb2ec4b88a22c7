"""Paging (address-full-policy "page"): bodies of a persistent backlog past the
memory budget live only in the journal; order and groups are unaffected."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest

from shoal.broker.core import Broker
from shoal.broker.effects import Deliver, PagedCopy, ProducerFlow
from shoal.broker.settings import AddressSettings, QueueSettings
from shoal.records import MessageStored
from shoal.store.journal import JournalStore

from .conftest import Harness

BUDGET = 100


@pytest.fixture
def journal(tmp_path: Any) -> JournalStore:
    return JournalStore(tmp_path / "journal", segment_size=1 << 20, preallocate=False)


def paging(journal: JournalStore, budget: int = BUDGET, **settings: Any) -> Harness:
    raw = {"max-size-bytes": budget, **settings}
    return Harness({"#": raw}, store=journal, paging=True)


def send_p(
    h: Harness, body: str, group: str | None = None, dest: str = "/queue/q", **headers: Any
) -> list[Deliver]:
    return h.send(body, dest=dest, group=group, persistent="true", **headers)


def info(h: Harness, queue: str = "q") -> dict[str, Any]:
    return next(q for q in h.b.queue_infos() if q["name"] == queue)


def test_page_is_the_default_policy():
    assert QueueSettings().address_full_policy == "page"


def test_bodies_past_the_budget_are_dropped_and_read_back_in_order(journal):
    h = paging(journal)
    bodies = [f"m{i:02d}".ljust(30, ".") for i in range(20)]
    for b in bodies:
        send_p(h, b)
    q = info(h)
    # 30 + 30 + 30 fit under 100; every later message is paged out.
    assert q["bytes"] == 90 and q["paged"] == 17 and q["paged_bytes"] == 17 * 30
    assert h.b.total_bytes == 90
    browsed = h.b.browse("q", 100)
    assert [m.body is None for m in browsed] == [False] * 3 + [True] * 17
    assert all(m.size == 30 for m in browsed)
    assert h.flow == []  # persistent producers are not blocked under "page"
    h.sub(2, "a", prefetch_count=5)
    got = []
    while len(got) < 20:
        ds = h.by_sub[(2, "a")][len(got) :]
        assert ds, "stalled"
        for d in ds:
            got.append(d)
            h.ack(d)
    assert h.bodies(got) == bodies
    q = info(h)
    assert q["bytes"] == 0 and q["paged"] == 0 and q["paged_bytes"] == 0 and q["depth"] == 0
    assert h.b.total_bytes == 0


def test_paged_delivery_carries_no_body_until_the_server_reads_it(journal):
    h = paging(journal, budget=0)
    send_p(h, "abc")
    (m,) = h.b.browse("q", 5)
    assert m.body is None
    h.b.connect(2, h.now)
    h.b.subscribe(2, "a", "/queue/q", "client-individual", {}, h.now)
    (d,) = h.b.take_page_ins()
    assert d.message is m and d.body is None  # the core never reads files
    assert h.b.take_effects() == [d]
    assert journal.load_body(m.id, "q") == b"abc"


def test_non_persistent_messages_are_never_paged_they_block(journal):
    h = paging(journal, budget=10)
    h.send("12345", conn=1)
    h.send("12345", conn=1)
    assert h.flow == [ProducerFlow(1, True)]
    assert all(m.body is not None for m in h.b.browse("q", 5))
    assert info(h)["paged"] == 0 and info(h)["bytes"] == 10


def test_no_paging_without_a_store_that_reads_bodies_back():
    h = Harness({"#": {"max-size-bytes": 10}})  # MemoryStore: cannot read bodies back
    h.send("12345", persistent="true", conn=1)
    h.send("12345", persistent="true", conn=1)
    assert h.flow == [ProducerFlow(1, True)]  # "page" falls back to "block"
    assert info(h)["paged"] == 0


def test_non_durable_queues_are_not_paged(journal):
    h = paging(journal, budget=0)
    h.sub(1, "own", dest="/temp-queue/r", prefetch_count=1)
    h.send("x", dest="/temp-queue/r", conn=1, persistent="true")
    h.send("y", dest="/temp-queue/r", conn=1, persistent="true")
    (name,) = [q["name"] for q in h.b.queue_infos() if q["temporary"]]
    assert info(h, name)["paged"] == 0


def test_groups_keep_order_and_owners_with_a_paged_backlog(journal):
    h = paging(journal, budget=200)
    sent: dict[str, list[str]] = defaultdict(list)
    for i in range(120):
        g = f"g{i % 7}"
        body = f"{g}-{i:03d}".ljust(20, "_")
        sent[g].append(body)
        send_p(h, body, group=g)
    assert info(h)["paged"] > 100
    h.sub(2, "a", prefetch_count=3)
    h.sub(3, "b", prefetch_count=3)
    received: dict[str, list[str]] = defaultdict(list)
    owner: dict[str, tuple[int, str]] = {}
    done = 0
    while done < 120:
        progressed = False
        for key in [(2, "a"), (3, "b")]:
            ds = list(h.by_sub[key])
            h.by_sub[key].clear()
            for d in ds:
                body = h.bodies([d])[0]
                g = d.message.group
                assert owner.setdefault(g, key) == key  # sticky: one consumer per group
                received[g].append(body)
                h.ack(d)
                done += 1
                progressed = True
        assert progressed or done == 120, "stalled"
    assert dict(received) == dict(sent)
    assert info(h)["paged"] == 0 and info(h)["bytes"] == 0


def test_other_groups_flow_while_one_group_has_a_paged_backlog(journal):
    h = paging(journal, budget=50)
    h.sub(2, "slow", prefetch_count=1)
    h.sub(3, "fast", prefetch_count=100)
    first = send_p(h, "A-0".ljust(10), group="A")
    assert [d.sub_id for d in first] == ["slow"]  # A is bound to the slow consumer
    for i in range(1, 40):
        send_p(h, f"A-{i}".ljust(10), group="A")  # slow holds A-0 unacked: backlog
    assert info(h)["paged"] > 30
    # B (the fast consumer, fewest groups) flows at once, body in memory.
    for i in range(5):
        ds = send_p(h, f"B-{i}", group="B")
        assert [(d.sub_id, d.message.body) for d in ds] == [("fast", f"B-{i}".encode())]
    # Ungrouped messages too.
    ds = send_p(h, "U")
    assert [d.sub_id for d in ds] == ["fast"]
    # The slow group then drains, in order, with its bodies.
    got = []
    d = first[0]
    while True:
        got.append(h.bodies([d])[0].strip())
        nxt = h.ack(d)
        if not nxt:
            break
        (d,) = nxt
    assert got == [f"A-{i}" for i in range(40)]


def test_paged_message_delivered_before_its_sync_is_read_from_pending(journal):
    h = paging(journal, budget=0)
    h.sub(2, "a", prefetch_count=1)
    (d0,) = send_p(h, "first")
    # Without pumping (no sync): a message is paged out when its record is taken...
    h.b.send(1, "/queue/q", {"persistent": "true"}, b"second", h.now)
    records = h.b.take_records()
    assert [type(r) for r in records] == [MessageStored]
    journal.append(records)  # appended, not synced
    (m,) = h.b.browse("q", 5)
    assert m.body is None
    # ... and delivered in the next round, still before the fsync.
    h.b.ack(2, d0.ack_id, h.now)
    (d1,) = h.b.take_page_ins()
    assert journal.load_body(d1.message.id, "q") == b"second"
    h.pump()


def test_dead_letter_copy_of_a_paged_message_has_its_body(journal):
    h = paging(journal, budget=0, **{"max-delivery-attempts": 1})
    h.sub(2, "a", prefetch_count=1)
    (d0,) = send_p(h, "zero")
    send_p(h, "one")
    assert info(h)["paged"] == 1
    (d1,) = h.ack(d0)
    assert d1.message.body is None and d1.body == b"one"
    h.nack(d1)  # one attempt: dead-lettered
    (dlq,) = h.b.browse("DLQ", 5)
    body = dlq.body if dlq.body is not None else journal.load_body(dlq.id, "DLQ")
    assert body == b"one" and dlq.headers["original-destination"] == "/queue/q"


def test_auto_ack_delivery_of_a_paged_message(journal):
    h = paging(journal, budget=0)
    for i in range(5):
        send_p(h, f"m{i}")
    assert info(h)["paged"] == 5
    ds = h.sub(2, "a", ack="auto")
    assert h.bodies(ds) == [f"m{i}" for i in range(5)]
    assert info(h)["paged"] == 0 and info(h)["depth"] == 0


def test_global_budget_pages_and_does_not_block(journal):
    h = Harness(
        {"#": {"address-full-policy": "page"}}, store=journal, paging=True, global_max_size=50
    )
    for i in range(10):
        send_p(h, "x" * 20, dest=f"/queue/q{i % 2}")
    assert h.flow == []
    assert h.b.total_bytes <= 50
    assert sum(info(h, f"q{i}")["paged"] for i in range(2)) == 8


def test_expired_and_purged_paged_messages_release_their_accounting(journal):
    h = paging(journal, budget=0)
    send_p(h, "a", expires=int(h.now * 1000) + 1000)
    send_p(h, "b")
    assert info(h)["paged"] == 2
    h.advance(2.0)
    assert info(h)["paged"] == 1 and info(h)["depth"] == 1
    assert h.b.purge_queue("q", h.now) == 1
    assert info(h)["paged"] == 0 and info(h)["paged_bytes"] == 0


@pytest.mark.parametrize("lazy", [False, True], ids=["bodies-read", "lazy-bodies"])
def test_restore_keeps_memory_within_the_budget(journal, lazy):
    h = paging(journal, budget=100)
    bodies = [f"r{i:03d}".ljust(25, "-") for i in range(40)]
    for i, b in enumerate(bodies):
        send_p(h, b, group=f"g{i % 3}")
    h2 = h.restart(lazy_bodies=lazy)
    q = info(h2)
    # The 4th message brings the queue to its budget of 100: it and all later are paged.
    assert q["depth"] == 40 and q["bytes"] == 75 and q["paged"] == 37
    browsed = h2.b.browse("q", 100)
    assert [m.body is None for m in browsed] == [False] * 3 + [True] * 37
    assert all(m.size == 25 for m in browsed)
    ds = h2.sub(2, "a", ack="auto")
    assert h2.bodies(ds) == bodies  # one consumer owns every group: store order


def test_lazy_restore_reads_bodies_back_for_a_queue_that_does_not_page(tmp_path):
    journal = JournalStore(tmp_path / "journal", segment_size=1 << 20, preallocate=False)
    h = paging(journal, budget=100, **{"address-full-policy": "fail"})
    for i in range(3):
        send_p(h, f"b{i}".ljust(25, "+"))
    h2 = h.restart(lazy_bodies=True)
    q = info(h2)
    assert q["paged"] == 0 and q["bytes"] == 75
    assert [m.body for m in h2.b.browse("q", 10)] == [
        f"b{i}".ljust(25, "+").encode() for i in range(3)
    ]


def test_core_alone_asks_for_paged_bodies_and_never_reads_them():
    """A bare core with a dict for a disk: it asks (take_page_ins), the caller
    answers (bodies_read); the core itself has no way to read a body."""
    disk: dict[int, bytes] = {}
    b = Broker(
        AddressSettings.from_raw({"#": {"max-size-bytes": 0, "max-delivery-attempts": 1}}),
        0.0,
        paging=True,
    )
    assert not hasattr(b, "body_loader") and not hasattr(b, "load_body")
    b.connect(1, 0.0)
    b.send(1, "/queue/q", {"persistent": "true"}, b"hello", 0.0)
    for r in b.take_records():
        if isinstance(r, MessageStored):
            disk[r.id] = r.body
    (m,) = b.browse("q")
    assert m.body is None
    b.subscribe(1, "s", "/queue/q", "client-individual", {}, 0.0)
    (d,) = b.take_page_ins()
    assert isinstance(d, Deliver) and d.message is m
    d.body = disk[m.id]
    b.bodies_read([d])
    b.take_effects()
    b.nack(1, d.ack_id, 0.0)  # one attempt: dead-lettered, the copy waits for the body
    assert b.browse("DLQ") == []
    (copy,) = b.take_page_ins()
    assert isinstance(copy, PagedCopy) and copy.message is m
    copy.body = disk[m.id]
    b.bodies_read([copy])
    (dlq,) = b.browse("DLQ")
    assert dlq.body == b"hello" and dlq.headers["original-destination"] == "/queue/q"


def test_a_dead_letter_copy_whose_body_cannot_be_read_is_flagged(journal):
    h = paging(journal, budget=0, **{"max-delivery-attempts": 1})
    h.sub(2, "a", prefetch_count=1)
    (d0,) = send_p(h, "zero")
    send_p(h, "one")
    (d1,) = h.ack(d0)
    h.b.nack(2, d1.ack_id, h.now)
    (copy,) = h.b.take_page_ins()
    copy.error = "disk on fire"
    h.b.bodies_read([copy])
    (dlq,) = h.b.browse("DLQ", 5)
    assert dlq.body == b"" and dlq.headers["shoal-body-lost"] == "true"
    assert any("disk on fire" in text for _c, text in h.b.take_warnings())
