"""The group contract (G1-G16, DESIGN.md) with AMQP consumers, Proton's blocking client.

test_proton.py covers G2 in order over AMQP, G4 shared groups, a link with no
credit (owns no group) and the outcomes; test_rhea.py rhea with STOMP
producers. Here: the rest that an AMQP consumer can see. G9 (group memory)
and G12 (autogroup, a client feature of shoal.client) have nothing
AMQP-specific.
"""

from __future__ import annotations

import contextlib
import time

import pytest
import stomp
from proton import Message, Timeout
from proton.reactor import Selector
from proton.utils import BlockingConnection, LinkDetached

from support import get_json, wait_for

pytestmark = pytest.mark.e2e


def url(server) -> str:
    return f"amqp://127.0.0.1:{server.amqp_port}"


class Collect(stomp.ConnectionListener):
    def __init__(self) -> None:
        self.frames: list = []

    def on_message(self, frame) -> None:
        self.frames.append(frame)


def stomp_consumer(server, destination: str) -> tuple[stomp.Connection, Collect]:
    s = stomp.Connection([("127.0.0.1", server.stomp_port)])
    s.connect(wait=True)
    listener = Collect()
    s.set_listener("c", listener)
    s.subscribe(destination, id="1", ack="client-individual")
    return s, listener


def take(receiver, n: int, *, accept: bool = True) -> list[str]:
    bodies = []
    for _ in range(n):
        bodies.append(receiver.receive(timeout=10).body)
        if accept:
            receiver.accept()
    return bodies


def fetch(receiver, n: int) -> list[Message]:
    """The next ``n`` messages, granting no credit (``receive`` grants 1 when it has
    none; a receiver made with ``credit=N`` keeps topping its window up to N)."""
    receiver.connection.wait(lambda: receiver.fetcher.has_message >= n, timeout=10)
    return [receiver.fetcher.pop() for _ in range(n)]


def text(m: Message) -> str:
    return m.body if isinstance(m.body, str) else bytes(m.body).decode()


def nothing_for(receiver, seconds: float = 0.5) -> bool:
    with contextlib.suppress(Timeout):
        receiver.receive(timeout=seconds)
        return False
    return True


@pytest.fixture
def amqp(shoal_server):
    """(server, a BlockingConnection to it); closed afterwards."""
    opened = []

    def start(config: str | None = None):
        server = shoal_server(config=config)
        conn = BlockingConnection(url(server))
        opened.append(conn)
        return server, conn

    yield start
    for conn in opened:
        with contextlib.suppress(Exception):
            conn.close()


@pytest.mark.parametrize("closer", ["amqp", "stomp"])
def test_g3_a_negative_jmsxgroupseq_closes_the_group(amqp, closer):
    """AMQP's group-sequence is unsigned: a group closes with the JMSXGroupSeq
    application property (or the STOMP header) -1, as on Artemis."""
    server, conn = amqp()
    sender = conn.create_sender("closing")
    a = conn.create_receiver("closing", credit=10, name="a")
    sender.send(Message(body="h-1", group_id="h"))
    sender.send(Message(body="g-1", group_id="g"))
    assert take(a, 2) == ["h-1", "g-1"]  # a owns h and g
    b = conn.create_receiver("closing", credit=10, name="b")
    if closer == "amqp":
        sender.send(Message(body="g-2", group_id="g", properties={"JMSXGroupSeq": -1}))
    else:
        s = stomp.Connection([("127.0.0.1", server.stomp_port)])
        s.connect(wait=True)
        s.send("/queue/closing", "g-2", headers={"JMSXGroupID": "g", "JMSXGroupSeq": "-1"})
        s.disconnect()
    closing = a.receive(timeout=10)  # the closing message still goes to the owner
    assert text(closing) == "g-2" and closing.properties["JMSXGroupSeq"] == -1
    a.accept()
    sender.send(Message(body="g-3", group_id="g"))
    assert take(b, 1) == ["g-3"]  # assigned afresh: b has the fewest groups
    assert nothing_for(a)


