"""Three real shoal nodes and one real ZooKeeper (no mocks).

Raw STOMP clients (tests.support.RawStomp) on 127.0.0.1: producers and
consumers on every node.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import urllib.request
from collections import defaultdict

import pytest
from tests.support import RawStomp, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.cluster, pytest.mark.slow]


def status(node) -> dict:
    with urllib.request.urlopen(node.http_url + "/api/cluster", timeout=5) as r:
        return json.load(r)


def members_with_consumers(node, queue: str) -> set[str]:
    return {n["node"] for n in status(node)["nodes"] if queue in n["queues_with_consumers"]}


def read_messages(consumer: RawStomp, count: int) -> list[tuple[str, dict[str, str], bytes]]:
    out = []
    while len(out) < count:
        frame = consumer.read_frame()
        assert frame[0] == "MESSAGE", frame
        out.append(frame)
    return out


def connect(port: int) -> RawStomp:
    c = RawStomp(port, timeout=20)
    assert c.connect()[0] == "CONNECTED"
    return c


def send(c: RawStomp, group: str, body: str, receipt: str, **headers: str) -> None:
    c.frame(
        "SEND",
        {"destination": "/queue/orders", "JMSXGroupID": group, "receipt": receipt, **headers},
        body.encode(),
    )


def test_each_group_is_consumed_by_one_consumer_cluster_wide_in_order_per_producer(cluster):
    nodes = cluster.start(3)
    consumers = []
    for i, node in enumerate(nodes):
        c = connect(node.stomp_port)
        c.frame(
            "SUBSCRIBE",
            {"id": f"s{i}", "destination": "/queue/orders", "ack": "auto", "receipt": "sub"},
        )
        assert c.read_frame()[0] == "RECEIPT"
        consumers.append(c)
    # every node has seen every node's consumers, so each proposes itself (C2)
    wait_for(
        lambda: all(members_with_consumers(n, "orders") == {"n1", "n2", "n3"} for n in nodes),
        timeout=20,
    )
    producers = [connect(node.stomp_port) for node in nodes]
    groups = [f"g{k}" for k in range(6)]
    per_round = 5
    sent = 0
    for r in range(per_round):
        for p_index, p in enumerate(producers):
            for g in groups:
                send(
                    p,
                    g,
                    f"p{p_index}:{g}:{r}",
                    f"{p_index}-{g}-{r}",
                    persistent="true" if r % 2 else "false",
                )
                sent += 1
    for p in producers:
        receipts = [p.read_frame() for _ in range(per_round * len(groups))]
        assert {f[0] for f in receipts} == {"RECEIPT"}, receipts
    got_by = collect(consumers, sent)
    owner_of: dict[str, set[int]] = defaultdict(set)
    order: dict[tuple[str, str], list[int]] = defaultdict(list)
    bodies = []
    for i, frames in got_by.items():
        for _cmd, headers, body in frames:
            producer, group, r = body.decode().split(":")
            assert headers["JMSXGroupID"] == group
            owner_of[group].add(i)
            order[(producer, group)].append(int(r))
            bodies.append(body)
    assert len(bodies) == sent == len(set(bodies))  # nothing lost, nothing twice
    assert all(len(owners) == 1 for owners in owner_of.values()), dict(owner_of)
    assert all(rs == sorted(rs) for rs in order.values()), dict(order)
    # the groups were decided by several nodes and crossed the links
    assert sum(status(n)["forwarded"] for n in nodes) > 0


def collect(consumers: list[RawStomp], total: int, timeout: float = 30.0) -> dict[int, list]:
    """Read from every consumer in its own thread until ``total`` messages came."""
    got: dict[int, list] = defaultdict(list)

    def reader(i: int, c: RawStomp) -> None:
        c.sock.settimeout(timeout)
        try:
            while sum(len(v) for v in got.values()) < total:
                got[i].append(c.read_frame())
        except (OSError, ConnectionError):
            pass

    threads = [
        threading.Thread(target=reader, args=(i, c), daemon=True) for i, c in enumerate(consumers)
    ]
    for t in threads:
        t.start()
    try:
        wait_for(lambda: sum(len(v) for v in got.values()) >= total, timeout=timeout)
    except AssertionError:
        counts = {i: len(v) for i, v in got.items()}
        raise AssertionError(f"only {sum(counts.values())} of {total} arrived: {counts}") from None
    finally:
        for c in consumers:
            c.sock.shutdown(2)  # ends the readers
        for t in threads:
            t.join(5)
    return got


def test_zookeeper_down_refuses_a_new_group_naming_it_while_bound_groups_flow(cluster):
    n1, n2, n3 = cluster.start(3, timeout_ms=1500)
    consumer = connect(n2.stomp_port)
    consumer.frame(
        "SUBSCRIBE", {"id": "s", "destination": "/queue/orders", "ack": "auto", "receipt": "sub"}
    )
    assert consumer.read_frame()[0] == "RECEIPT"
    wait_for(lambda: members_with_consumers(n1, "orders") == {"n2"}, timeout=20)
    producer = connect(n1.stomp_port)
    # bound while ZooKeeper is up: n1 has no consumer, so it proposes n2 (C2)
    send(producer, "old", "old-0", "r0")
    assert producer.read_frame()[:2] == ("RECEIPT", {"receipt-id": "r0"})
    local = connect(n2.stomp_port)
    send(local, "local", "local-0", "l0")
    assert local.read_frame()[0] == "RECEIPT"
    # the RECEIPT of a forwarded SEND means "journaled on n1" (store and
    # forward): it may reach n2 after the local one
    assert sorted(f[2] for f in read_messages(consumer, 2)) == [b"local-0", b"old-0"]

    cluster.zk.stop()
    doomed = connect(n1.stomp_port)
    send(doomed, "new", "new-0", "r-new")
    in_tx = connect(n3.stomp_port)
    in_tx.frame("BEGIN", {"transaction": "t"})
    send(in_tx, "newer", "newer-0", "r-tx-send", transaction="t")
    in_tx.frame("COMMIT", {"transaction": "t", "receipt": "r-commit"})
    # meanwhile the bound groups flow, forwarded (n1 -> n2) and local (n2)
    for i in range(1, 4):
        send(producer, "old", f"old-{i}", f"r{i}")
        assert producer.read_frame()[:2] == ("RECEIPT", {"receipt-id": f"r{i}"})
        send(local, "local", f"local-{i}", f"l{i}")
        assert local.read_frame()[0] == "RECEIPT"
    # AMQP: the transfer is rejected naming the group; the connection stays up
    from proton import Disposition, Message
    from proton.utils import BlockingConnection, SendException

    amqp = BlockingConnection(f"amqp://127.0.0.1:{n1.amqp_port}")
    try:
        sender = amqp.create_sender("orders")
        sender.send(Message(body="old-amqp", group_id="old", durable=True))  # bound: accepted
        with pytest.raises(SendException) as refused:
            sender.send(Message(body="new-amqp", group_id="amqp-new", durable=True))
        assert refused.value.state == Disposition.REJECTED
    finally:
        amqp.close()
    error = doomed.read_frame()
    assert error[0] == "ERROR", error
    assert error[1].get("receipt-id") == "r-new"
    assert "'new'" in error[1]["message"] and "1500 ms" in error[1]["message"]
    assert doomed.closed_by_peer()
    assert in_tx.read_frame()[:2] == ("RECEIPT", {"receipt-id": "r-tx-send"})  # buffered
    error = in_tx.read_frame()  # the COMMIT holding a new group gets the ERROR (C3)
    assert error[0] == "ERROR" and error[1].get("receipt-id") == "r-commit", error
    assert "'newer'" in error[1]["message"]
    got = [f[2] for f in read_messages(consumer, 7)]
    assert [b for b in got if b.startswith(b"old")] == [b"old-1", b"old-2", b"old-3", b"old-amqp"]
    assert [b for b in got if b.startswith(b"local")] == [b"local-1", b"local-2", b"local-3"]
    assert not {b"new-0", b"newer-0", b"new-amqp"} & set(got)  # never routed ungrouped
    assert status(n1)["decision_timeouts"] == 2


def test_forwarded_messages_survive_kill_9_of_their_target_in_order_without_loss(cluster):
    """Store and forward (C4): RECEIPTs on n1 while n2 is dead; the link
    reconnects to n2's new address and resends; n2 drops what it has."""
    n1, n2 = cluster.start(2)
    consumer = connect(n2.stomp_port)
    consumer.frame(
        "SUBSCRIBE", {"id": "s", "destination": "/queue/orders", "ack": "auto", "receipt": "sub"}
    )
    assert consumer.read_frame()[0] == "RECEIPT"
    wait_for(lambda: members_with_consumers(n1, "orders") == {"n2"}, timeout=20)
    producer = connect(n1.stomp_port)
    total = 60
    for i in range(total // 2):
        send(producer, "g", str(i), f"r{i}", persistent="true")
    for i in range(total // 2):
        assert producer.read_frame()[:2] == ("RECEIPT", {"receipt-id": f"r{i}"})
    assert [int(f[2]) for f in read_messages(consumer, total // 2)] == list(range(total // 2))
    n2.kill9()
    for i in range(total // 2, total):  # n2 is gone: n1 journals them for it
        send(producer, "g", str(i), f"r{i}", persistent="true")
        assert producer.read_frame()[:2] == ("RECEIPT", {"receipt-id": f"r{i}"})
    assert status(n1)["nodes"][1]["forward_backlog"] >= total // 2
    n2.start()
    consumer = connect(n2.stomp_port)
    consumer.frame("SUBSCRIBE", {"id": "s", "destination": "/queue/orders", "ack": "auto"})
    consumer.sock.settimeout(30)
    later: list[int] = []
    while len(later) < total // 2:
        _cmd, headers, body = consumer.read_frame()
        n = int(body)
        if n < total // 2:  # consumed before the kill; its auto-ack may not be journaled
            assert headers.get("redelivered") == "true", (n, headers)
            continue
        later.append(n)
    assert later == list(range(total // 2, total))  # in order, each once
    wait_for(lambda: status(n1)["nodes"][1]["forward_backlog"] == 0, timeout=20)


def test_cluster_status_cli_and_group_listing_name_the_nodes(cluster):
    n1, n2 = cluster.start(2)
    consumer = connect(n2.stomp_port)
    consumer.frame(
        "SUBSCRIBE",
        {"id": "s", "destination": "/queue/orders", "ack": "client-individual", "receipt": "sub"},
    )
    assert consumer.read_frame()[0] == "RECEIPT"
    wait_for(lambda: members_with_consumers(n1, "orders") == {"n2"}, timeout=20)
    producer = connect(n1.stomp_port)
    send(producer, "g", "m", "r")
    assert producer.read_frame()[0] == "RECEIPT"
    read_messages(consumer, 1)  # unacked: the group stays owned on n2

    def cli(node, *args: str) -> str:
        out = subprocess.run(
            [sys.executable, "-m", "shoal.cli", *args, "--http", node.http_url],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert out.returncode == 0, out.stderr
        return out.stdout

    st = json.loads(cli(n1, "cluster", "status", "--json"))
    assert st["node"] == "n1" and st["zookeeper"]["state"] == "connected"
    assert st["fenced"] is False and st["fences"] == 0
    by_node = {n["node"]: n for n in st["nodes"]}
    assert by_node["n2"]["state"] == "up" and by_node["n2"]["bindings_held"] == 1
    assert by_node["n2"]["link"] == f"127.0.0.1:{n2.ports['link']}"
    assert by_node["n2"]["forward_backlog"] == 0 and by_node["n1"]["state"] == "self"
    with urllib.request.urlopen(n1.http_url + "/metrics", timeout=5) as r:
        metrics = r.read().decode()
    assert "shoal_cluster_decisions_total 1" in metrics
    assert "shoal_cluster_fenced 0" in metrics  # its session confirmed its groups
    assert 'shoal_cluster_link_up{node="n2"} 1' in metrics
    assert 'shoal_cluster_forward_backlog{node="n2"} 0' in metrics
    assert "shoal_cluster_decision_latency_seconds_count 1" in metrics
    assert "shoal_cluster_forwarded_total 1" in metrics
    text = cli(n1, "cluster", "status")
    assert "n2" in text and f"127.0.0.1:{n2.ports['link']}" in text
    thief = connect(n1.stomp_port)  # the forward queues are the links' alone
    thief.frame("SUBSCRIBE", {"id": "x", "destination": "/queue/$cluster.forward.n2"})
    error = thief.read_frame()
    assert error[0] == "ERROR" and "$cluster." in error[1]["message"]
    groups = json.loads(cli(n2, "groups", "list", "orders", "--json"))
    assert [(g["group"], g["node"]) for g in groups] == [("g", "n2")]


def test_kill_9_of_the_zookeeper_leader_of_three_fails_no_send(ensemble_cluster):
    nodes = ensemble_cluster.start(3)
    consumers = []
    for i, node in enumerate(nodes):
        c = connect(node.stomp_port)
        c.frame(
            "SUBSCRIBE",
            {"id": f"s{i}", "destination": "/queue/orders", "ack": "auto", "receipt": "sub"},
        )
        assert c.read_frame()[0] == "RECEIPT"
        consumers.append(c)
    wait_for(
        lambda: all(members_with_consumers(n, "orders") == {"n1", "n2", "n3"} for n in nodes),
        timeout=30,
    )
    producers = [connect(node.stomp_port) for node in nodes]
    zk = ensemble_cluster.zk
    leader = next(s for s in zk.servers if s.mode() == "leader")
    sent = 0
    deadline = None
    i = 0
    while deadline is None or time.monotonic() < deadline:
        if i == 10:
            leader.kill9()
            deadline = time.monotonic() + 8.0  # past re-election and session moves
        for p_index, p in enumerate(producers):
            # a new group every round (a decision) and an old one (bound)
            for g in (f"new-{i}", f"old-{i % 3}"):
                send(p, g, f"p{p_index}:{g}:{i}", f"{i}")
                frame = p.read_frame()
                assert frame[:2] == ("RECEIPT", {"receipt-id": f"{i}"}), frame
                sent += 1
        i += 1
    got_by = collect(consumers, sent)
    owner_of: dict[str, set[int]] = defaultdict(set)
    order: dict[tuple[str, str], list[int]] = defaultdict(list)
    for c_index, frames in got_by.items():
        for _cmd, _headers, body in frames:
            producer, group, r = body.decode().split(":")
            owner_of[group].add(c_index)
            order[(producer, group)].append(int(r))
    assert sum(len(v) for v in order.values()) == sent
    assert all(len(o) == 1 for o in owner_of.values())
    assert all(rs == sorted(rs) for rs in order.values())


class Reader(threading.Thread):
    """Reads MESSAGE frames from one consumer until stopped: (node, headers, body, when)."""

    def __init__(self, node: str, consumer: RawStomp, out: list) -> None:
        super().__init__(daemon=True)
        self.node, self.consumer, self.out = node, consumer, out

    def run(self) -> None:
        self.consumer.sock.settimeout(60)
        try:
            while True:
                _cmd, headers, body = self.consumer.read_frame()
                self.out.append((self.node, headers, body, time.monotonic()))
        except (OSError, ConnectionError):
            pass


class Producer(threading.Thread):
    """Sends persistent grouped messages with receipts until stopped or cut off."""

    def __init__(self, name: str, port: int, groups: int) -> None:
        super().__init__(daemon=True)
        self.name_, self.port, self.groups = name, port, groups
        self.receipted: list[bytes] = []
        self.stop = threading.Event()

    def run(self) -> None:
        try:
            p = connect(self.port)
            k = 0
            while not self.stop.is_set():
                g = f"g{k % self.groups}"
                body = f"{self.name_}:{g}:{k}"
                send(p, g, body, str(k), persistent="true")
                frame = p.read_frame()
                assert frame[:2] == ("RECEIPT", {"receipt-id": str(k)}), frame
                self.receipted.append(body.encode())
                k += 1
                time.sleep(0.002)  # a steady load, not a flood to drain afterwards
        except (OSError, ConnectionError):
            pass  # its node was killed: only receipted messages count


def subscribe(node, sub: str) -> RawStomp:
    c = connect(node.stomp_port)
    c.frame(
        "SUBSCRIBE", {"id": sub, "destination": "/queue/orders", "ack": "auto", "receipt": "sub"}
    )
    assert c.read_frame()[0] == "RECEIPT"
    return c


def test_kill_9_of_a_node_under_load_loses_nothing_receipted_and_keeps_groups_on_one_node(
    cluster,
):
    nodes = cluster.start(3)
    names = ["n1", "n2", "n3"]
    got: list = []
    readers = [Reader(name, subscribe(node, "s"), got) for name, node in zip(names, nodes)]
    for r in readers:
        r.start()
    wait_for(
        lambda: all(members_with_consumers(n, "orders") == set(names) for n in nodes), timeout=20
    )
    for i, node in enumerate(nodes):  # each node proposes itself for three groups
        first = connect(node.stomp_port)
        for k in range(3 * i, 3 * i + 3):
            send(first, f"g{k}", f"pre:g{k}:{k}", str(k), persistent="true")
            assert first.read_frame()[0] == "RECEIPT"
        first.close()
    producers = [Producer(name, node.stomp_port, groups=9) for name, node in zip(names, nodes)]
    for p in producers:
        p.start()
    wait_for(lambda: all(len(p.receipted) >= 50 for p in producers), timeout=30)
    nodes[0].kill9()
    killed_at = time.monotonic()
    wait_for(lambda: not producers[0].is_alive(), timeout=10)
    # groups bound to n2 and n3 never stop while n1 is down
    wait_for(
        lambda: sum(1 for n, _h, _b, t in got if n != "n1" and t > killed_at + 1.0) >= 50,
        timeout=30,
    )
    nodes[0].start()
    readers.append(Reader("n1", subscribe(nodes[0], "s-again"), got))
    readers[-1].start()
    wait_for(lambda: len(producers[1].receipted) >= 200, timeout=60)
    for p in producers:
        p.stop.set()
        p.join(10)
    receipted = {b for p in producers for b in p.receipted} | {
        f"pre:g{k}:{k}".encode() for k in range(9)
    }
    try:
        wait_for(lambda: receipted <= {b for _n, _h, b, _t in got}, timeout=60)
    except AssertionError:
        missing = sorted(receipted - {b for _n, _h, b, _t in got})
        raise AssertionError(f"{len(missing)} receipted never delivered: {missing[:20]}") from None

    nodes_of: dict[str, set[str]] = defaultdict(set)
    first_seen: dict[tuple[str, str], list[int]] = defaultdict(list)
    seen: set[bytes] = set()
    for node, headers, body, _t in got:
        producer, group, k = body.decode().split(":")
        nodes_of[group].add(node)
        if body in seen:
            assert headers.get("redelivered") == "true", (node, headers, body)
            continue
        seen.add(body)
        first_seen[(producer, group)].append(int(k))
    assert all(len(ns) == 1 for ns in nodes_of.values()), dict(nodes_of)  # one node per group
    assert all(ks == sorted(ks) for ks in first_seen.values())  # order per producer and group
    assert [nodes_of[f"g{k}"] for k in (0, 3, 6)] == [{"n1"}, {"n2"}, {"n3"}]


def test_link_listener_takes_only_cluster_nodes_and_drops_a_resent_message(cluster):
    (n1,) = cluster.start(1)
    consumer = subscribe(n1, "s")
    stranger = RawStomp(n1.ports["link"], timeout=10)
    assert stranger.connect()[0] == "ERROR"  # no shoal-node / shoal-cluster headers
    link = RawStomp(n1.ports["link"], timeout=10)
    assert link.connect(**{"shoal-node": "n9", "shoal-cluster": "test"})[0] == "CONNECTED"
    headers = {
        "destination": "/queue/orders",
        "JMSXGroupID": "g",
        "persistent": "true",
        "x-shoal-origin-node": "n9",
        "x-shoal-origin-epoch": "1",
    }
    for origin_id, body, receipt in (("5", b"a", "r1"), ("5", b"a", "r2"), ("6", b"b", "r3")):
        link.frame("SEND", {**headers, "x-shoal-origin-id": origin_id, "receipt": receipt}, body)
        assert link.read_frame()[:2] == ("RECEIPT", {"receipt-id": receipt})  # dup answered too
    assert [f[2] for f in read_messages(consumer, 2)] == [b"a", b"b"]
    consumer.sock.settimeout(1.0)
    with pytest.raises(TimeoutError):
        consumer.read_frame()  # the resent copy was dropped
    assert status(n1)["duplicates_dropped"] == 1
    link.frame("SUBSCRIBE", {"id": "x", "destination": "/queue/orders"})
    error = link.read_frame()
    assert error[0] == "ERROR" and "only SEND" in error[1]["message"]


def test_a_stopped_target_is_noticed_by_heart_beats_and_served_in_order_after(cluster):
    """SIGSTOP keeps TCP up: only the link's heart-beats can tell (partitions too)."""
    import os
    import signal

    n1, n2 = cluster.start(2)
    consumer = subscribe(n2, "s")
    wait_for(lambda: members_with_consumers(n1, "orders") == {"n2"}, timeout=20)
    producer = connect(n1.stomp_port)
    send(producer, "g", "0", "r0", persistent="true")
    assert producer.read_frame()[0] == "RECEIPT"
    assert [f[2] for f in read_messages(consumer, 1)] == [b"0"]

    def link_state() -> str:
        return next(n for n in status(n1)["nodes"] if n["node"] == "n2")["state"]

    assert link_state() == "up"
    os.killpg(n2.proc.pid, signal.SIGSTOP)
    try:
        for i in range(1, 21):
            send(producer, "g", str(i), f"r{i}", persistent="true")
            assert producer.read_frame()[:2] == ("RECEIPT", {"receipt-id": f"r{i}"})
        wait_for(lambda: link_state() != "up", timeout=15)
    finally:
        os.killpg(n2.proc.pid, signal.SIGCONT)
    wait_for(lambda: link_state() == "up", timeout=20)
    got = [int(f[2]) for f in read_messages(consumer, 20)]
    assert got == list(range(1, 21))  # in order, each once (the resends were dropped)
