"""The console's layout and its rates in headless Chromium (Debian's) against a
real `shoal serve`: long consumer ids and many consumers stay inside their
panels, and a burst sent before the console was opened shows in the chart."""

from __future__ import annotations

import pytest

from support import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

# How far each panel's content reaches past its box (0: it fits).
OVERFLOW_JS = """() => Object.fromEntries([...document.querySelectorAll('.panel')]
    .filter((el) => el.offsetParent !== null)
    .map((el, i) => [el.id || el.querySelector('h2')?.textContent || String(i),
                     el.scrollWidth - el.clientWidth]))"""

# Whether the chart's line for a series rises above its zero line somewhere.
RISES_JS = """(series) => {
  const line = document.querySelector(`#rates polyline[data-series="${series}"]`);
  if (!line) return false;
  const zero = Math.max(...[...document.querySelectorAll('#rates line.axis')].map((l) => Number(l.getAttribute('y1'))));
  const ys = line.getAttribute('points').split(' ').map((p) => Number(p.split(',')[1]));
  return Math.min(...ys) < zero - 1;
}"""


def test_long_consumer_ids_stay_inside_their_panels(
    shoal_server, stomp_clients, api_for, browser_page
):
    from playwright.sync_api import expect

    page, page_errors = browser_page
    page.set_viewport_size({"width": 900, "height": 800})
    srv = shoal_server()
    consumers = [
        stomp_clients.consumer(
            srv.stomp_port, "orders", f"order-processing-subscription-{i}-eu-west-1-production"
        )
        for i in range(6)
    ]
    prod = stomp_clients.producer(srv.stomp_port)
    for i in range(12):
        prod.send("orders", str(i), group=f"g{i}")
    wait_for(lambda: sum(len(c.messages) for c in consumers) == 12)

    page.goto(f"{srv.http_url}/#/queue/orders")
    rows = page.locator("#consumers tr[data-consumer]")
    expect(rows).to_have_count(len(consumers), timeout=15_000)
    expect(rows.first.locator("td.consumer")).to_contain_text("eu-west-1-production")
    overflow = page.evaluate(OVERFLOW_JS)
    assert overflow["consumers"] == 0 and all(v == 0 for v in overflow.values()), overflow

    page.goto(f"{srv.http_url}/#/connection/{consumers[0].session}")
    expect(page.locator(".panel tr[data-consumer]")).to_have_count(1, timeout=15_000)
    assert all(v == 0 for v in page.evaluate(OVERFLOW_JS).values())

    page.goto(f"{srv.http_url}/#/")
    expect(page.locator("#connections tr[data-connection]")).to_have_count(7, timeout=15_000)
    overflow = page.evaluate(OVERFLOW_JS)
    assert all(v == 0 for v in overflow.values()), overflow
    width = page.evaluate("() => document.documentElement.scrollWidth")
    assert width <= 900  # nothing widens the page
    assert not page_errors, page_errors


def test_a_burst_before_the_console_opened_shows_in_the_chart(
    shoal_server, stomp_clients, browser_page
):

    page, page_errors = browser_page
    srv = shoal_server()
    c = stomp_clients.consumer(srv.stomp_port, "burst", "s1")
    prod = stomp_clients.producer(srv.stomp_port)
    for i in range(30):
        prod.send("burst", str(i))
    wait_for(lambda: len(c.messages) == 30)  # over before anybody looks

    page.goto(f"{srv.http_url}/#/")
    for series in ("enqueue", "deliver"):
        # a line that leaves the chart's zero (its lowest y)
        page.wait_for_function(RISES_JS, arg=series, timeout=15_000)
    assert not page_errors, page_errors