def test_g2_g11_released_and_modified_come_back_in_group_order(amqp):
    server, conn = amqp('[address-settings."#"]\nmax-delivery-attempts = 5\n')
    sender = conn.create_sender("redo")
    a = conn.create_receiver("redo", credit=0, name="a")  # credit exactly as granted
    a.link.flow(2)
    for i in (1, 2, 3):
        sender.send(Message(body=f"g-{i}", group_id="g"))
    assert [m.body for m in fetch(a, 2)] == ["g-1", "g-2"]
    b = conn.create_receiver("redo", credit=10, name="b")  # must not get g meanwhile
    first, second = a.fetcher.unsettled
    first.local.failed = True
    first.update(first.MODIFIED)  # g-1: modified(delivery-failed), counted
    first.settle()
    second.update(second.RELEASED)  # g-2: released, not counted
    second.settle()
    a.fetcher.unsettled.clear()
    a.link.flow(3)
    again = fetch(a, 3)
    assert [(m.body, m.delivery_count, m.first_acquirer) for m in again] == [
        ("g-1", 1, False),
        ("g-2", 0, True),  # released: as if never delivered (test_proton.py)
        ("g-3", 0, True),
    ]
    a.accept()
    assert nothing_for(b)


def test_g11_mixed_consumers_a_closed_amqp_link_hands_its_group_to_stomp_in_order(amqp):
    """Rebalance on consumer close, across protocols: the STOMP consumer gets the
    AMQP link's unsettled messages back first, flagged, then the rest."""
    server, conn = amqp()
    sender = conn.create_sender("handover")
    a = conn.create_receiver("handover", credit=0, name="a")
    a.link.flow(3)
    for i in range(1, 6):
        sender.send(Message(body=f"g-{i}", group_id="g", durable=True))
    assert [m.body for m in fetch(a, 3)] == ["g-1", "g-2", "g-3"]
    g1 = a.fetcher.unsettled.popleft()
    g1.update(g1.ACCEPTED)  # g-1 settled; g-2 and g-3 still held
    g1.settle()
    s, listener = stomp_consumer(server, "/queue/handover")
    try:
        with contextlib.suppress(Timeout):
            conn.wait(lambda: bool(listener.frames), timeout=0.5)
        assert listener.frames == []  # g is a's while it holds g-2 and g-3
        a.close()
        wait_for(lambda: len(listener.frames) == 4)
        assert [f.body for f in listener.frames] == ["g-2", "g-3", "g-4", "g-5"]
        assert [f.headers.get("redelivered") for f in listener.frames[:2]] == ["true", "true"]
        assert all(f.headers["JMSXGroupID"] == "g" for f in listener.frames)
    finally:
        s.disconnect()


def test_g5_g10_a_busy_owner_holds_back_only_its_group(amqp):
    server, conn = amqp()
    sender = conn.create_sender("hol")
    a = conn.create_receiver("hol", credit=1, name="a")
    sender.send(Message(body="g-1", group_id="g"))
    assert a.receive(timeout=10).body == "g-1"  # held, unsettled: a is busy
    b = conn.create_receiver("hol", credit=20, name="b")
    for i in range(2, 6):
        sender.send(Message(body=f"g-{i}", group_id="g"))
    for i in range(1, 4):
        sender.send(Message(body=f"h-{i}", group_id="h"))
        sender.send(Message(body=f"u-{i}"))
    assert take(b, 6) == ["h-1", "u-1", "h-2", "u-2", "h-3", "u-3"]
    assert nothing_for(b)  # never g while a holds it
    a.accept()
    assert take(a, 4) == ["g-2", "g-3", "g-4", "g-5"]


def test_g6_consumers_before_dispatch_and_fewest_groups(amqp):
    server, conn = amqp("[queues.wait2]\nconsumers-before-dispatch = 2\n")
    sender = conn.create_sender("wait2")
    a = conn.create_receiver("wait2", credit=20, name="a")
    for i in range(1, 3):
        for g in "wxyz":
            sender.send(Message(body=f"{g}-{i}", group_id=g))
    assert nothing_for(a)  # held until two consumers joined
    b = conn.create_receiver("wait2", credit=20, name="b")
    got_a, got_b = take(a, 4), take(b, 4)
    groups_a = {m.split("-")[0] for m in got_a}
    groups_b = {m.split("-")[0] for m in got_b}
    assert len(groups_a) == len(groups_b) == 2 and not groups_a & groups_b
    for got in (got_a, got_b):
        for g in {m.split("-")[0] for m in got}:
            assert [m for m in got if m.startswith(g)] == [f"{g}-1", f"{g}-2"]


