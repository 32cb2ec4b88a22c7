"""AddressBook: the broker's queues and topics by name, on its own."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.broker.core import Broker
from shoal.broker.effects import CloseConnection
from shoal.broker.queue import Queue
from shoal.broker.settings import AddressSettings
from shoal.errors import BrokerError, InvalidDestination, NotFound
from shoal.records import QueueDeclared, QueueDeleted

T0 = 1_700_000_000.0


def broker() -> Broker:
    b = Broker(AddressSettings(), T0)
    b.connect(1, T0)
    return b


def test_queue_for_creates_once_and_the_broker_sees_the_same_dicts() -> None:
    b = broker()
    book = b.addresses
    q = book.queue_for("orders", {})
    assert isinstance(q, Queue)
    assert book.queue_for("orders", {}) is q
    assert b.queues is book.queues and b.queues["orders"] is q
    assert b.topics is book.topics
    assert [type(r) for r in b.take_records()] == [QueueDeclared]


def test_different_parameters_on_an_existing_queue_are_ignored_with_a_warning() -> None:
    b = broker()
    b.addresses.queue_for("q", {"group-buckets": 4})
    b.addresses.queue_for("q", {"group-buckets": 8}, conn_id=1)
    ((conn_id, text),) = b.take_warnings()
    assert conn_id == 1 and "group-buckets=8" in text
    assert b.addresses.classic("q").groups.buckets == 4


def test_classic_and_log_lookups_refuse_what_is_not_there() -> None:
    book = broker().addresses
    with pytest.raises(NotFound):
        book.classic("none")
    book.queue_for("q", {})
    with pytest.raises(NotFound):
        book.log_queue("q")  # a classic queue is no log queue


def test_send_target_resolves_and_caches_queues_and_topics() -> None:
    b = broker()
    conn = b.connection(1)
    book = b.addresses
    q, base = book.send_target(conn, "/queue/a")
    assert q is book.queues["a"] and base == "/queue/a"
    t, base = book.send_target(conn, "/topic/news")
    assert t is book.topics["news"] and base == "/topic/news"
    assert set(book.send_cache) == {"/queue/a", "/topic/news"}


def test_temporary_queues_are_named_per_connection() -> None:
    b = broker()
    b.connect(2, T0)
    book = b.addresses
    q1 = book.temp_queue(b.connection(1), "reply", {})
    q2 = book.temp_queue(b.connection(2), "reply", {})
    assert q1 is not q2 and q1.name != q2.name
    assert book.temp_queue(b.connection(1), "reply", {}) is q1
    # another connection names it in full (reply-to)
    assert book.temp_queue(b.connection(2), q1.name, {}) is q1


def test_delete_queue_closes_its_consumers_and_forgets_it() -> None:
    b = broker()
    b.subscribe(1, "s", "/queue/q", "client-individual", {}, T0)
    q = b.addresses.classic("q")
    b.take_records()
    b.addresses.delete_queue(q, record=True)
    assert "q" not in b.queues and q.deleted
    assert "s" not in b.connection(1).subs
    assert [type(e) for e in b.take_effects()] == [CloseConnection]
    assert [type(r) for r in b.take_records()] == [QueueDeleted]


def test_a_log_queue_cannot_be_subscribed() -> None:
    b = Broker(AddressSettings.from_raw({"logs.#": {"queue-type": "log"}}), T0)
    b.connect(1, T0)
    with pytest.raises(InvalidDestination):
        b.subscribe(1, "s", "/queue/logs.a", "auto", {}, T0)


OPS = st.lists(
    st.tuples(
        st.sampled_from(["sub", "unsub", "durable", "send", "delete"]),
        st.sampled_from(["t1", "t2"]),
        st.integers(0, 2),
    ),
    max_size=30,
)


@settings(max_examples=60, deadline=None)
@given(OPS)
def test_topics_list_exactly_the_live_subscription_queues(ops: list[tuple[str, str, int]]) -> None:
    """Whatever the order of subscribes, unsubscribes and deletes: a topic's
    subscription queues are live queues of the book, of that address, and the
    SEND cache never hands out a deleted queue."""
    b = Broker(AddressSettings(), T0)
    b.connect(1, T0, client_id="c")
    book = b.addresses
    for op, topic, n in ops:
        sub = f"{topic}-{n}"
        try:
            if op == "sub":
                b.subscribe(1, sub, f"/topic/{topic}", "auto", {}, T0)
            elif op == "durable":
                headers = {"durable-subscription-name": sub}
                b.subscribe(1, sub, f"/topic/{topic}", "auto", headers, T0)
            elif op == "unsub":
                b.unsubscribe(1, sub, T0, durable=True)
            elif op == "send":
                b.send(1, f"/topic/{topic}", {}, b"x", T0)
            else:
                name = next((q for q in book.queues if topic in q), None)
                if name is not None:
                    b.delete_queue(name, T0)
        except BrokerError:
            pass  # a conflict or an unknown id: a refused command changes nothing
        for t in book.topics.values():
            for q in t.subs:
                assert book.queues.get(q.name) is q and not q.deleted
                assert q.address == t.name
        for target, _base in book.send_cache.values():
            assert not getattr(target, "deleted", False)
