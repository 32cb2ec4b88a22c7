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
    c.frame("SEND", {"destination": "/queue/orders", "JMSXGroupID": group, "receipt": receipt,
                     **headers}, body.encode())


def test_each_group_is_consumed_by_one_consumer_cluster_wide_in_order_per_producer(cluster):
    nodes = cluster.start(3)
    consumers = []
    for i, node in enumerate(nodes):
        c = connect(node.stomp_port)
        c.frame("SUBSCRIBE", {"id": f"s{i}", "destination": "/queue/orders", "ack": "auto",
                              "receipt": "sub"})
        assert c.read_frame()[0] == "RECEIPT"
        consumers.append(c)
    # every node has seen every node's consumers, so each proposes itself (C2)
    wait_for(lambda: all(members_with_consumers(n, "orders") == {"n1", "n2", "n3"}
                         for n in nodes), timeout=20)
    producers = [connect(node.stomp_port) for node in nodes]
    groups = [f"g{k}" for k in range(6)]
    per_round = 5
    sent = 0
    for r in range(per_round):
        for p_index, p in enumerate(producers):
            for g in groups:
                send(p, g, f"p{p_index}:{g}:{r}", f"{p_index}-{g}-{r}",
                     persistent="true" if r % 2 else "false")
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

    threads = [threading.Thread(target=reader, args=(i, c), daemon=True)
               for i, c in enumerate(consumers)]
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
    consumer.frame("SUBSCRIBE", {"id": "s", "destination": "/queue/orders", "ack": "auto",
                                 "receipt": "sub"})
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
    error = doomed.read_frame()
    assert error[0] == "ERROR", error
    assert error[1].get("receipt-id") == "r-new"
    assert "'new'" in error[1]["message"] and "1500 ms" in error[1]["message"]
    assert doomed.closed_by_peer()
    assert in_tx.read_frame()[:2] == ("RECEIPT", {"receipt-id": "r-tx-send"})  # buffered
    error = in_tx.read_frame()  # the COMMIT holding a new group gets the ERROR (C3)
    assert error[0] == "ERROR" and error[1].get("receipt-id") == "r-commit", error
    assert "'newer'" in error[1]["message"]
    got = [f[2] for f in read_messages(consumer, 6)]
    assert [b for b in got if b.startswith(b"old")] == [b"old-1", b"old-2", b"old-3"]
    assert [b for b in got if b.startswith(b"local")] == [b"local-1", b"local-2", b"local-3"]
    assert b"new-0" not in got and b"newer-0" not in got  # never routed ungrouped
    assert status(n1)["decision_timeouts"] == 1


def test_forwarded_messages_survive_kill_9_of_their_target_in_order_without_loss(cluster):
    """Store and forward (C4): RECEIPTs on n1 while n2 is dead; the link
    reconnects to n2's new address and resends; n2 drops what it has."""
    n1, n2 = cluster.start(2)
    consumer = connect(n2.stomp_port)
    consumer.frame("SUBSCRIBE", {"id": "s", "destination": "/queue/orders", "ack": "auto",
                                 "receipt": "sub"})
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
    consumer.frame("SUBSCRIBE", {"id": "s", "destination": "/queue/orders",
                                 "ack": "client-individual", "receipt": "sub"})
    assert consumer.read_frame()[0] == "RECEIPT"
    wait_for(lambda: members_with_consumers(n1, "orders") == {"n2"}, timeout=20)
    producer = connect(n1.stomp_port)
    send(producer, "g", "m", "r")
    assert producer.read_frame()[0] == "RECEIPT"
    read_messages(consumer, 1)  # unacked: the group stays owned on n2

    def cli(node, *args: str) -> str:
        out = subprocess.run(
            [sys.executable, "-m", "shoal.cli", *args, "--http", node.http_url],
            capture_output=True, text=True, timeout=30,
        )
        assert out.returncode == 0, out.stderr
        return out.stdout

    st = json.loads(cli(n1, "cluster", "status", "--json"))
    assert st["node"] == "n1" and st["zookeeper"]["state"] == "connected"
    by_node = {n["node"]: n for n in st["nodes"]}
    assert by_node["n2"]["state"] == "up" and by_node["n2"]["bindings_held"] == 1
    assert by_node["n2"]["link"] == f"127.0.0.1:{n2.ports['link']}"
    assert by_node["n2"]["forward_backlog"] == 0 and by_node["n1"]["state"] == "self"
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
        c.frame("SUBSCRIBE", {"id": f"s{i}", "destination": "/queue/orders", "ack": "auto",
                              "receipt": "sub"})
        assert c.read_frame()[0] == "RECEIPT"
        consumers.append(c)
    wait_for(lambda: all(members_with_consumers(n, "orders") == {"n1", "n2", "n3"}
                         for n in nodes), timeout=30)
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