def test_g7_group_first_key_is_a_boolean_property(amqp):
    server, conn = amqp('[queues.first]\ngroup-first-key = "JMSXGroupFirstForConsumer"\n')
    sender = conn.create_sender("first")
    a = conn.create_receiver("first", credit=5)
    for i in (1, 2):
        sender.send(Message(body=f"g-{i}", group_id="g"))
    m1, m2 = a.receive(timeout=10), a.receive(timeout=10)
    assert m1.properties["JMSXGroupFirstForConsumer"] is True
    assert "JMSXGroupFirstForConsumer" not in (m2.properties or {})


def test_g8_rebalance_when_an_amqp_consumer_joins(amqp):
    server, conn = amqp("[queues.spread]\ngroup-rebalance = true\n")
    sender = conn.create_sender("spread")
    a = conn.create_receiver("spread", credit=20, name="a")
    for g in "wxyz":
        sender.send(Message(body=f"{g}-1", group_id=g))
    assert sorted(take(a, 4)) == ["w-1", "x-1", "y-1", "z-1"]  # a owns all four, idle
    b = conn.create_receiver("spread", credit=20, name="b")
    for g in "wxyz":
        sender.send(Message(body=f"{g}-2", group_id=g))
    got_a, got_b = take(a, 2), take(b, 2)
    assert sorted(got_a + got_b) == ["w-2", "x-2", "y-2", "z-2"]


def test_g1_group_header_and_artemis_group_property(amqp):
    server, conn = amqp('[queues.bycustomer]\ngroup-header = "customer"\n')
    sender = conn.create_sender("bycustomer")
    a = conn.create_receiver("bycustomer", credit=10, name="a")
    sender.send(Message(body="c1-1", properties={"customer": "c1"}))
    assert take(a, 1) == ["c1-1"]
    b = conn.create_receiver("bycustomer", credit=10, name="b")
    sender.send(Message(body="c1-2", properties={"customer": "c1"}))  # sticky to a
    sender.send(Message(body="c2-1", properties={"customer": "c2"}))  # new: to b
    assert take(a, 1) == ["c1-2"] and take(b, 1) == ["c2-1"]
    # _AMQ_GROUP_ID (Artemis' core name) groups as JMSXGroupID does
    art = conn.create_sender("artemis")
    c = conn.create_receiver("artemis", credit=10, name="c")
    art.send(Message(body="x-1", properties={"_AMQ_GROUP_ID": "x"}))
    assert take(c, 1) == ["x-1"]
    d = conn.create_receiver("artemis", credit=10, name="d")
    art.send(Message(body="x-2", properties={"_AMQ_GROUP_ID": "x"}))
    assert take(c, 1) == ["x-2"] and nothing_for(d)


def test_g13_g16_exclusive_consumer_gets_everything_in_queue_order(amqp):
    server, conn = amqp()
    sender = conn.create_sender("excl")
    a = conn.create_receiver("excl?exclusive=true", credit=20, name="a")
    b = conn.create_receiver("excl?exclusive=true", credit=20, name="b")
    order = ["g-1", "u-1", "h-1", "g-2", "u-2", "h-2"]
    for body in order:
        group = None if body.startswith("u") else body[0]
        sender.send(Message(body=body, group_id=group))
    assert take(a, 6) == order and nothing_for(b)
    sender.send(Message(body="g-3", group_id="g"))
    a.close()  # the next takes over
    assert take(b, 1) == ["g-3"]


def test_g14_each_topic_subscription_applies_its_group_settings(amqp):
    server, conn = amqp()
    s1 = conn.create_receiver("topic://prices", credit=20, name="s1")
    s2 = conn.create_receiver("topic://prices", credit=20, name="s2")
    sender = conn.create_sender("topic://prices")
    sent = [f"{g}-{i}" for i in range(1, 4) for g in "ab"]
    for body in sent:
        sender.send(Message(body=body, group_id=body[0]))
    assert take(s1, 6) == sent and take(s2, 6) == sent


