"""The cluster link with a shared secret, against real nodes and real ZooKeeper.

Raw sockets on the link port play the strangers: one that does not
authenticate, one with the wrong secret, one naming another cluster, one
that skips the proof; none of what they send reaches a queue.
"""

from __future__ import annotations

import json
import urllib.request

import pytest
from tests.support import RawStomp, wait_for

from shoal.server.cluster.link import CONNECTING, link_proof, new_nonce

pytestmark = [pytest.mark.e2e, pytest.mark.cluster, pytest.mark.slow]

SECRET = "a-cluster-secret-of-32-bytes-xyz"
WITH_SECRET = f'secret = "{SECRET}"\n'


def status(node) -> dict:
    with urllib.request.urlopen(node.http_url + "/api/cluster", timeout=5) as r:
        return json.load(r)


def link_states(node) -> dict[str, str]:
    return {n["node"]: n["state"] for n in status(node)["nodes"]}


def has_consumers(node, other: str, queue: str) -> bool:
    return any(
        n["node"] == other and queue in n["queues_with_consumers"] for n in status(node)["nodes"]
    )


def connect(port: int) -> RawStomp:
    c = RawStomp(port, timeout=20)
    assert c.connect()[0] == "CONNECTED"
    return c


def subscribe(node, queue: str) -> RawStomp:
    c = connect(node.stomp_port)
    c.frame("SUBSCRIBE", {"id": "s", "destination": f"/queue/{queue}", "receipt": "sub"})
    assert c.read_frame()[0] == "RECEIPT"
    return c


def forward_one(producer_node, consumer: RawStomp, body: str) -> None:
    """A grouped SEND on ``producer_node`` reaches ``consumer`` (on another node)."""
    producer = connect(producer_node.stomp_port)
    producer.frame(
        "SEND", {"destination": "/queue/orders", "JMSXGroupID": "g", "receipt": "r"}, body.encode()
    )
    assert producer.read_frame()[:2] == ("RECEIPT", {"receipt-id": "r"})
    frame = consumer.read_frame()
    assert frame[0] == "MESSAGE" and frame[2] == body.encode(), frame
    producer.close()


def intrude(port: int, send_headers: dict[str, str], **connect_headers: str) -> None:
    """CONNECT as a node, SEND a forward; the link answers ERROR and closes."""
    peer = RawStomp(port, timeout=10)
    peer.frame("CONNECT", {"accept-version": "1.2", "host": "n1", **connect_headers})
    frame = peer.read_frame()
    if frame[0] == "CONNECTED":  # a challenge: the proof must come first
        peer.frame("SEND", send_headers, b"stolen")
        frame = peer.read_frame()
    assert frame[0] == "ERROR", frame
    assert peer.closed_by_peer()
    peer.close()


def forwarded_send(destination: str) -> dict[str, str]:
    return {
        "destination": destination,
        "persistent": "true",
        "x-shoal-origin-node": "n9",
        "x-shoal-origin-id": "1",
        "x-shoal-origin-epoch": "1",
        "receipt": "r",
    }


def test_nodes_with_the_secret_link_up_and_strangers_are_refused(cluster):
    n1, n2 = cluster.start(2, cluster=WITH_SECRET)
    orders = subscribe(n2, "orders")
    wait_for(lambda: link_states(n1).get("n2") == "up", timeout=20)
    wait_for(lambda: has_consumers(n1, "n2", "orders"), timeout=20)
    forward_one(n1, orders, "before")  # n1 -> n2 over the authenticated link

    intruder = subscribe(n1, "intruder")  # what a stranger's SEND would reach
    link_port = n1.ports["link"]
    node = {"shoal-node": "n9", "shoal-cluster": "test"}
    nonce = {"shoal-nonce": new_nonce()}
    # no nonce, no proof: the link of a node without the secret
    intrude(link_port, forwarded_send("/queue/intruder"), **node)
    # the challenge answered with the wrong secret
    intrude(
        link_port,
        {"destination": "/cluster/auth", "receipt": "link-auth", "shoal-proof": "0" * 64},
        **node,
        **nonce,
    )
    wrong = link_proof(b"not-the-cluster-secret", CONNECTING, "x" * 64, "test", "n9", "n1")
    intrude(link_port, {"destination": "/cluster/auth", "shoal-proof": wrong}, **node, **nonce)
    # the challenge ignored: a forward instead of the proof
    intrude(link_port, forwarded_send("/queue/intruder"), **node, **nonce)
    # another cluster's name
    intrude(link_port, forwarded_send("/queue/intruder"), **{**node, "shoal-cluster": "other"})

    log = n1.log_text()
    refusals = [line for line in log.splitlines() if "cluster link: refused 127.0.0.1:" in line]
    assert len(refusals) == 5, refusals  # each stranger logged once, with its address
    assert "got cluster 'other'" in refusals[-1]
    assert sum("wrong or missing proof" in line for line in refusals) == 3

    # the cluster keeps working, and the intruders' SENDs reached no queue
    forward_one(n1, orders, "after")
    producer = connect(n1.stomp_port)
    producer.frame("SEND", {"destination": "/queue/intruder", "receipt": "r"}, b"mine")
    assert producer.read_frame()[0] == "RECEIPT"
    assert intruder.read_frame()[2] == b"mine"  # the first and only message there
    assert link_states(n1)["n2"] == "up" and link_states(n2)["n1"] == "up"
    assert "not authenticated" not in log


def test_nodes_with_different_secrets_do_not_link(cluster):
    (n1,) = cluster.start(1, cluster=WITH_SECRET)
    (_, n2) = cluster.start(1, cluster='secret = "another-secret-of-sixteen-bytes"\n')
    wait_for(lambda: "n2" in link_states(n1) and "n1" in link_states(n2), timeout=20)
    # each end refuses the other: the target fails the origin's challenge, so
    # the origin closes before it proves anything (logged once per link)
    wait_for(lambda: "did not prove the cluster secret" in n1.log_text(), timeout=20)
    wait_for(lambda: "did not prove the cluster secret" in n2.log_text(), timeout=20)
    assert link_states(n1)["n2"] != "up" and link_states(n2)["n1"] != "up"
    assert n1.log_text().count("did not prove the cluster secret") == 1


def test_without_a_secret_the_link_warns_at_start_up(cluster):
    (n1,) = cluster.start(1)
    assert "the cluster link on 127.0.0.1:" in n1.log_text()
    assert "is not authenticated" in n1.log_text()


def test_a_peer_that_never_answers_the_challenge_stays_a_stranger(cluster):
    broker = "[broker]\nhandshake-timeout = 1\n[limits]\nmax-unauthenticated-connections = 1\n"
    (n1,) = cluster.start(1, cluster=WITH_SECRET + broker)
    peer = RawStomp(n1.ports["link"], timeout=10)
    peer.frame(
        "CONNECT",
        {
            "accept-version": "1.2",
            "host": "n1",
            "shoal-node": "n9",
            "shoal-cluster": "test",
            "shoal-nonce": new_nonce(),
        },
    )
    assert peer.read_frame()[0] == "CONNECTED"  # the challenge
    other = RawStomp(n1.ports["link"], timeout=10)  # it still holds the one stranger's place
    frame = other.read_frame()
    assert frame[0] == "ERROR" and "max-unauthenticated-connections" in frame[1]["message"]
    other.close()
    frame = peer.read_frame()  # closed at handshake-timeout, never admitted
    assert frame[0] == "ERROR" and "handshake-timeout" in frame[1]["message"]
    assert peer.closed_by_peer()
    peer.close()
