"""The console of a cluster node in headless Chromium (Debian's): three real
nodes, a real ZooKeeper.

A producer on n1 sends six groups; consumers on n2 and n3 hold them
(unacked, so the groups stay owned). n1's Cluster view must list the three
nodes with their link addresses and states, the queues with consumers and
the bindings each node holds, as the consumers really received them; n1's
overview lists its forward queues apart from the user's queues, and its
queue page names the node of every group; n2's group table must name n2 as
the node of each group it holds. Saves a screenshot of the Cluster view:
`make screenshots` writes it to
docs/console-cluster.png for docs/cluster.md.
"""

from __future__ import annotations

from collections import defaultdict

import pytest
from tests.cluster.test_cluster_e2e import connect, members_with_consumers, send
from tests.support import RawStomp, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.cluster, pytest.mark.browser]

GROUPS = [f"order-{i}" for i in range(6)]


def test_console_shows_the_nodes_and_the_node_holding_each_group(
    cluster, browser_page, screenshot_path
):
    from playwright.sync_api import expect

    page, page_errors = browser_page
    n1, n2, n3 = cluster.start(3, persistent_data=False)
    consumers: dict[str, RawStomp] = {}
    for name, node in (("n2", n2), ("n3", n3)):
        c = connect(node.stomp_port)
        c.frame(
            "SUBSCRIBE",
            {"id": "s", "destination": "/queue/orders", "ack": "client-individual", "receipt": "r"},
        )
        assert c.read_frame()[0] == "RECEIPT"
        consumers[name] = c
    wait_for(lambda: members_with_consumers(n1, "orders") == {"n2", "n3"}, timeout=20)
    producer = connect(n1.stomp_port)
    for i, group in enumerate(GROUPS):
        send(producer, group, f"m{i}", f"r{i}")
        assert producer.read_frame()[0] == "RECEIPT"
    holder: dict[str, str] = {}  # group -> the node whose consumer got it

    def receive() -> bool:
        for name, c in consumers.items():
            c.sock.settimeout(0.2)
            try:
                frame = c.read_frame()
            except TimeoutError:
                continue
            assert frame[0] == "MESSAGE", frame
            holder[frame[1]["JMSXGroupID"]] = name
        return len(holder) == len(GROUPS)

    wait_for(receive, timeout=20)
    assert set(holder) == set(GROUPS)
    held: dict[str, list[str]] = defaultdict(list)
    for group, name in holder.items():
        held[name].append(group)
    assert held["n2"] and held["n3"]  # proposals go round robin over n2 and n3

    page.goto(f"{n1.http_url}/#/cluster")
    expect(page.locator("#nav-cluster")).to_be_visible(timeout=10_000)
    rows = page.locator("#cluster-nodes tr[data-node]")
    expect(rows).to_have_count(3, timeout=15_000)
    me = page.locator('#cluster-nodes tr[data-node="n1"]')
    expect(me.locator("td.state")).to_have_text("this node")
    expect(me.locator("td.link")).to_have_text(f"127.0.0.1:{n1.ports['link']}")
    for name, node in (("n2", n2), ("n3", n3)):
        row = page.locator(f'#cluster-nodes tr[data-node="{name}"]')
        expect(row.locator("td.state")).to_have_text("up")
        expect(row.locator("td.link")).to_have_text(f"127.0.0.1:{node.ports['link']}")
        expect(row.locator("td.queues")).to_have_text("orders")
        expect(row.locator("td.bindings")).to_have_text(str(len(held[name])))
        # every forwarded message got its RECEIPT: nothing waits for the link
        expect(row.locator("td.backlog")).to_have_text("0", timeout=10_000)
        expect(row.locator("td.forwarded")).to_have_text(str(len(held[name])))
        expect(row.locator("td.node a")).to_have_attribute(
            "href", f"http://127.0.0.1:{node.http_port}/#/cluster"
        )
    expect(page.locator("#cluster-cards")).to_contain_text("connected")

    page.mouse.move(0, 0)
    out = screenshot_path("console-cluster.png")
    page.screenshot(path=str(out))
    assert out.stat().st_size > 10_000

    # Follow n2's link to its console: its group table names n2 for its groups.
    page.locator('#cluster-nodes tr[data-node="n2"] td.node a').click()
    expect(page.locator("h1 small")).to_contain_text("node n2", timeout=10_000)
    page.goto(f"{n2.http_url}/#/queue/orders")
    group_rows = page.locator("#group-table tbody tr[data-group]")
    expect(group_rows).to_have_count(len(held["n2"]), timeout=15_000)
    expect(page.locator("#group-table th.node")).to_have_text("node")
    for group in held["n2"]:
        row = page.locator(f'#group-table tr[data-group="{group}"]')
        expect(row.locator("td.node")).to_have_text("n2")
        expect(row.locator("td.state .badge")).to_have_text("owned")
    # n1's forward queues are listed apart from the user's queues.
    page.goto(f"{n1.http_url}/#/")
    expect(page.locator('#queues tr[data-queue="orders"]')).to_be_visible(timeout=10_000)
    expect(page.locator("#queues tr[data-queue^='$cluster']")).to_have_count(0)
    expect(page.locator("#forwarding tr[data-queue]")).to_have_count(2)
    for name in ("n2", "n3"):
        row = page.locator(f'#forwarding tr[data-queue="$cluster.forward.{name}"]')
        expect(row.locator("td.to")).to_have_text(name)
    # n1, the producer's node, holds no group but knows where each one lives.
    page.goto(f"{n1.http_url}/#/queue/orders")
    bound = page.locator("#group-bindings tr[data-binding]")
    expect(bound).to_have_count(len(GROUPS), timeout=15_000)
    for group, name in holder.items():
        expect(page.locator(f'#group-bindings tr[data-binding="{group}"] td.node')).to_have_text(
            name
        )
    expect(page.locator("#group-table")).to_contain_text("no groups held on this node")
    for c in (*consumers.values(), producer):
        c.close()
    assert not page_errors, page_errors
