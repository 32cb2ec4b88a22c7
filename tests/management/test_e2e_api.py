"""The management API against a real `shoal serve` with stomp.py traffic."""

from __future__ import annotations

import pytest

from shoal.server.uring import open_ring
from support import wait_for

pytestmark = pytest.mark.e2e


def test_groups_owners_reset_and_reassignment(shoal_server, stomp_clients, api_for):
    srv = shoal_server()
    api = api_for(srv.http_url)
    a = stomp_clients.consumer(srv.stomp_port, "orders", "sub-a", ack=False)
    b = stomp_clients.consumer(srv.stomp_port, "orders", "sub-b", ack=False)
    prod = stomp_clients.producer(srv.stomp_port)
    for i in range(12):
        prod.send("orders", f"m{i}", group=f"g{i % 4}")
    wait_for(lambda: len(a.messages) + len(b.messages) == 12)
    owner_of = dict.fromkeys(a.groups(), a.consumer_id) | dict.fromkeys(b.groups(), b.consumer_id)
    assert len(owner_of) == 4  # every group with exactly one consumer

    body = api.get("/api/queues/orders/groups?sort=group")
    assert body["total"] == 4
    for g in body["groups"]:
        assert g["owner"] == owner_of[g["group"]]
        assert (g["state"], g["in_flight"], g["backlog"], g["reassigned"]) == ("owned", 3, 0, 0)

    # Reset g0: it drains at its owner (its next message waits), then is
    # assigned afresh by the normal rule once the owner settled its messages.
    old = owner_of["g0"]
    status, reset = api("POST", "/api/queues/orders/groups/reset", {"group": "g0"})
    assert status == 200 and reset["reset"] == 1
    prod.send("orders", "after-reset", group="g0")
    wait_for(lambda: api.get("/api/queues/orders/groups?q=g0")["groups"][0]["backlog"] == 1)
    g0 = api.get("/api/queues/orders/groups?q=g0")["groups"][0]
    assert (g0["state"], g0["owner"], g0["in_flight"]) == ("draining", old, 3)
    assert not any(m.body == "after-reset" for m in a.messages + b.messages)
    (a if a.consumer_id == old else b).ack_all()
    wait_for(lambda: any(m.body == "after-reset" for m in a.messages + b.messages))
    g0 = api.get("/api/queues/orders/groups?q=g0")["groups"][0]
    assert g0["owner"] in (a.consumer_id, b.consumer_id)
    assert g0["state"] == "owned" and g0["reassigned"] == 1


def test_queue_reads_connections_browse_and_close(shoal_server, stomp_clients, api_for):
    srv = shoal_server()
    api = api_for(srv.http_url)
    prod = stomp_clients.producer(srv.stomp_port)
    for i in range(3):
        prod.send("inbox", f"hello {i}", group="g1", persistent="true")
    wait_for(lambda: api.get("/api/queues/inbox")["depth"] == 3)
    browse = api.get("/api/queues/inbox/messages?limit=10")
    assert [m["body"] for m in browse["messages"]] == ["hello 0", "hello 1", "hello 2"]
    assert all(m["group"] == "g1" and m["persistent"] for m in browse["messages"])
    assert api.get("/api/queues/inbox")["depth"] == 3  # browsing consumed nothing

    c = stomp_clients.consumer(srv.stomp_port, "inbox", "s1", ack=False)
    wait_for(lambda: len(c.messages) == 3)
    queue = api.get("/api/queues/inbox")
    assert queue["depth"] == 0 and queue["in_flight"] == 3 and queue["consumers"] == 1
    assert queue["settings"]["group-header"] == "JMSXGroupID"
    conns = {x["id"]: x for x in api.get("/api/connections")["connections"]}
    mine = conns[int(c.session)]
    assert mine["client_address"].startswith("127.0.0.1:")
    assert mine["subscriptions"] == ["s1"] and mine["unsettled"] == 3
    consumers = api.get("/api/consumers?queue=inbox")["consumers"]
    assert [x["id"] for x in consumers] == [c.consumer_id]
    assert consumers[0]["unsettled"] == 3

    status, body = api("DELETE", f"/api/connections/{c.session}")
    assert status == 200 and body == {"closed": int(c.session)}
    wait_for(lambda: not c.conn.is_connected())
    wait_for(lambda: api.get("/api/queues/inbox")["depth"] == 3)  # returned for redelivery
    assert api("GET", f"/api/connections/{c.session}")[0] == 404


def test_create_purge_delete_and_errors(shoal_server, stomp_clients, api_for):
    srv = shoal_server()
    api = api_for(srv.http_url)
    status, q = api("POST", "/api/queues", {"name": "jobs", "settings": {"group-buckets": 8}})
    assert status == 201 and q["settings"]["group-buckets"] == 8
    prod = stomp_clients.producer(srv.stomp_port)
    for i in range(5):
        prod.send("jobs", str(i))
    wait_for(lambda: api.get("/api/queues/jobs")["depth"] == 5)
    assert api("POST", "/api/queues/jobs/purge") == (200, {"queue": "jobs", "purged": 5})
    status, err = api("POST", "/api/queues", {"name": "jobs"})
    assert status == 409 and err["error"] == "conflict"
    status, err = api("POST", "/api/queues", {"name": "x", "settings": {"group-mode": "loose"}})
    assert status == 400 and err["field"] == "settings.group-mode"
    status, headers, raw = api.raw("POST", "/api/queues/jobs/groups/reset", None)
    assert status == 200  # empty body: reset all
    status, err = api("GET", "/api/queues/jobs/groups?limit=lots")
    assert status == 400 and err["field"] == "limit"
    assert api("DELETE", "/api/queues/jobs") == (200, {"deleted": "jobs"})
    status, err = api("GET", "/api/queues/jobs")
    assert status == 404 and "jobs" in err["message"]


