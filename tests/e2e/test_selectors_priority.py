"""Selectors and priority end to end: stomp.py against `shoal serve`."""

from __future__ import annotations

import threading
import time

import pytest
import stomp

from support import RawStomp, get_json, wait_for

pytestmark = pytest.mark.e2e


class Collector(stomp.ConnectionListener):
    def __init__(self) -> None:
        self.messages: list[stomp.utils.Frame] = []
        self.errors: list[stomp.utils.Frame] = []
        self.lock = threading.Lock()

    def on_message(self, frame) -> None:
        with self.lock:
            self.messages.append(frame)

    def on_error(self, frame) -> None:
        self.errors.append(frame)

    def bodies(self) -> list[str]:
        with self.lock:
            return [m.body for m in self.messages]


def connect(port: int) -> tuple[stomp.Connection12, Collector]:
    conn = stomp.Connection12([("127.0.0.1", port)])
    listener = Collector()
    conn.set_listener("c", listener)
    conn.connect(wait=True)
    return conn, listener


def depth(srv, queue: str) -> int:
    return get_json(f"{srv.http_url}/api/queues/{queue}")["depth"]


def settle(seconds: float = 0.3) -> None:
    """Give the broker time to deliver anything it wrongly would (asserting absence)."""
    time.sleep(seconds)


def test_selectors_split_groups_by_header_and_keep_group_order(shoal_server):
    srv = shoal_server()
    eu, got_eu = connect(srv.stomp_port)
    us, got_us = connect(srv.stomp_port)
    cheap, got_cheap = connect(srv.stomp_port)
    dest = "/queue/e2e.sel"
    eu.subscribe(dest, id="eu", ack="auto", headers={"selector": "region = 'eu' AND price > 10"})
    us.subscribe(dest, id="us", ack="auto", headers={"selector": "region IN ('us', 'ca')"})
    cheap.subscribe(dest, id="c", ack="auto", headers={"selector": "price <= 10"})
    prod, _ = connect(srv.stomp_port)
    sent = {"eu": [], "us": [], "c": []}
    for i in range(30):
        region = ("eu", "us")[i % 2]
        price = 100 if i % 3 else 9  # '9' is below 10 numerically, above it as a string
        group = f"{region}-{price}-{i % 4}"  # a group's messages all match the same selectors
        body = f"{group}:{i}"
        prod.send(dest, body, headers={"JMSXGroupID": group, "region": region, "price": str(price)})
        if price <= 10 and region == "eu":
            sent["c"].append(body)
        elif region == "eu":
            sent["eu"].append(body)
    wait_for(lambda: len(got_eu.messages) == len(sent["eu"]))
    wait_for(lambda: len(got_us.messages) + len(got_cheap.messages) == 30 - len(sent["eu"]))
    assert got_eu.bodies() == sent["eu"]  # one consumer: queue order
    assert all(b.startswith("us") for b in got_us.bodies())
    assert all(int(m.headers["price"]) <= 10 for m in got_cheap.messages)
    for got in (got_us, got_cheap):  # each group's messages in order at each consumer
        per_group: dict[str, list[int]] = {}
        for b in got.bodies():
            g, n = b.split(":")
            per_group.setdefault(g, []).append(int(n))
        assert all(ns == sorted(ns) for ns in per_group.values())
    for c in (eu, us, cheap, prod):
        c.disconnect()


def test_invalid_selector_gets_an_error_naming_it_and_no_subscription(shoal_server):
    srv = shoal_server()
    raw = RawStomp(srv.stomp_port)
    raw.connect()
    raw.frame(
        "SUBSCRIBE",
        {
            "destination": "/queue/e2e.badsel",
            "id": "s",
            "ack": "auto",
            "selector": "price >> 3",
            "receipt": "r1",
        },
    )
    cmd, headers, _ = raw.read_frame()
    assert cmd == "ERROR"
    assert "selector" in headers["message"] and "price >> 3" in headers["message"]
    assert headers.get("receipt-id") == "r1"
    assert raw.closed_by_peer()
    # nothing was created: the queue does not exist and a later client is unaffected
    conn, got = connect(srv.stomp_port)
    conn.send("/queue/e2e.other", "fine")
    conn.subscribe("/queue/e2e.other", id="s", ack="auto")
    wait_for(lambda: got.messages)
    names = {q["name"] for q in get_json(f"{srv.http_url}/api/queues")["queues"]}
    assert "e2e.badsel" not in names
    conn.disconnect()


def test_owner_rejecting_next_message_holds_only_its_group(shoal_server):
    srv = shoal_server()
    dest = "/queue/e2e.hold"
    a, got_a = connect(srv.stomp_port)
    a.subscribe(dest, id="a", ack="auto", headers={"selector": "ok = 'yes'"})
    prod, _ = connect(srv.stomp_port)
    prod.send(dest, "g0", headers={"JMSXGroupID": "G", "ok": "yes"})
    wait_for(lambda: got_a.bodies() == ["g0"])  # G is now a's
    prod.send(dest, "g1", headers={"JMSXGroupID": "G", "ok": "no"})  # a rejects: G waits
    prod.send(dest, "g2", headers={"JMSXGroupID": "G", "ok": "yes"})  # behind g1
    for i in range(5):
        prod.send(dest, f"h{i}", headers={"JMSXGroupID": "H", "ok": "yes"})
    wait_for(lambda: len(got_a.messages) == 6)
    settle()
    assert got_a.bodies() == ["g0"] + [f"h{i}" for i in range(5)]
    b, got_b = connect(srv.stomp_port)
    b.subscribe(dest, id="b", ack="auto")  # takes everything, but G stays a's (sticky)
    settle()
    assert got_b.bodies() == []
    a.disconnect()  # G is freed: its next message goes to one that accepts it
    wait_for(lambda: got_b.bodies() == ["g1", "g2"])
    b.disconnect()
    prod.disconnect()


def test_priority_queue_orders_heads_but_never_within_a_group(shoal_server):
    srv = shoal_server(config='[queues."e2e.prio"]\npriority = true\n')
    prod, _ = connect(srv.stomp_port)
    dest = "/queue/e2e.prio"
    msgs = [
        ("low", None, 1),
        ("g-low", "G", 0),
        ("g-high", "G", 9),
        ("high", None, 9),
        ("mid", None, 5),
        ("plain", None, None),
    ]
    for body, group, prio in msgs:
        headers = {}
        if group:
            headers["JMSXGroupID"] = group
        if prio is not None:
            headers["priority"] = str(prio)
        prod.send(dest, body, headers=headers)
    wait_for(lambda: depth(srv, "e2e.prio") == 6)  # all queued before anyone subscribes
    conn, got = connect(srv.stomp_port)
    conn.subscribe(dest, id="s", ack="auto")
    wait_for(lambda: len(got.messages) == 6)
    assert got.bodies() == ["high", "mid", "plain", "low", "g-low", "g-high"]
    conn.disconnect()
    prod.disconnect()


def test_priority_as_a_destination_parameter(shoal_server):
    srv = shoal_server()
    prod, _ = connect(srv.stomp_port)
    dest = "/queue/e2e.prio2?priority=true"
    for body, prio in [("a", 0), ("b", 7), ("c", 3)]:
        prod.send(dest, body, headers={"priority": str(prio)})
    wait_for(lambda: depth(srv, "e2e.prio2") == 3)
    conn, got = connect(srv.stomp_port)
    conn.subscribe("/queue/e2e.prio2", id="s", ack="auto")
    wait_for(lambda: len(got.messages) == 3)
    assert got.bodies() == ["b", "c", "a"]
    conn.disconnect()
    prod.disconnect()
