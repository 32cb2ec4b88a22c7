"""AMQP consumer links in the core: credit granted by the peer, released not counted."""

from __future__ import annotations

from typing import Any

from tests.broker.conftest import Harness


def link_sub(h: Harness, conn: int, sub: str, dest: str = "/queue/q") -> None:
    h.ensure(conn)
    h.b.subscribe(conn, sub, dest, "client-individual", {}, h.now, link_credit=True)
    h.pump()


def grant(h: Harness, conn: int, sub: str, credit: int) -> list[Any]:
    h.b.set_credit(conn, sub, credit, h.now)
    return h.pump()


def test_link_credit_is_what_the_peer_granted_and_acks_give_none_back(h: Harness) -> None:
    for i in range(5):
        h.send(f"m{i}", group="g")
    link_sub(h, 2, "c")
    assert h.got(2, "c") == []  # no credit yet
    first = grant(h, 2, "c", 2)
    assert h.bodies(first) == ["m0", "m1"]
    assert h.ack(first[0]) == []  # settling is not credit
    more = grant(h, 2, "c", 1)
    assert h.bodies(more) == ["m2"]


def test_released_goes_back_to_the_head_uncounted(make: Any) -> None:
    h = make({"#": {"max-delivery-attempts": 2}})
    h.send("a", group="g")
    h.send("b", group="g")
    link_sub(h, 2, "c")
    for _ in range(3):  # more releases than max-delivery-attempts
        (d,) = grant(h, 2, "c", 1)
        assert h.bodies([d]) == ["a"] and d.message.delivery_count == 0
        h.b.nack(2, d.ack_id, h.now, counted=False)
        h.pump()
    (d,) = grant(h, 2, "c", 1)
    h.nack(d)  # a rejected outcome counts
    (d,) = grant(h, 2, "c", 1)
    assert h.bodies([d]) == ["a"] and d.message.delivery_count == 1 and d.redelivered
    h.nack(d)  # second counted attempt: dead-lettered
    (d,) = grant(h, 2, "c", 1)
    assert h.bodies([d]) == ["b"]
