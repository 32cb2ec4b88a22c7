"""The ``local`` / ``remote`` grouping handlers (C8) with real processes.

n1 runs ``type = "local"`` (it decides and journals the bindings), n2 and
n3 run ``type = "remote"`` (they ask n1 over the cluster link). Membership
stays in a real ZooKeeper.
"""

from __future__ import annotations

import subprocess
import sys
from collections import defaultdict

import pytest
from tests.cluster.test_cluster_e2e import (
    collect,
    connect,
    members_with_consumers,
    read_messages,
    send,
    status,
)
from tests.support import RawStomp, ShoalProcess, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.cluster, pytest.mark.slow]

TIMEOUT_MS = 1500


def start_nodes(cluster) -> list[ShoalProcess]:
    for i, kind in enumerate(("local", "remote", "remote"), start=1):
        node = f"n{i}"
        config = cluster.config(node, TIMEOUT_MS, extra=f'type = "{kind}"\n')
        cluster.nodes.append(ShoalProcess(data=cluster.tmp_path / node, config=config).start())
    nodes = cluster.nodes
    wait_for(lambda: all(status(n)["local_handler"] == "n1" for n in nodes), timeout=20)
    wait_for(lambda: link_state(nodes[1], "n1") == link_state(nodes[2], "n1") == "up", timeout=20)
    return nodes


def link_state(node: ShoalProcess, target: str) -> str:
    return next((n["state"] for n in status(node)["nodes"] if n["node"] == target), "")


def subscribe(node: ShoalProcess, sub: str = "s"):
    c = connect(node.stomp_port)
    c.frame("SUBSCRIBE", {"id": sub, "destination": "/queue/orders", "ack": "auto", "receipt": "r"})
    assert c.read_frame()[0] == "RECEIPT"
    return c


def test_local_handler_binds_each_group_to_one_consumer_cluster_wide_in_order(cluster):
    nodes = start_nodes(cluster)
    consumers = [subscribe(n, f"s{i}") for i, n in enumerate(nodes)]
    wait_for(
        lambda: all(members_with_consumers(n, "orders") == {"n1", "n2", "n3"} for n in nodes),
        timeout=20,
    )
    producers = [connect(n.stomp_port) for n in nodes]
    groups = [f"g{k}" for k in range(6)]
    rounds = 4
    for r in range(rounds):
        for p_index, p in enumerate(producers):
            for g in groups:
                body = f"p{p_index}:{g}:{r}"
                send(p, g, body, f"{p_index}-{g}-{r}", persistent="true" if r % 2 else "false")
    sent = rounds * len(groups) * len(producers)
    for p in producers:
        frames = [p.read_frame() for _ in range(rounds * len(groups))]
        assert {f[0] for f in frames} == {"RECEIPT"}, frames
    owner_of: dict[str, set[int]] = defaultdict(set)
    order: dict[tuple[str, str], list[int]] = defaultdict(list)
    bodies = []
    for i, frames in collect(consumers, sent).items():
        for _cmd, headers, body in frames:
            producer, group, r = body.decode().split(":")
            assert headers["JMSXGroupID"] == group
            owner_of[group].add(i)
            order[(producer, group)].append(int(r))
            bodies.append(body)
    assert len(bodies) == sent == len(set(bodies))
    assert all(len(owners) == 1 for owners in owner_of.values()), dict(owner_of)
    assert all(rs == sorted(rs) for rs in order.values()), dict(order)
    st = [status(n) for n in nodes]
    assert [s["grouping"] for s in st] == ["local", "remote", "remote"]
    assert sum(s["forwarded"] for s in st) > 0  # groups crossed the links
    assert st[1]["decisions"] > 0 and st[2]["decisions"] > 0  # n1 answered over the link


def link_to(node: ShoalProcess) -> RawStomp:
    link = RawStomp(node.ports["link"], timeout=10)
    assert link.connect(**{"shoal-node": "n9", "shoal-cluster": "test"})[0] == "CONNECTED"
    return link