def test_g15_management_shows_the_amqp_owner(amqp):
    server, conn = amqp()
    conn.create_sender("seen").send(Message(body="g-1", group_id="g"))
    a = conn.create_receiver("seen", credit=1)
    assert a.receive(timeout=10).body == "g-1"
    rows = get_json(f"{server.http_url}/api/queues/seen/groups")["groups"]
    (row,) = [r for r in rows if r["group"] == "g"]
    assert row["in_flight"] == 1 and row["owner"]
    connections = get_json(f"{server.http_url}/api/connections")
    connections = connections.get("connections", connections)
    owner_conn = [c for c in connections if str(c.get("id")) in str(row["owner"])]
    assert owner_conn and owner_conn[0]["protocol"] == "amqp"


def test_selectors_with_groups_over_amqp(amqp):
    """A source's JMS selector filter (as Qpid JMS and Artemis): each consumer gets
    only what it selects, groups whole and in order; a bad one refuses the link."""
    server, conn = amqp()
    sender = conn.create_sender("colours")
    red = conn.create_receiver("colours", credit=20, name="red", options=Selector("colour = 'red'"))
    blue = conn.create_receiver(
        "colours", credit=20, name="blue", options=Selector("colour = 'blue' AND n >= 1")
    )
    for i in range(1, 4):
        for colour in ("red", "green", "blue"):
            sender.send(
                Message(
                    body=f"{colour}-{i}", group_id=colour, properties={"colour": colour, "n": i}
                )
            )
    assert take(red, 3) == ["red-1", "red-2", "red-3"]
    assert take(blue, 3) == ["blue-1", "blue-2", "blue-3"]  # n: a number, compared as one
    assert nothing_for(red) and nothing_for(blue)  # green waits for a consumer, alone
    with pytest.raises(LinkDetached) as bad:
        conn.create_receiver("colours", credit=1, name="bad", options=Selector("colour = "))
    assert "selector" in str(bad.value)


def test_mixed_consumers_and_producers_each_group_whole_and_in_order(amqp):
    """A STOMP and an AMQP consumer on one queue, groups sent over both protocols:
    every group at exactly one consumer, in order, and both consumers get groups."""
    server, conn = amqp()
    a = conn.create_receiver("mixed", credit=10, name="a")
    s, listener = stomp_consumer(server, "/queue/mixed")
    sender = conn.create_sender("mixed")
    producer = stomp.Connection([("127.0.0.1", server.stomp_port)])
    producer.connect(wait=True)
    per_group = 10
    for i in range(1, per_group + 1):
        for g in range(3):
            sender.send(Message(body=f"a{g}-{i}", group_id=f"a{g}", group_sequence=i))
            producer.send(
                "/queue/mixed", f"s{g}-{i}", headers={"JMSXGroupID": f"s{g}", "JMSXGroupSeq": i}
            )
    producer.disconnect()
    got_amqp: list[str] = []
    total, acked = 6 * per_group, 0
    deadline = time.monotonic() + 30
    try:
        while len(got_amqp) + len(listener.frames) < total:
            assert time.monotonic() < deadline, (got_amqp, [f.body for f in listener.frames])
            with contextlib.suppress(Timeout):
                got_amqp.append(text(a.receive(timeout=0.2)))
                a.accept()
            frames = list(listener.frames)
            for f in frames[acked:]:
                s.ack(f.headers["message-id"], "1")
            acked = len(frames)
        got_stomp = [f.body for f in listener.frames]
    finally:
        s.disconnect()
    groups_amqp = {b.split("-")[0] for b in got_amqp}
    groups_stomp = {b.split("-")[0] for b in got_stomp}
    assert groups_amqp and groups_stomp and not groups_amqp & groups_stomp
    assert groups_amqp | groups_stomp == {f"{p}{g}" for p in "as" for g in range(3)}
    for got in (got_amqp, got_stomp):
        for g in {b.split("-")[0] for b in got}:
            assert [b for b in got if b.startswith(g + "-")] == [
                f"{g}-{i}" for i in range(1, per_group + 1)
            ]
