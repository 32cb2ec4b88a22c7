"""The durability promise (docs/durability.md), end to end with kill -9.

Each test runs a real `shoal serve` with its journal under a temp data dir,
drives it over raw STOMP sockets (tests/e2e/durability_helpers.py), kills it
with SIGKILL (or stops it, damages the journal, fills the disk) and starts it
again on the same data dir. Checks are on behaviour only:

- every message whose SEND got a RECEIPT is delivered at least once, in order;
- a message whose ACK got a RECEIPT is never delivered again;
- nothing is delivered twice without redelivered:true (with
  persist-delivery-count-before-delivery=true for messages in flight at the
  crash: settings.py says that setting is what makes them come back marked);
- queues, durable subscriptions, settings, dead letters survive;
- a torn tail is cut and logged, corruption before it refuses to start until
  --repair, ENOSPC gets an ERROR naming the cause.

Some tests need root (tmpfs, a loop-mounted ext4 and fsfreeze) and skip
with the reason when that is not possible.
"""

from __future__ import annotations

import random
import re
import struct
import subprocess
import sys
import threading
import time
import zlib
from collections import defaultdict
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # durability_helpers.py
from durability_helpers import (
    Peer,
    Received,
    acking_consumer,
    blocked_writers,
    frozen,
    loop_ext4,
    queue_info,
    segments,
    tmpfs,
)

from support import (
    FRAME_HEADER,
    SEGMENT_HEADER_SIZE,
    http_json,
    journal_frames,
    wait_for,
)

pytestmark = pytest.mark.e2e

PDC = "persist-delivery-count-before-delivery=true"
SMALL_SEGMENTS = "[broker]\njournal-segment-bytes = 262144\n"  # fits small file systems