def test_the_link_proposal_and_decision_frames(cluster):
    n1, n2, _n3 = start_nodes(cluster)
    proposal = {
        "destination": "/cluster/propose",
        "x-shoal-queue": "orders",
        "x-shoal-group": "g",
        "x-shoal-proposal": "n9",
    }
    link = link_to(n1)
    link.frame("SEND", proposal)
    link.frame("SEND", {**proposal, "x-shoal-proposal": "n2"})  # too late: n9 has it
    for _ in range(2):
        assert link.read_frame() == (
            "RECEIPT",
            {
                "receipt-id": "binding",
                "x-shoal-queue": "orders",
                "x-shoal-group": "g",
                "x-shoal-bound-to": "n9",
            },
            b"",
        )
    link.frame("SEND", {k: v for k, v in proposal.items() if k != "x-shoal-group"})
    error = link.read_frame()
    assert error[0] == "ERROR" and "x-shoal-group" in error[1]["message"]
    text = subprocess.run(
        [sys.executable, "-m", "shoal.cli", "cluster", "status", "--http", n2.http_url],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    assert "grouping remote (local handler n1)" in text
    refused = subprocess.run(
        [sys.executable, "-m", "shoal.cli", "cluster", "forget", "n9", "--yes"]
        + ["--http", n2.http_url],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    # n2 decides nothing: forget is the local node's
    assert refused.returncode != 0 and "local grouping handler on node n1" in refused.stderr
    wrong = link_to(n2)  # a remote node decides nothing
    wrong.frame("SEND", proposal)
    error = wrong.read_frame()
    assert error[0] == "ERROR" and "not the local grouping handler" in error[1]["message"]


def test_local_node_down_refuses_new_groups_naming_them_bound_ones_flow_bindings_survive(cluster):
    n1, n2, n3 = start_nodes(cluster)
    consumer = subscribe(n2)
    wait_for(lambda: members_with_consumers(n3, "orders") == {"n2"}, timeout=20)
    remote = connect(n3.stomp_port)  # n3 has no consumer: it proposes n2 (C2)
    send(remote, "old", "old-0", "o0", persistent="true")
    assert remote.read_frame()[:2] == ("RECEIPT", {"receipt-id": "o0"})
    mine = connect(n2.stomp_port)
    send(mine, "mine", "mine-0", "m0", persistent="true")
    assert mine.read_frame()[:2] == ("RECEIPT", {"receipt-id": "m0"})
    assert sorted(f[2] for f in read_messages(consumer, 2)) == [b"mine-0", b"old-0"]

    n1.kill9()  # the local handler's node
    doomed = connect(n3.stomp_port)
    send(doomed, "new", "new-0", "r-new")
    for i in range(1, 4):  # bound groups flow: forwarded (n3 -> n2) and local on n2
        send(remote, "old", f"old-{i}", f"o{i}", persistent="true")
        assert remote.read_frame()[:2] == ("RECEIPT", {"receipt-id": f"o{i}"})
        send(mine, "mine", f"mine-{i}", f"m{i}", persistent="true")
        assert mine.read_frame()[:2] == ("RECEIPT", {"receipt-id": f"m{i}"})
    error = doomed.read_frame()
    assert error[0] == "ERROR", error
    assert error[1].get("receipt-id") == "r-new"
    assert "'new'" in error[1]["message"] and f"{TIMEOUT_MS} ms" in error[1]["message"]
    got = [f[2] for f in read_messages(consumer, 6)]
    assert [b for b in got if b.startswith(b"old")] == [b"old-1", b"old-2", b"old-3"]
    assert [b for b in got if b.startswith(b"mine")] == [b"mine-1", b"mine-2", b"mine-3"]
    assert status(n3)["decision_timeouts"] == 1

    # n1 comes back from its journal: its decisions stand. With a consumer of
    # its own it would propose itself for a new group, yet "old" and "mine"
    # still go to n2; a new group now binds to n1.
    n1.start()
    n3.kill9()  # and a remote that forgot its cached bindings asks n1 again
    n3.start()
    wait_for(lambda: link_state(n3, "n1") == "up", timeout=20)
    local_consumer = subscribe(n1, "l")
    wait_for(lambda: members_with_consumers(n1, "orders") == {"n1", "n2"}, timeout=20)
    on_n1 = connect(n1.stomp_port)
    send(on_n1, "old", "old-4", "o4")
    send(on_n1, "fresh", "fresh-0", "f0")
    on_n3 = connect(n3.stomp_port)
    send(on_n3, "mine", "mine-4", "m4")
    assert on_n1.read_frame()[:2] == ("RECEIPT", {"receipt-id": "o4"})
    assert on_n1.read_frame()[:2] == ("RECEIPT", {"receipt-id": "f0"})
    assert on_n3.read_frame()[:2] == ("RECEIPT", {"receipt-id": "m4"})
    assert sorted(f[2] for f in read_messages(consumer, 2)) == [b"mine-4", b"old-4"]
    assert [f[2] for f in read_messages(local_consumer, 1)] == [b"fresh-0"]
    assert status(n1)["decisions"] == 1  # only "fresh" was new after the restart
