"""C9 (ungrouped messages balanced over nodes with consumers) and cluster
rebalance (C7), with real nodes and a real ZooKeeper.

The tests wait for behaviour (membership, a move done), never for a time.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections import defaultdict

import pytest
from tests.cluster.test_cluster_e2e import connect, members_with_consumers, send, status
from tests.support import RawStomp, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.cluster, pytest.mark.slow]


def subscribe(node, queue: str, ack: str = "auto", sub: str = "s") -> RawStomp:
    c = connect(node.stomp_port)
    c.frame(
        "SUBSCRIBE", {"id": sub, "destination": f"/queue/{queue}", "ack": ack, "receipt": "sub"}
    )
    assert c.read_frame()[0] == "RECEIPT"
    return c


def send_plain(producer: RawStomp, queue: str, body: str) -> None:
    producer.frame(
        "SEND",
        {"destination": f"/queue/{queue}", "receipt": body, "persistent": "true"},
        body.encode(),
    )
    assert producer.read_frame()[:2] == ("RECEIPT", {"receipt-id": body})


def drain(consumers: dict[str, RawStomp], total: int) -> dict[str, list[str]]:
    """Read every consumer until ``total`` messages arrived, then 1 s of quiet."""
    got: dict[str, list[str]] = defaultdict(list)
    lock = threading.Lock()

    def reader(name: str, c: RawStomp) -> None:
        c.sock.settimeout(1.0)
        while True:
            try:
                cmd, _h, body = c.read_frame()
            except TimeoutError:
                with lock:
                    if sum(map(len, got.values())) >= total:
                        return
                continue
            assert cmd == "MESSAGE"
            with lock:
                got[name].append(body.decode())

    threads = [threading.Thread(target=reader, args=(n, c)) for n, c in consumers.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return got


def test_ungrouped_messages_reach_consumers_on_other_nodes_once_each(cluster):
    n1, n2, n3 = cluster.start(3)
    consumers = {"n2": subscribe(n2, "work"), "n3": subscribe(n3, "work")}
    wait_for(lambda: members_with_consumers(n1, "work") == {"n2", "n3"}, timeout=20)
    producer = connect(n1.stomp_port)
    sent = [f"m{i}" for i in range(40)]
    for body in sent:
        send_plain(producer, "work", body)  # n1 has no consumer: round robin n2, n3
    got = drain(consumers, len(sent))
    assert sorted(got["n2"] + got["n3"]) == sorted(sent)  # none lost, none doubled
    assert got["n2"] and got["n3"]
    for bodies in got.values():  # one FIFO per target: each node's share in send order
        assert bodies == sorted(bodies, key=lambda b: int(b[1:]))
    assert status(n1)["balanced"] == len(sent)
    table = subprocess.run(
        [sys.executable, "-m", "shoal.cli", "cluster", "status", "--http", n1.http_url],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert "ungrouped messages: ON_DEMAND, 40 sent to other nodes" in table
    # local first: once n1 has a consumer, its messages stay there
    consumers = {"n1": subscribe(n1, "work"), **consumers}
    for body in ("x0", "x1", "x2"):
        send_plain(producer, "work", body)
    got = drain(consumers, 3)
    assert got["n1"] == ["x0", "x1", "x2"] and not got["n2"] and not got["n3"]


def test_off_keeps_ungrouped_messages_where_they_were_sent(cluster):
    n1, n2 = cluster.start(2, cluster='message-load-balancing = "OFF"\n')
    on_n2 = subscribe(n2, "work")
    wait_for(lambda: members_with_consumers(n1, "work") == {"n2"}, timeout=20)
    producer = connect(n1.stomp_port)
    send_plain(producer, "work", "m0")
    assert drain({"n2": on_n2}, 0) == {}
    on_n1 = subscribe(n1, "work")
    assert drain({"n1": on_n1}, 1) == {"n1": ["m0"]}
    assert status(n1)["message_load_balancing"] == "OFF"


def rebalance(node, queue: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "shoal.cli", "cluster", "rebalance", queue, "--json"]
        + ["--http", node.http_url],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    result: dict = json.loads(out.stdout)
    return result


def held_by(node, holder: str) -> int:
    return int(next(n for n in status(node)["nodes"] if n["node"] == holder)["bindings_held"])


@pytest.mark.parametrize("producer_node", ["holder", "third"])
def test_rebalance_moves_drained_groups_and_busy_ones_once_drained_keeping_order(
    cluster, producer_node
):
    """The producer on the holder (n1), or on a third node without consumers
    whose cached bindings must follow the moves (its watches)."""
    if producer_node == "holder":
        n1, n2 = cluster.start(2)
        origin = n1
    else:
        n1, n2, origin = cluster.start(3)
    # every group bound to n1: the only node with a consumer when they start
    on_n1 = connect(n1.stomp_port)
    on_n1.frame(
        "SUBSCRIBE",
        {
            "id": "s",
            "destination": "/queue/orders",
            "ack": "client-individual",
            "receipt": "sub",
        },
    )
    assert on_n1.read_frame()[0] == "RECEIPT"
    wait_for(lambda: members_with_consumers(origin, "orders") == {"n1"}, timeout=20)
    producer = connect(origin.stomp_port)
    groups = [f"g{k}" for k in range(6)]
    sent: dict[str, list[int]] = {g: [] for g in groups}

    def produce(numbers: range) -> None:
        for i in numbers:
            for g in groups:
                send(producer, g, str(i), f"{g}-{i}", persistent="true")
                assert producer.read_frame()[0] == "RECEIPT"
                sent[g].append(i)

    produce(range(3))
    got: dict[str, dict[str, list[int]]] = {"n1": defaultdict(list), "n2": defaultdict(list)}
    unacked = None
    for _ in range(18):  # ack all but g5's last: g5 is not drained
        _cmd, h, body = on_n1.read_frame()
        got["n1"][h["JMSXGroupID"]].append(int(body))
        if h["JMSXGroupID"] == "g5" and int(body) == 2:
            unacked = h["ack"]
        else:
            on_n1.frame("ACK", {"id": h["ack"]})
    assert unacked is not None
    on_n2 = subscribe(n2, "orders")
    wait_for(lambda: members_with_consumers(n1, "orders") == {"n1", "n2"}, timeout=20)
    plan = rebalance(n1, "orders")
    assert plan["state"] == "done" and plan["groups"] == 6
    assert plan["moves"] == {"g5": "n2", "g4": "n2", "g3": "n2"}
    wait_for(lambda: status(n1)["groups_moved"] == 2, timeout=20)  # g3, g4 now
    # the producer's node has dropped its cached g3, g4 -> n1 (its watches
    # fired): what it sent before may still reach n1 (docs/cluster.md, limits)
    wait_for(lambda: held_by(origin, "n1") == 4, timeout=20)
    assert status(n1)["moves_waiting"] == 1  # g5 waits for its unacked message
    produce(range(3, 6))

    def read(consumer: RawStomp, name: str, count: int) -> None:
        for _ in range(count):
            _cmd, h, body = consumer.read_frame()
            got[name][h["JMSXGroupID"]].append(int(body))
            if name == "n1":
                consumer.frame("ACK", {"id": h["ack"]})

    read(on_n1, "n1", 9 + 3)  # g0-g2 stay; g5 stays while it has a message in flight
    read(on_n2, "n2", 6)  # g3, g4 moved
    on_n1.frame("ACK", {"id": unacked})  # g5 drains on n1: now it moves
    wait_for(lambda: status(n1)["groups_moved"] == 3, timeout=20)
    wait_for(lambda: held_by(origin, "n1") == 3, timeout=20)
    produce(range(6, 8))
    read(on_n1, "n1", 6)
    read(on_n2, "n2", 6)
    for g in groups:  # each group's messages in order, each once, across both nodes
        assert got["n1"][g] + got["n2"][g] == sent[g]
    assert sorted(g for g in groups if got["n2"][g]) == ["g3", "g4", "g5"]
    assert got["n2"]["g5"] == [6, 7]  # only after its last message on n1 was settled
    # the API refuses a queue with consumers nowhere
    cmd = subprocess.run(
        [sys.executable, "-m", "shoal.cli", "cluster", "rebalance", "nothing"]
        + ["--http", n1.http_url],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert cmd.returncode != 0 and "no node has consumers on queue 'nothing'" in cmd.stderr