def test_metrics_after_traffic(shoal_server, stomp_clients, api_for):
    srv = shoal_server()
    api = api_for(srv.http_url)
    c = stomp_clients.consumer(srv.stomp_port, "metered", "s1")
    prod = stomp_clients.producer(srv.stomp_port)
    for i in range(10):
        prod.send("metered", str(i), group=f"g{i % 2}", persistent="true")
    wait_for(lambda: len(c.messages) == 10)
    wait_for(lambda: api.get("/api/queues/metered")["acked"] == 10)
    status, headers, raw = api.raw("GET", "/metrics")
    assert status == 200 and headers["Content-Type"].startswith("text/plain")
    text = raw.decode()
    lines = set(text.splitlines())
    for name in ("enqueued", "delivered", "acked"):
        assert f'shoal_queue_{name}_total{{queue="metered"}} 10' in lines
    assert 'shoal_queue_depth{queue="metered"} 0' in lines
    assert 'shoal_queue_groups{queue="metered",state="owned"} 2' in lines
    assert "shoal_connections 2" in lines and "shoal_consumers 1" in lines
    count = next(line for line in lines if line.startswith("shoal_journal_fsync_seconds_count"))
    assert int(count.split()[1]) >= 1  # persistent sends were synced
    journal = api.get("/api/broker")["journal"]
    ring = open_ring()
    if ring is not None:  # this machine has io_uring: the broker's syncs use it
        ring.close()
        assert journal["syncs_io_uring"] >= 1
    assert "# TYPE shoal_journal_syncs_io_uring_total counter" in lines
    assert "# TYPE shoal_delivery_latency_seconds histogram" in lines


def test_rates_chart_covers_traffic_nobody_was_watching(shoal_server, stomp_clients, api_for):
    """The broker samples rates itself: a console opened after a burst still
    sees it in the chart (before, only reads sampled, so it showed 0/s)."""
    srv = shoal_server()
    c = stomp_clients.consumer(srv.stomp_port, "burst", "s1")
    prod = stomp_clients.producer(srv.stomp_port)
    for i in range(20):
        prod.send("burst", str(i))
    wait_for(lambda: len(c.messages) == 20)  # no HTTP read until the burst is over
    api = api_for(srv.http_url)

    def traffic_in_chart() -> bool:
        points = api.get("/api/history")["points"]
        return any((p["enqueue"] or 0) > 0 and (p["deliver"] or 0) > 0 for p in points)

    wait_for(traffic_in_chart, timeout=15, interval=0.5)
    assert api.get("/api/history")["interval_s"] == 2.0


USERS = {"ops": ["admin"], "viewer": ["viewer"]}


def secured_config(tmp_path) -> str:
    from shoal.security import add_user

    users = tmp_path / "users.json"
    for name, roles in USERS.items():
        add_user(users, name, "pw", roles)
    return (
        f'[broker]\nusers-file = "{users}"\n'
        '[[permissions]]\nmatch = "#"\nsend = ["admin"]\nconsume = ["admin"]\n'
        'browse = ["admin", "viewer"]\nmanage = ["admin"]\n'
    )


def test_auth_basic_users_and_permissions(shoal_server, api_for, tmp_path):
    srv = shoal_server(config=secured_config(tmp_path))
    anon = api_for(srv.http_url)
    status, headers, raw = anon.raw("GET", "/api/queues")
    assert status == 401 and "Basic" in headers.get("WWW-Authenticate", "")
    assert anon.as_user("ops", "wrong")("GET", "/api/queues")[0] == 401
    viewer = anon.as_user("viewer", "pw")
    ops = anon.as_user("ops", "pw")
    assert ops("POST", "/api/queues", {"name": "secure"})[0] == 201
    assert viewer("GET", "/api/queues/secure")[0] == 200
    status, err = viewer("POST", "/api/queues/secure/purge")
    assert status == 403 and err["permission"] == "manage"
    assert ops("POST", "/api/queues/secure/purge")[0] == 200
    assert viewer("GET", "/metrics")[0] == 200


def test_health_is_open_when_users_are_configured(shoal_server, api_for, tmp_path):
    srv = shoal_server(config=secured_config(tmp_path))
    status, body = api_for(srv.http_url)("GET", "/health")
    assert status == 200 and body["status"] == "ok"


def test_delivery_latency_histogram_counts_deliveries(shoal_server, stomp_clients, api_for):
    srv = shoal_server()
    api = api_for(srv.http_url)
    c = stomp_clients.consumer(srv.stomp_port, "timed", "s1")
    prod = stomp_clients.producer(srv.stomp_port)
    for i in range(7):
        prod.send("timed", str(i))
    wait_for(lambda: len(c.messages) == 7)
    text = api.raw("GET", "/metrics")[2].decode()
    count = next(
        x for x in text.splitlines() if x.startswith("shoal_delivery_latency_seconds_count")
    )
    assert int(count.split()[1]) == 7


def test_broker_info_reports_journal_size(shoal_server, stomp_clients, api_for):
    srv = shoal_server()
    api = api_for(srv.http_url)
    prod = stomp_clients.producer(srv.stomp_port)
    for i in range(5):
        prod.send("kept", "x" * 1000, persistent="true")
    wait_for(lambda: api.get("/api/queues/kept")["depth"] == 5)
    info = api.get("/api/broker")
    assert info["version"] and info["uptime_s"] > 0 and "stomp" in info["listeners"]
    assert info["journal"]["bytes"] >= 5000
    assert any(
        line.startswith("shoal_journal_bytes ")
        for line in api.raw("GET", "/metrics")[2].decode().splitlines()
    )
