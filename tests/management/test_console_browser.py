"""The web console in headless Chromium (Debian's) against a real `shoal serve`.

Traffic flows the whole time: a producer sends grouped messages, two
client-individual consumers (stomp.py) receive and acknowledge them. The test
reads the group table, checks every owner against what the consumers really
received, clicks Reset on a group, accepts the confirmation, and sees the group
reassigned. It saves a screenshot of the queue page: `make screenshots` writes
it to docs/console.png for the README.
"""

from __future__ import annotations

import threading

import pytest

from support import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

GROUPS = [f"order-{i}" for i in range(6)]


class Traffic(threading.Thread):
    """Sends one grouped message every few milliseconds, round-robin over GROUPS."""

    def __init__(self, producer, queue: str) -> None:
        super().__init__(daemon=True)
        self.producer = producer
        self.queue = queue
        self.stop_event = threading.Event()
        self.sent = 0

    def run(self) -> None:
        while not self.stop_event.is_set():
            group = GROUPS[self.sent % len(GROUPS)]
            self.producer.send(
                self.queue,
                f"payload {self.sent}",
                group=group,
                JMSXGroupSeq=str(self.sent // len(GROUPS) + 1),
            )
            self.sent += 1
            self.stop_event.wait(0.01)

    def stop(self) -> None:
        self.stop_event.set()
        self.join(10)


def test_console_group_table_owners_and_reset(
    shoal_server, stomp_clients, api_for, browser_page, screenshot_path
):
    from playwright.sync_api import expect

    page, page_errors = browser_page
    srv = shoal_server()
    api = api_for(srv.http_url)
    consumers = [
        # Acks lag a little, so every group always has messages in flight.
        stomp_clients.consumer(srv.stomp_port, "orders", "worker-a", ack_delay=0.3),
        stomp_clients.consumer(srv.stomp_port, "orders", "worker-b", ack_delay=0.3),
    ]
    traffic = Traffic(stomp_clients.producer(srv.stomp_port), "orders")
    traffic.start()
    try:
        # Every group has been delivered to exactly one of the two consumers.
        wait_for(lambda: set().union(*(c.groups() for c in consumers)) >= set(GROUPS), 20)
        owner_of: dict[str, str] = {}
        for c in consumers:
            for g in c.groups():
                assert g not in owner_of, f"group {g} went to two consumers"
                owner_of[g] = c.consumer_id
        assert set(owner_of.values()) == {c.consumer_id for c in consumers}  # both got groups
        api("POST", "/api/queues/orders/groups/order-5/park")  # one parked group (colours)

        page.goto(f"{srv.http_url}/#/queue/orders")
        rows = page.locator("#group-table tbody tr[data-group]")
        expect(rows).to_have_count(len(GROUPS), timeout=15_000)
        # a single broker: no Cluster tab, no node column
        expect(page.locator("#nav-cluster")).to_be_hidden()
        expect(page.locator("#group-table th.node")).to_have_count(0)
        for g in GROUPS[:5]:
            row = page.locator(f'#group-table tr[data-group="{g}"]')
            expect(row.locator("td.owner")).to_have_text(owner_of[g])
            expect(row.locator("td.state .badge")).to_have_text("owned")
        parked = page.locator('#group-table tr[data-group="order-5"]')
        expect(parked.locator("td.state .badge")).to_have_text("parked")
        expect(parked).to_have_class("state-parked")
        colours = {
            state: page.locator(f"#group-table .badge.{state}").first.evaluate(
                "el => getComputedStyle(el).backgroundColor"
            )
            for state in ("owned", "parked")
        }
        assert colours["owned"] != colours["parked"]

        # Reset one group from the table, confirming the dialog.
        target = "order-2"
        row = page.locator(f'#group-table tr[data-group="{target}"]')
        expect(row.locator("td.reassigned")).to_have_text("0")
        dialogs: list[str] = []

        def accept(dialog) -> None:
            dialogs.append(dialog.message)
            dialog.accept()

        page.once("dialog", accept)
        row.locator("button.reset").click()
        wait_for(lambda: dialogs, 10)
        assert target in dialogs[0] and "orders" in dialogs[0]
        # The group drains at its owner, then its next message binds it again.
        expect(row.locator("td.reassigned")).to_have_text("1", timeout=20_000)
        expect(row.locator("td.state .badge")).to_have_text("owned")
        new_owner = row.locator("td.owner").inner_text()
        assert new_owner in {c.consumer_id for c in consumers}
        api_group = api.get(f"/api/queues/orders/groups?q={target}")["groups"][0]
        assert api_group["reassigned"] == 1 and api_group["owner"] == new_owner

        # Declining the confirmation changes nothing.
        page.once("dialog", lambda dialog: dialog.dismiss())
        page.locator('#group-table tr[data-group="order-3"] button.reset').click()
        assert api.get("/api/queues/orders/groups?q=order-3")["groups"][0]["state"] == "owned"

        # The overview lists the queue and the connections.
        page.goto(f"{srv.http_url}/#/")
        expect(page.locator('#queues tr[data-queue="orders"]')).to_be_visible(timeout=10_000)
        expect(page.locator("#connections tr[data-connection]")).to_have_count(3)

        # The screenshot for the README: the queue page with traffic flowing.
        page.goto(f"{srv.http_url}/#/queue/orders")
        expect(rows).to_have_count(len(GROUPS), timeout=15_000)
        page.mouse.move(0, 0)
        page.wait_for_timeout(500)  # let one poll land so rates are filled in
        out = screenshot_path("console.png")
        page.screenshot(path=str(out))
        assert out.stat().st_size > 10_000
    finally:
        traffic.stop()
    assert not page_errors, page_errors
