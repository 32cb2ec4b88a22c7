"""Bindings that move (C5, C6, C7), with real nodes and a real ZooKeeper.

Each test shows the group's order kept and nothing lost across the move:
the reaper (group-timeout), rebind-after, `shoal cluster forget` and
consumerless-rebind-after. Timeouts are a few hundred ms; the tests wait for
the behaviour (a release, a node leaving membership), never for a time.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from tests.cluster.test_cluster_e2e import connect, members_with_consumers, send, status
from tests.support import RawStomp, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.cluster, pytest.mark.slow]
# zookeeper: bindings and their moves in ZooKeeper; local: n1 decides, the others ask it
HANDLERS = pytest.mark.parametrize("handler", ["zookeeper", "local"])


def start(cluster, count: int, handler: str, grouping: str = ""):
    nodes = cluster.start(count, grouping=grouping, handler=handler)
    if handler == "local":  # the remote nodes' links to n1 are up: they can ask it
        wait_for(
            lambda: all(
                n["state"] == "up"
                for node in nodes[1:]
                for n in status(node)["nodes"]
                if n["node"] == "n1"
            ),
            timeout=20,
        )
    return nodes


def subscribe(node, sub: str = "s") -> RawStomp:
    c = connect(node.stomp_port)
    c.frame(
        "SUBSCRIBE", {"id": sub, "destination": "/queue/orders", "ack": "auto", "receipt": "sub"}
    )
    assert c.read_frame()[0] == "RECEIPT"
    return c


def bodies(consumer: RawStomp, count: int) -> list[int]:
    out = []
    while len(out) < count:
        cmd, headers, body = consumer.read_frame()
        assert cmd == "MESSAGE", (cmd, headers)
        out.append(int(body))
    return out


def fresh_bodies(consumer: RawStomp, count: int, seen: list[int]) -> list[int]:
    """The next ``count`` messages not consumed before; a repeat of one in
    ``seen`` (it was on a lost node, which never acked its forward) must be
    flagged redelivered."""
    out: list[int] = []
    while len(out) < count:
        cmd, headers, body = consumer.read_frame()
        assert cmd == "MESSAGE", (cmd, headers)
        if int(body) in seen and int(body) not in out:
            assert headers.get("redelivered") == "true", headers
            continue
        out.append(int(body))
    return out


def send_range(producer: RawStomp, group: str, numbers: range) -> None:
    for i in numbers:
        send(producer, group, str(i), f"r{i}", persistent="true")
        assert producer.read_frame()[:2] == ("RECEIPT", {"receipt-id": f"r{i}"})


def released(node) -> int:
    return int(status(node)["bindings_released"])


def member(node, name: str) -> bool:
    return any(n["node"] == name and n["member"] for n in status(node)["nodes"])


def quiet(consumer: RawStomp) -> None:
    """Nothing more arrives (what was asserted is all there is)."""
    consumer.sock.settimeout(1.0)
    with pytest.raises(TimeoutError):
        consumer.read_frame()


@HANDLERS
def test_reaper_releases_an_unused_binding_and_the_next_message_is_decided_afresh(cluster, handler):
    n1, n2 = start(cluster, 2, handler, "group-timeout = 600\nreaper-period = 100\n")
    on_n2 = subscribe(n2)
    wait_for(lambda: members_with_consumers(n1, "orders") == {"n2"}, timeout=20)
    producer = connect(n1.stomp_port)
    send_range(producer, "g", range(5))  # n1 has no consumer: it proposes n2 (C2)
    assert bodies(on_n2, 5) == list(range(5))
    # unused for group-timeout and drained on n2: the reaper releases it
    wait_for(lambda: released(n2) >= 1, timeout=20)
    wait_for(lambda: status(n1)["bindings_cached"] == 0, timeout=10)  # n1's watch fired
    on_n1 = subscribe(n1)
    on_n2.close()
    wait_for(lambda: members_with_consumers(n1, "orders") == {"n1"}, timeout=20)
    send_range(producer, "g", range(5, 10))  # a fresh decision: n1, which has a consumer
    assert bodies(on_n1, 5) == list(range(5, 10))
    quiet(on_n1)
    wait_for(lambda: released(n1) >= 1, timeout=20)  # the new holder reaps it in turn


def test_a_binding_in_use_is_not_reaped(cluster):
    n1, n2 = cluster.start(2, grouping="group-timeout = 1500\nreaper-period = 100\n")
    on_n2 = subscribe(n2)
    on_n1 = subscribe(n1)  # a fresh decision from n1 would pick n1 itself
    wait_for(lambda: members_with_consumers(n1, "orders") == {"n1", "n2"}, timeout=20)
    local = connect(n2.stomp_port)
    send(local, "g", "0", "r0", persistent="true")  # n2 proposes itself: bound to n2
    assert local.read_frame()[0] == "RECEIPT"
    got = bodies(on_n2, 1)
    producer = connect(n1.stomp_port)
    # used from n1 (its lease refreshed on the way) for longer than group-timeout
    for i in range(1, 31):
        send_range(producer, "g", range(i, i + 1))
        got += bodies(on_n2, 1)
        time.sleep(0.1)
    assert got == list(range(31))  # all on n2, in order: never moved while used
    assert released(n2) == 0
    quiet(on_n1)


def backlog_to(node, target: str) -> int:
    return int(next(n for n in status(node)["nodes"] if n["node"] == target)["forward_backlog"])


def lose_holder_then_release(cluster, forget) -> None:
    """n1 produces, n2 holds the group and dies, n3's consumer comes later.
    ``forget(n1)`` releases n2's bindings (by hand or by rebind-after)."""
    n1, n2, n3 = cluster.nodes
    on_n2 = subscribe(n2)
    wait_for(lambda: members_with_consumers(n1, "orders") == {"n2"}, timeout=20)
    producer = connect(n1.stomp_port)
    send_range(producer, "g", range(5))
    assert bodies(on_n2, 5) == list(range(5))
    on_n3 = subscribe(n3)
    # n2 answers the link's RECEIPT only after its fsync: until n1 has it, 0-4
    # are still n1's to resend (at least once), and would reach n3 again
    wait_for(lambda: backlog_to(n1, "n2") == 0, timeout=10)
    n2.kill9()
    # C6 order first: the binding stays, the messages wait in n1's forward queue
    send_range(producer, "g", range(5, 10))
    assert backlog_to(n1, "n2") >= 5
    wait_for(lambda: not member(n1, "n2"), timeout=30)  # its ZooKeeper session ended
    forget(n1)
    # the waiting entries were taken back and decided afresh (n3 has the consumer),
    # first and in order; later messages follow them
    send_range(producer, "g", range(10, 15))
    assert fresh_bodies(on_n3, 10, list(range(5))) == list(range(5, 15))
    quiet(on_n3)
    wait_for(lambda: backlog_to(n1, "n2") == 0, timeout=10)
    assert status(n1)["entries_rerouted"] >= 5  # and any the lost node never acked