def by_group(messages: list[Received]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = defaultdict(list)
    for m in messages:
        out[m.key[0]].append(m.key[1])
    return out


def drained(srv, queue: str) -> bool:
    info = queue_info(srv.http_url, queue)
    return info is not None and info["depth"] == 0 and info["in_flight"] == 0


class GroupProducer(threading.Thread):
    """Sends persistent grouped messages, pipelined: with a receipt each (at most
    ``window`` unanswered) or, with ``receipts=False``, as fast as the socket takes them.

    Owns its groups (no other producer sends to them), so per group the
    order of SENDs on this connection is the order of arrival. Body and
    headers carry (group, seq); the receipt id is "group.seq".
    """

    def __init__(
        self,
        port: int,
        destination: str,
        groups: list[str],
        *,
        window: int = 16,
        receipts: bool = True,
        limit: int | None = None,
    ) -> None:
        super().__init__(daemon=True)
        self.peer = Peer(port)
        self.destination = destination
        self.groups = groups
        self.window = window
        self.receipts = receipts
        self.limit = limit
        self.sent: list[tuple[str, int]] = []
        self.stop = threading.Event()

    def receipted(self) -> set[tuple[str, int]]:
        with self.peer.lock:
            ids = list(self.peer.receipts)
        out = set()
        for rid in ids:
            g, _, s = rid.rpartition(".")
            out.add((g, int(s)))
        return out

    def run(self) -> None:
        seqs = dict.fromkeys(self.groups, 0)
        i = 0
        while not self.stop.is_set() and not self.peer.closed.is_set():
            if self.limit is not None and len(self.sent) >= self.limit:
                return
            if self.receipts:
                while len(self.sent) - len(self.peer.receipts) >= self.window:
                    if self.stop.is_set() or self.peer.closed.wait(0.001):
                        return
            g = self.groups[i % len(self.groups)]
            i += 1
            seq = seqs[g]
            seqs[g] = seq + 1
            headers = {
                "destination": self.destination,
                "persistent": "true",
                "JMSXGroupID": g,
                "x-seq": str(seq),
            }
            if self.receipts:
                headers["receipt"] = f"{g}.{seq}"
            self.sent.append((g, seq))
            if not self.peer.frame("SEND", headers, f"{g}/{seq}".encode()):
                self.sent.pop()
                return


def check_bodies(messages: list[Received]) -> None:
    for m in messages:
        assert m.body == f"{m.key[0]}/{m.key[1]}".encode(), m


# --- 1. crash under load ------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("kill_after", [40, 300, 900])
def test_kill9_under_load_keeps_receipted_sends_and_acks(shoal_server, kill_after):
    """Producers and an acking consumer run; kill -9 at a random point; drain after restart.

    The queue has persist-delivery-count-before-delivery=true, the setting
    that (settings.py) makes a message in flight at a crash come back with
    redelivered:true.
    """
    kill_at = kill_after + random.randint(0, 60)
    queue = "dur.load"
    dest = f"/queue/{queue}?{PDC}"
    srv = shoal_server()
    acks = acking_consumer(srv.stomp_port, dest, delay=0.002, sub_headers={"prefetch-count": "20"})
    consumer = acks.peer
    consumer.sync()  # the subscription (and so the queue with its settings) exists
    groups = [f"g{n:02d}" for n in range(20)]
    producers = [GroupProducer(srv.stomp_port, dest, groups[k::4]) for k in range(4)]
    for p in producers:
        p.start()
    wait_for(lambda: sum(len(p.peer.receipts) for p in producers) >= kill_at, timeout=60)
    srv.kill9()
    for p in producers:
        p.join(10)
        p.peer.close()
    consumer.close()

    sent = {k for p in producers for k in p.sent}
    receipted = set().union(*(p.receipted() for p in producers))
    assert len(receipted) >= kill_at
    before = consumer.snapshot()
    before_keys = {m.key for m in before}
    acked = acks.acked()
    durable_delivery = {m.key for m in before[: acks.last_durable_index() + 1]}
    # Sanity before the crash: first deliveries in order, nothing marked redelivered.
    for g, seqs in by_group(before).items():
        assert seqs == sorted(set(seqs)), g
    assert not [m for m in before if m.headers.get("redelivered")]

    srv.start()
    drain = acking_consumer(srv.stomp_port, f"/queue/{queue}")
    drain.peer.sync()
    wait_for(lambda: drained(srv, queue), timeout=60)
    after = drain.peer.snapshot()
    wait_for(lambda: len(drain.acked()) >= len(after), timeout=30)
    drain.peer.disconnect()

    check_bodies(before + after)
    after_keys = [m.key for m in after]
    assert set(after_keys) <= sent, "a message nobody sent"
    missing = receipted - before_keys - set(after_keys)
    assert not missing, f"receipted SENDs never delivered: {sorted(missing)[:10]}"
    again = acked & set(after_keys)
    assert not again, f"messages whose ACK got a RECEIPT came back: {sorted(again)[:10]}"
    for g, seqs in by_group(after).items():
        # In order, no duplicates, no gaps: what survives of a group is
        # (stored prefix) minus (durably acked prefix), a contiguous run.
        assert seqs == list(range(seqs[0], seqs[-1] + 1)), (g, seqs)
        # Everything before the run was delivered before the crash.
        assert {(g, s) for s in range(seqs[0])} <= before_keys, g
    for m in after:
        if m.key in durable_delivery:
            assert m.headers.get("redelivered") == "true", (
                f"{m.key} delivered before the crash (its delivery count was fsynced before an "
                f"ACK RECEIPT) came back without redelivered:true: {m.headers}"
            )
        if m.headers.get("redelivered") == "true":
            assert int(m.headers["x-delivery-count"]) >= 1, m.headers
        if m.key in before_keys:
            # The server held each delivery until its count was synced
            # (test_delivery_waits_for_its_delivery_count_to_be_on_disk).
            assert m.headers.get("redelivered") == "true", (
                f"{m.key} was delivered before the crash and came back unmarked: {m.headers}"
            )


# --- delivery counts: what persist-delivery-count-before-delivery promises -----


def test_delivery_waits_for_its_delivery_count_to_be_on_disk(shoal_server, tmp_path):
    """Deterministic: the journal's file system is frozen while a consumer subscribes.

    settings.py: "record a persistent message's delivery count before each
    delivery, so a message in flight at a crash comes back redelivered=true".
    The server holds a MESSAGE until its DeliveryCounted record is synced: while
    the fsync thread is blocked on a frozen file system, the consumer gets
    nothing; once thawed it gets M, and a kill -9 right after brings M back
    with redelivered:true and x-delivery-count:1.
    """
    data = tmp_path / "frozen-data"
    with loop_ext4(tmp_path / "journal.img", data / "journal") as journal:
        srv = shoal_server(data=data, config=SMALL_SEGMENTS)
        try:
            producer = Peer(srv.stomp_port)
            producer.frame(
                "SEND",
                {"destination": f"/queue/dur.pdc?{PDC}", "persistent": "true", "receipt": "m"},
                b"M",
            )
            producer.wait_receipt("m")
            consumer = Peer(srv.stomp_port)
            with frozen(journal):
                # A persistent SEND starts a sync round that blocks in its write.
                producer.frame(
                    "SEND",
                    {"destination": "/queue/dur.other", "persistent": "true", "receipt": "x"},
                    b"X",
                )
                wait_for(lambda: blocked_writers(srv.proc.pid), timeout=10)
                consumer.frame(
                    "SUBSCRIBE",
                    {"destination": "/queue/dur.pdc", "id": "s", "ack": "client-individual"},
                )
                # The core has dispatched M (it counts as in flight); the server
                # must not write it before the count is synced.
                wait_for(
                    lambda: (queue_info(srv.http_url, "dur.pdc") or {}).get("in_flight") == 1,
                    timeout=10,
                )
                time.sleep(0.5)  # room for a wrongly written MESSAGE to arrive
                held = list(consumer.messages)
                assert not producer.has_receipt("x")
            assert held == [], f"delivered before its delivery count was on disk: {held}"
            wait_for(lambda: consumer.messages, timeout=30)
            wait_for(lambda: producer.has_receipt("x"), timeout=30)
            srv.kill9()
            producer.close()
            consumer.close()
            first = consumer.messages[0]
            assert first.body == b"M" and "redelivered" not in first.headers

            srv.start()
            again = Peer(srv.stomp_port)
            again.frame("SUBSCRIBE", {"destination": "/queue/dur.pdc", "id": "s", "ack": "auto"})
            wait_for(lambda: again.messages, timeout=10)
            m = again.messages[0]
            again.disconnect()
        finally:
            srv.kill9()  # before the file system goes
    assert m.body == b"M"
    assert m.headers.get("redelivered") == "true", m.headers
    assert m.headers.get("x-delivery-count") == "1", m.headers


def test_in_flight_message_comes_back_redelivered_with_default_settings(shoal_server):
    srv = shoal_server()
    producer = Peer(srv.stomp_port)
    for i in range(3):
        producer.frame(
            "SEND",
            {
                "destination": "/queue/dur.default",
                "persistent": "true",
                "JMSXGroupID": "g",
                "x-seq": str(i),
                "receipt": f"r{i}",
            },
            f"g/{i}".encode(),
        )
    producer.wait_receipt("r2")
    consumer = Peer(srv.stomp_port)
    consumer.frame(
        "SUBSCRIBE", {"destination": "/queue/dur.default", "id": "s", "ack": "client-individual"}
    )
    wait_for(lambda: len(consumer.messages) == 3)
    consumer.sync()  # whatever the broker records about these deliveries is fsynced
    srv.kill9()
    producer.close()
    consumer.close()
    srv.start()
    again = Peer(srv.stomp_port)
    again.frame("SUBSCRIBE", {"destination": "/queue/dur.default", "id": "s", "ack": "auto"})
    wait_for(lambda: len(again.messages) == 3)
    again.disconnect()
    assert [m.key for m in again.messages] == [("g", i) for i in range(3)]
    flags = [m.headers.get("redelivered") for m in again.messages]
    assert flags == ["true"] * 3, flags


# --- 2. group order across a restart -------------------------------------------


def send_persistent(peer: Peer, destination: str, group: str, seqs, **extra: str) -> None:
    """Persistent grouped SENDs, each with a receipt; waits for the last one."""
    last = None
    for s in seqs:
        last = f"{group}.{s}.{destination}"
        peer.frame(
            "SEND",
            {
                "destination": destination,
                "persistent": "true",
                "JMSXGroupID": group,
                "x-seq": str(s),
                "receipt": last,
                **extra,
            },
            f"{group}/{s}".encode(),
        )
    if last is not None:
        peer.wait_receipt(last)


def test_group_owner_holding_messages_at_kill9_order_kept_after_restart(shoal_server):
    """A holds unacked messages of three groups; kill -9; B gets them in order, redelivered."""
    queue = "dur.owner"
    srv = shoal_server()
    producer = Peer(srv.stomp_port)
    groups = ["ga", "gb", "gc"]
    for g in groups:
        send_persistent(producer, f"/queue/{queue}?{PDC}", g, range(10))
    a = Peer(srv.stomp_port)
    a.frame("SUBSCRIBE", {"destination": f"/queue/{queue}", "id": "s", "ack": "client-individual"})
    wait_for(lambda: len(a.messages) == 30)
    held = a.snapshot()
    assert all(seqs == list(range(10)) for seqs in by_group(held).values())
    for m in held:
        if m.key[1] < 3:
            a.frame("ACK", {"id": m.headers["ack"], "receipt": f"ack-{m.key}"})
    for g in groups:
        a.wait_receipt(f"ack-{(g, 2)}")
    a.sync()  # every ACK and delivery count so far is fsynced
    srv.kill9()
    producer.close()
    a.close()

    srv.start()
    producer = Peer(srv.stomp_port)
    b = Peer(srv.stomp_port)
    b.frame("SUBSCRIBE", {"destination": f"/queue/{queue}", "id": "s", "ack": "client-individual"})
    for g in groups:  # new messages of the same groups queue up behind the returned ones
        send_persistent(producer, f"/queue/{queue}", g, range(10, 13))
    wait_for(lambda: len(b.messages) == 30, timeout=20)
    b.sync()
    got = b.snapshot()
    assert len(got) == 30, [m.key for m in got]
    check_bodies(got)
    for g, seqs in by_group(got).items():
        assert seqs == list(range(3, 13)), (g, seqs)
    for m in got:
        if m.key[1] < 10:
            assert m.headers.get("redelivered") == "true", m.headers
            assert m.headers.get("x-delivery-count") == "1", m.headers
        else:
            assert "redelivered" not in m.headers, m.headers
    b.disconnect()
    producer.disconnect()


def test_returned_message_delivery_count_survives_kill9_with_default_settings(shoal_server):
    """The documented default: a NACKed persistent message's count is journaled."""
    srv = shoal_server()
    producer = Peer(srv.stomp_port)
    send_persistent(producer, "/queue/dur.nack", "g", range(2))
    c = Peer(srv.stomp_port)
    c.frame(
        "SUBSCRIBE",
        {
            "destination": "/queue/dur.nack",
            "id": "s",
            "ack": "client-individual",
            "prefetch-count": "1",
        },
    )
    wait_for(lambda: c.messages)
    c.frame("NACK", {"id": c.messages[0].headers["ack"], "receipt": "nack"})
    c.wait_receipt("nack")
    wait_for(lambda: len(c.messages) == 2)
    assert c.messages[1].key == ("g", 0) and c.messages[1].headers["redelivered"] == "true"
    srv.kill9()
    producer.close()
    c.close()
    srv.start()
    again = Peer(srv.stomp_port)
    again.frame("SUBSCRIBE", {"destination": "/queue/dur.nack", "id": "s", "ack": "auto"})
    wait_for(lambda: len(again.messages) == 2)
    again.disconnect()
    first, second = again.messages
    assert first.key == ("g", 0) and first.headers.get("redelivered") == "true", first.headers
    assert int(first.headers["x-delivery-count"]) >= 1
    # g/1 was never delivered, but after a crash the broker cannot know that:
    # every recovered message is flagged (docs/durability.md).
    assert second.key == ("g", 1) and second.headers.get("redelivered") == "true"
    assert second.headers["x-delivery-count"] == "1"


# --- 3. queues, settings and durable subscriptions created at run time ---------


def test_runtime_queues_settings_and_durable_subscription_survive_kill9(shoal_server):
    srv = shoal_server()
    p = Peer(srv.stomp_port)
    send_persistent(p, "/queue/dur.orders?group-buckets=4&max-delivery-attempts=2", "o", range(3))
    # An empty queue created by SUBSCRIBE alone.
    s = Peer(srv.stomp_port)
    s.frame(
        "SUBSCRIBE",
        {
            "destination": "/queue/dur.empty?group-mode=shared&default-persistent=true",
            "id": "e",
            "ack": "auto",
            "receipt": "sub-e",
        },
    )
    s.wait_receipt("sub-e")
    s.frame("UNSUBSCRIBE", {"id": "e", "receipt": "unsub-e"})
    s.wait_receipt("unsub-e")
    # A durable topic subscription, then its subscriber goes away.
    d = Peer(srv.stomp_port, connect_headers={"client-id": "cli"})
    d.frame(
        "SUBSCRIBE",
        {
            "destination": "/topic/dur.t",
            "id": "t",
            "ack": "client-individual",
            "durable-subscription-name": "N",
            "receipt": "sub-t",
        },
    )
    d.wait_receipt("sub-t")
    d.disconnect()
    send_persistent(p, "/topic/dur.t", "t", range(5))
    p.frame(
        "SEND",
        {"destination": "/topic/dur.t", "JMSXGroupID": "t", "x-seq": "99", "receipt": "np"},
        b"t/99",
    )  # not persistent: gone after the crash
    p.wait_receipt("np")
    before = {q["name"]: q for q in _queues(srv)}
    assert "dur.orders" in before and "dur.empty" in before
    durable = [n for n, q in before.items() if q.get("subscription") and "dur.t" in n]
    assert len(durable) == 1, before.keys()
    srv.kill9()
    p.close()
    s.close()

    srv.start()
    after = {q["name"]: q for q in _queues(srv)}
    for name in ("dur.orders", "dur.empty", durable[0]):
        assert name in after, f"queue {name} lost in the restart: {sorted(after)}"
        assert after[name]["settings"] == before[name]["settings"], name
    status, addresses = http_json(f"{srv.http_url}/api/addresses")
    assert status == 200
    names = {a["name"] for a in addresses["addresses"]}
    assert {"dur.orders", "dur.empty", "dur.t"} <= names, names
    orders = queue_info(srv.http_url, "dur.orders")
    assert orders["settings"]["group-buckets"] == 4
    assert orders["settings"]["max-delivery-attempts"] == 2
    assert orders["depth"] == 3
    empty = queue_info(srv.http_url, "dur.empty")
    assert empty["settings"]["group-mode"] == "shared"
    assert empty["settings"]["default-persistent"] is True

    d = Peer(srv.stomp_port, connect_headers={"client-id": "cli"})
    d.frame(
        "SUBSCRIBE",
        {"destination": "/topic/dur.t", "id": "t", "ack": "auto", "durable-subscription-name": "N"},
    )
    wait_for(lambda: len(d.messages) == 5)
    d.sync()
    assert [m.key for m in d.messages] == [("t", i) for i in range(5)]
    check_bodies(d.messages)
    d.disconnect()
    # max-delivery-attempts=2 still applies after the restart.
    c = Peer(srv.stomp_port)
    c.frame(
        "SUBSCRIBE",
        {
            "destination": "/queue/dur.orders",
            "id": "s",
            "ack": "client-individual",
            "prefetch-count": "1",
        },
    )
    for attempt in range(2):
        wait_for(lambda n=attempt: len(c.messages) == n + 1)
        assert c.messages[-1].key == ("o", 0)
        c.frame("NACK", {"id": c.messages[-1].headers["ack"], "receipt": f"n{attempt}"})
        c.wait_receipt(f"n{attempt}")
    wait_for(lambda: len(c.messages) == 3)
    assert c.messages[-1].key == ("o", 1)  # o/0 went to the DLQ after 2 attempts
    assert queue_info(srv.http_url, "DLQ")["depth"] == 1
    c.disconnect()


def _queues(srv) -> list[dict]:
    status, body = http_json(f"{srv.http_url}/api/queues")
    assert status == 200
    return body["queues"]


# --- 4. dead letters and expiry moves ----------------------------------------


def test_dead_letter_and_expiry_moves_survive_kill9(shoal_server):
    srv = shoal_server()
    p = Peer(srv.stomp_port)
    send_persistent(p, "/queue/dur.poison?max-delivery-attempts=2", "g", range(2))
    c = Peer(srv.stomp_port)
    c.frame(
        "SUBSCRIBE",
        {
            "destination": "/queue/dur.poison",
            "id": "s",
            "ack": "client-individual",
            "prefetch-count": "1",
        },
    )
    for attempt in range(2):
        wait_for(lambda n=attempt: len(c.messages) == n + 1)
        assert c.messages[-1].key == ("g", 0)
        c.frame("NACK", {"id": c.messages[-1].headers["ack"], "receipt": f"n{attempt}"})
        c.wait_receipt(f"n{attempt}")
    wait_for(lambda: len(c.messages) == 3)
    assert c.messages[-1].key == ("g", 1)  # the group goes on
    c.frame("ACK", {"id": c.messages[-1].headers["ack"], "receipt": "a"})
    c.wait_receipt("a")
    # Expiry into an expiry address, moved by the broker's timer.
    import time

    expires = int(time.time() * 1000) + 300
    p.frame(
        "SEND",
        {
            "destination": "/queue/dur.exp?expiry-address=dur.expired",
            "persistent": "true",
            "expires": str(expires),
            "JMSXGroupID": "x",
            "x-seq": "0",
            "receipt": "e",
        },
        b"x/0",
    )
    p.wait_receipt("e")
    wait_for(lambda: (queue_info(srv.http_url, "dur.expired") or {}).get("depth") == 1)
    p.sync()  # the move's records are fsynced
    assert queue_info(srv.http_url, "DLQ")["depth"] == 1
    srv.kill9()
    p.close()
    c.close()

    srv.start()
    for name, dest, key in (
        ("DLQ", "/queue/dur.poison", ("g", 0)),
        ("dur.expired", "/queue/dur.exp", ("x", 0)),
    ):
        info = queue_info(srv.http_url, name)
        assert info is not None and info["depth"] == 1, (name, info)
        r = Peer(srv.stomp_port)
        r.frame("SUBSCRIBE", {"destination": f"/queue/{name}", "id": "s", "ack": "auto"})
        wait_for(lambda r=r: r.messages)
        r.sync()
        assert [m.key for m in r.messages] == [key], name
        assert r.messages[0].headers["original-destination"] == dest
        check_bodies(r.messages)
        r.disconnect()
    for name in ("dur.poison", "dur.exp"):
        info = queue_info(srv.http_url, name)
        assert info is not None and info["depth"] == 0 and info["in_flight"] == 0, info
        r = Peer(srv.stomp_port)
        r.frame("SUBSCRIBE", {"destination": f"/queue/{name}", "id": "s", "ack": "auto"})
        r.sync()
        assert r.messages == [], name
        r.disconnect()


# --- 5. persistent and non-persistent in one queue ------------------------------


def test_mixed_persistence_keeps_arrival_order_and_restart_keeps_persistent_ones(shoal_server):
    """ActiveMQ 5.17 delivers the persistent ones ahead of the others; arrival order is the rule."""
    srv = shoal_server()
    rng = random.Random(7)
    kinds = [rng.random() < 0.5 for _ in range(40)]  # True: persistent
    kinds[0], kinds[1] = True, False
    p = Peer(srv.stomp_port)
    live = Peer(srv.stomp_port)  # a consumer that is there while half the messages arrive
    live.frame(
        "SUBSCRIBE",
        {
            "destination": "/queue/dur.mixed",
            "id": "s",
            "ack": "client-individual",
            "receipt": "sub",
        },
    )
    live.wait_receipt("sub")

    def send(seq: int) -> None:
        group = "m" if seq % 2 else "u"  # grouped and ungrouped messages alike
        headers = {"destination": "/queue/dur.mixed", "x-seq": str(seq), "receipt": f"s{seq}"}
        if group == "m":
            headers["JMSXGroupID"] = "m"
        if kinds[seq]:
            headers["persistent"] = "true"
        p.frame("SEND", headers, f"{group if group == 'm' else ''}/{seq}".encode())

    for seq in range(20):
        send(seq)
    p.wait_receipt("s19")
    wait_for(lambda: len(live.messages) == 20)
    live.close()  # its 20 unacked messages return to the queue
    wait_for(lambda: (queue_info(srv.http_url, "dur.mixed") or {}).get("consumers") == 0)
    for seq in range(20, 40):
        send(seq)
    p.wait_receipt("s39")
    c = Peer(srv.stomp_port)
    c.frame("SUBSCRIBE", {"destination": "/queue/dur.mixed", "id": "s", "ack": "client-individual"})
    wait_for(lambda: len(c.messages) == 40)
    c.sync()
    assert [int(m.headers["x-seq"]) for m in live.messages] == list(range(20))
    assert [int(m.headers["x-seq"]) for m in c.messages] == list(range(40))
    srv.kill9()
    p.close()
    c.close()

    srv.start()
    c = Peer(srv.stomp_port)
    c.frame("SUBSCRIBE", {"destination": "/queue/dur.mixed", "id": "s", "ack": "auto"})
    expected = [seq for seq in range(40) if kinds[seq]]
    wait_for(lambda: len(c.messages) >= len(expected))
    c.sync()
    assert [int(m.headers["x-seq"]) for m in c.messages] == expected
    assert all(m.headers.get("persistent") == "true" for m in c.messages)
    c.disconnect()


# --- 6. a torn tail ---------------------------------------------------------------


def tear_last_write(data, mode: str) -> str:
    """Make the end of the last segment look like a write cut by a power failure."""
    seg = segments(data)[-1]
    fr = journal_frames(seg)
    last = fr[-1]
    assert last.offset > SEGMENT_HEADER_SIZE, "the last frame is the segment's snapshot"
    with open(seg, "r+b") as f:
        if mode == "payload-lost":
            # The length word reached the disk, the payload's later sectors did not.
            f.seek(last.payload_offset + last.length // 2)
            f.write(bytes(last.end - (last.payload_offset + last.length // 2)))
        else:  # "half-frame": a new frame's header and half its payload, never completed
            header = FRAME_HEADER.pack(0x12345678, 4000, last.seq + 1)  # crc, length, seq
            f.seek(last.end)
            f.write(header + random.Random(1).randbytes(1500))
    return seg.name


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["payload-lost", "half-frame"])
def test_torn_tail_after_kill9_is_cut_and_logged(shoal_server, mode):
    # 4 MiB segments: recovery scans a torn segment's preallocated zeros in
    # Python (~7 s for the default 64 MiB on a busy box), which only costs time here.
    srv = shoal_server(config="[broker]\njournal-segment-bytes = 4194304\n")
    marker = Peer(srv.stomp_port)  # declares the queue in a frame of its own
    send_persistent(marker, "/queue/dur.torn", "start", range(1))
    marker.close()
    groups = [f"t{n:02d}" for n in range(20)]
    producers = [
        GroupProducer(srv.stomp_port, "/queue/dur.torn", groups[k::4], receipts=False, limit=2500)
        for k in range(4)
    ]
    for p in producers:
        p.start()
    wait_for(
        lambda: (queue_info(srv.http_url, "dur.torn") or {}).get("depth", 0) >= 2000, timeout=60
    )
    # Snapshot, marker and at least two batches of the load are in the journal.
    wait_for(lambda: len(journal_frames(segments(srv.data)[-1])) >= 4, timeout=60)
    srv.kill9()  # SENDs pipelined without receipts; the journal is still being written
    for p in producers:
        p.join(10)
        p.peer.close()
    sent = {k for p in producers for k in p.sent}
    seg_name = tear_last_write(srv.data, mode)
    log_start = len(srv.log_text())

    srv.start()  # restarts: a torn tail is not corruption
    log = srv.log_text()[log_start:]
    assert "torn" in log and seg_name in log, log
    assert list((srv.data / "journal").glob(f"{seg_name}.torn-*")), "the cut bytes are kept"
    c = Peer(srv.stomp_port)
    c.frame("SUBSCRIBE", {"destination": "/queue/dur.torn", "id": "s", "ack": "auto"})
    c.sync()
    wait_for(lambda: drained(srv, "dur.torn"), timeout=60)
    got = c.snapshot()
    c.disconnect()
    check_bodies(got)
    assert ("start", 0) in {m.key for m in got}
    got = [m for m in got if m.key[0] != "start"]
    assert {m.key for m in got} <= sent
    assert got
    for g, seqs in by_group(got).items():
        assert seqs == list(range(len(seqs))), f"group {g} is not a prefix: {seqs[:5]}..."
    # The journal is clean now: another start notes nothing.
    srv.stop()
    log_start = len(srv.log_text())
    srv.start()
    assert "journal recovery" not in srv.log_text()[log_start:]


# --- 7. corruption before the tail -------------------------------------------------


def test_corruption_before_tail_refuses_start_until_repair(shoal_server):
    srv = shoal_server(config=SMALL_SEGMENTS)
    p = Peer(srv.stomp_port)
    for s in range(10):  # one frame per write: a SEND and its receipt at a time
        send_persistent(p, "/queue/dur.corrupt", "c", [s])
    p.disconnect()
    srv.stop()
    seg = segments(srv.data)[0]
    raw = seg.read_bytes()
    at = raw.index(b"c/4")  # the body of message 4, in the middle of the segment
    frame = next(f for f in journal_frames(seg) if f.payload_offset <= at < f.end)
    assert frame != journal_frames(seg)[-1]  # the damage is not a torn tail
    with open(seg, "r+b") as f:
        f.seek(at)
        f.write(bytes([raw[at] ^ 0xFF]))

    log_start = len(srv.log_text())
    with pytest.raises(RuntimeError):
        srv.start()
    log = srv.log_text()[log_start:]
    assert seg.name in log and str(frame.offset) in log, log
    assert "--repair" in log, log  # the refusal says how to get going again

    srv.extra_args = ["--repair"]
    log_start = len(srv.log_text())
    srv.start()
    log = srv.log_text()[log_start:]
    aside = list(seg.parent.glob(f"{seg.name}.damaged-*"))
    assert [a.name for a in aside] == [f"{seg.name}.damaged-{frame.offset}"]
    assert aside[0].name in log, log  # the log says what was moved aside, and where to
    c = Peer(srv.stomp_port)
    c.frame(
        "SUBSCRIBE", {"destination": "/queue/dur.corrupt", "id": "s", "ack": "client-individual"}
    )
    wait_for(lambda: len(c.messages) >= 9)
    c.sync()
    assert [m.key[1] for m in c.messages] == [0, 1, 2, 3, 5, 6, 7, 8, 9]
    check_bodies(c.messages)
    c.close()
    # The repaired journal opens without --repair.
    srv.kill9()
    srv.extra_args = []
    srv.start()
    c = Peer(srv.stomp_port)
    c.frame("SUBSCRIBE", {"destination": "/queue/dur.corrupt", "id": "s", "ack": "auto"})
    wait_for(lambda: len(c.messages) >= 9)
    c.sync()
    assert [m.key[1] for m in c.messages] == [0, 1, 2, 3, 5, 6, 7, 8, 9]
    c.disconnect()


# --- 8. disk full -------------------------------------------------------------------


def fill_until_error(p: Peer, destination: str, body_size: int = 16000) -> int:
    """Persistent SENDs with receipts, one at a time, until one gets an ERROR.

    Returns how many got a RECEIPT.
    """
    n = 0
    while True:
        rid = f"f{n}"
        p.frame(
            "SEND",
            {
                "destination": destination,
                "persistent": "true",
                "JMSXGroupID": "f",
                "x-seq": str(n),
                "receipt": rid,
            },
            f"f/{n}".encode().ljust(body_size, b"."),
        )
        wait_for(lambda r=rid: p.has_receipt(r) or p.errors or p.closed.is_set(), timeout=30)
        if not p.has_receipt(rid):
            return n
        n += 1
        assert n < 10_000, "the file system never filled up"


@pytest.mark.slow
def test_disk_full_errors_name_the_cause_and_receipted_messages_survive(shoal_server, tmp_path):
    data = tmp_path / "full-data"
    with tmpfs(data / "journal", "2m") as journal:
        srv = shoal_server(data=data, config=SMALL_SEGMENTS)
        try:
            p = Peer(srv.stomp_port)
            receipted = fill_until_error(p, "/queue/dur.full")
            assert receipted > 10
            headers, body = p.errors[0]
            text = headers.get("message", "") + body.decode()
            assert "ENOSPC" in text or "No space left" in text, text
            assert p.closed.wait(10)

            # Consumers keep being served: every receipted message, in order.
            c = Peer(srv.stomp_port)
            c.frame(
                "SUBSCRIBE",
                {"destination": "/queue/dur.full", "id": "s", "ack": "client-individual"},
            )
            wait_for(lambda: len(c.messages) >= receipted)
            got = [m.key[1] for m in c.snapshot()]
            assert got[:receipted] == list(range(receipted)), got
            assert len(got) <= receipted + 1  # the refused one may still be delivered
            for m in c.snapshot():
                c.frame("ACK", {"id": m.headers["ack"]})
            # Space comes back: the broker writes what was pending and takes persistent SENDs again.
            res = subprocess.run(
                ["mount", "-o", "remount,size=16m", str(journal)], capture_output=True, text=True
            )
            assert res.returncode == 0, res.stderr
            p = Peer(srv.stomp_port)
            send_persistent(p, "/queue/dur.after", "a", range(3))
            c.sync()  # its ACKs are durable now
            srv.kill9()
            p.close()
            c.close()

            srv.start()
            # Acked (durably, once space came back): none of them returns. Only the
            # refused message may be there, if the consumer had not got it.
            r = Peer(srv.stomp_port)
            r.frame("SUBSCRIBE", {"destination": "/queue/dur.full", "id": "s", "ack": "auto"})
            r.sync()
            assert [m.key for m in r.snapshot()] in ([], [("f", receipted)])
            r.disconnect()
            r = Peer(srv.stomp_port)
            r.frame("SUBSCRIBE", {"destination": "/queue/dur.after", "id": "s", "ack": "auto"})
            wait_for(lambda: len(r.messages) >= 3)
            r.sync()
            assert [m.key for m in r.messages] == [("a", i) for i in range(3)]
            r.disconnect()
        finally:
            srv.kill9()


@pytest.mark.slow
def test_disk_full_keeps_serving_a_consumer_that_acks_with_receipts(shoal_server, tmp_path):
    data = tmp_path / "full-data"
    with tmpfs(data / "journal", "2m"):
        srv = shoal_server(data=data, config=SMALL_SEGMENTS)
        try:
            p = Peer(srv.stomp_port)
            assert fill_until_error(p, "/queue/dur.full") > 10
            c = Peer(srv.stomp_port)
            c.frame(
                "SUBSCRIBE",
                {
                    "destination": "/queue/dur.full",
                    "id": "s",
                    "ack": "client-individual",
                    "prefetch-count": "5",
                },
            )
            wait_for(lambda: len(c.messages) == 5)
            c.frame("ACK", {"id": c.messages[0].headers["ack"], "receipt": "ack0"})
            # Served on: the ACK frees credit, the next message comes, the connection stays.
            wait_for(lambda: len(c.messages) == 6 or c.closed.is_set() or c.errors)
            assert not c.errors, c.errors
            assert len(c.messages) == 6 and not c.closed.is_set()
        finally:
            srv.kill9()


# --- the on-disk format reference -------------------------------------------------


def test_frame_header_layout_matches_the_format_reference(shoal_server):
    """Read the first two frames exactly as docs/journal.md describes them."""
    srv = shoal_server()
    p = Peer(srv.stomp_port)
    send_persistent(p, "/queue/dur.format", "f", range(1))
    p.disconnect()
    srv.stop()
    raw = segments(srv.data)[0].read_bytes()
    magic, version, header_size, salt, seq = struct.unpack_from("<8sHHIQ", raw, 0)
    assert (magic, version, header_size, seq) == (b"SHOALJNL", 1, 32, 1)
    pos = SEGMENT_HEADER_SIZE
    for _ in range(2):
        crc, length, batch = struct.unpack_from("<IIQ", raw, pos)  # docs: CRC, length, batch
        assert 1 <= length < len(raw) - pos - 16, f"implausible payload length {length} at {pos}"
        assert zlib.crc32(raw[pos + 4 : pos + 16 + length], salt) == crc
        pos += (16 + length + 7) & ~7


# --- 9. group commit and the clean-close marker -----------------------------------


def test_concurrent_receipted_producers_share_fsyncs_e2e(shoal_server):
    """README: concurrent producers share fsyncs. 8 stomp.py producers send
    receipted persistent messages at once, each waiting for its receipt
    before the next: 80 receipts from fewer than 80 fsyncs (the broker's
    count, GET /api/broker). Per-message fsyncs would make at least 80."""
    import stomp

    srv = shoal_server()
    producers, rounds = 8, 10

    class Receipts(stomp.ConnectionListener):
        def __init__(self) -> None:
            self.got: set[str] = set()
            self.cond = threading.Condition()

        def on_receipt(self, frame) -> None:
            with self.cond:
                self.got.add(frame.headers["receipt-id"])
                self.cond.notify_all()

    conns = []
    for k in range(producers):
        conn = stomp.Connection12([("127.0.0.1", srv.stomp_port)])
        listener = Receipts()
        conn.set_listener("r", listener)
        conn.connect(wait=True)
        conns.append((conn, listener))

    def fsyncs() -> int:
        return http_json(f"{srv.http_url}/api/broker")[1]["fsync"]["count"]

    before = fsyncs()
    barrier = threading.Barrier(producers)
    failures: list[str] = []

    def produce(k: int) -> None:
        conn, listener = conns[k]
        barrier.wait(10)
        for r in range(rounds):
            rid = f"p{k}.{r}"
            conn.send(
                "/queue/dur.group-commit",
                f"{k}/{r}",
                headers={"persistent": "true", "receipt": rid},
            )
            with listener.cond:
                if not listener.cond.wait_for(lambda rid=rid: rid in listener.got, 20):
                    failures.append(rid)
                    return

    threads = [threading.Thread(target=produce, args=(k,)) for k in range(producers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not failures, failures
    used = fsyncs() - before
    for conn, _ in conns:
        conn.disconnect()
    assert (queue_info(srv.http_url, "dur.group-commit") or {}).get("depth") == producers * rounds
    assert 0 < used < producers * rounds, used


def test_damage_in_the_last_frame_after_a_clean_stop_refuses_start(shoal_server):
    """After a clean stop no write can be torn: damage in the last frame is
    corruption (it used to be cut as a torn tail, receipted messages dropped
    with a warning). `shoal journal check` says so, `shoal journal repair`
    lists the messages it drops, and the broker starts again."""
    srv = shoal_server(config=SMALL_SEGMENTS)
    p = Peer(srv.stomp_port)
    send_persistent(p, "/queue/dur.closed", "k", range(5))
    p.disconnect()
    srv.stop()
    seg = segments(srv.data)[-1]
    last = journal_frames(seg)[-1]
    raw = seg.read_bytes()
    at = raw.index(b"k/4", last.payload_offset)  # the body of the last receipted message
    with open(seg, "r+b") as f:
        f.seek(at)
        f.write(bytes([raw[at] ^ 0xFF]))

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "shoal.cli", "journal", *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    checked = cli("check", str(srv.data))
    assert checked.returncode == 1 and "CORRUPT" in checked.stdout, checked.stdout
    assert "closed cleanly" in checked.stdout and "group 'k'" in checked.stdout
    log_start = len(srv.log_text())
    with pytest.raises(RuntimeError):
        srv.start()
    assert "closed cleanly" in srv.log_text()[log_start:]
    repaired = cli("repair", str(srv.data))
    assert repaired.returncode == 0, repaired.stderr
    # The last frame is the last write: the receipted SENDs it held go together.
    dropped = int(re.search(r"messages dropped: (\d+)", repaired.stdout).group(1))
    assert 1 <= dropped <= 5 and "queue 'dur.closed' id" in repaired.stdout, repaired.stdout
    assert repaired.stdout.count("group 'k'") == dropped
    srv.start()
    c = Peer(srv.stomp_port)
    c.frame("SUBSCRIBE", {"destination": "/queue/dur.closed", "id": "s", "ack": "auto"})
    c.sync()
    wait_for(lambda: len(c.messages) >= 5 - dropped)
    assert [m.key[1] for m in c.messages] == list(range(5 - dropped))
    c.disconnect()