@HANDLERS
def test_rebind_after_releases_a_lost_nodes_groups_keeping_their_order(cluster, handler):
    start(cluster, 3, handler, "rebind-after = 300\n")

    def automatic(n1) -> None:
        wait_for(
            lambda: any(f["node"] == "n2" and f["state"] == "done" for f in status(n1)["forgets"]),
            timeout=20,
        )

    lose_holder_then_release(cluster, automatic)


def cli(node, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "shoal.cli", "cluster", *args, "--http", node.http_url],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        check=False,
    )


@HANDLERS
def test_cluster_forget_asks_refuses_live_nodes_and_releases_a_lost_nodes_groups(cluster, handler):
    n1, _n2, n3 = start(cluster, 3, handler)
    wait_for(lambda: member(n1, "n3"), timeout=20)
    refused = cli(n1, "forget", "n3")  # no tty, no --yes
    assert refused.returncode != 0 and "--yes" in refused.stderr
    live = cli(n1, "forget", "n3", "--yes")
    assert live.returncode != 0 and "live member" in live.stderr
    assert cli(n1, "forget", "n1", "--yes").returncode != 0  # itself

    def by_hand(n1) -> None:
        done = cli(n1, "forget", "n2", "--yes")
        assert done.returncode == 0, done.stderr
        assert "node n2 forgotten: 1 bindings released" in done.stdout

    lose_holder_then_release(cluster, by_hand)
    assert n3.proc.poll() is None


@HANDLERS
def test_consumerless_rebind_moves_a_drained_group_to_a_node_with_consumers(cluster, handler):
    n1, n2 = start(cluster, 2, handler, "consumerless-rebind-after = 300\nreaper-period = 100\n")
    on_n2 = subscribe(n2)
    wait_for(lambda: members_with_consumers(n1, "orders") == {"n2"}, timeout=20)
    producer = connect(n1.stomp_port)
    send_range(producer, "g", range(5))
    assert bodies(on_n2, 5) == list(range(5))
    assert released(n2) == 0  # n2 has a consumer: nothing moves
    on_n1 = subscribe(n1)
    wait_for(lambda: members_with_consumers(n2, "orders") == {"n1", "n2"}, timeout=20)
    on_n2.close()  # n2's queue is consumerless now; the group is drained there
    wait_for(lambda: released(n2) >= 1, timeout=20)
    wait_for(lambda: status(n1)["bindings_cached"] == 0, timeout=10)  # n1's watch fired
    send_range(producer, "g", range(5, 10))
    assert bodies(on_n1, 5) == list(range(5, 10))
    quiet(on_n1)
