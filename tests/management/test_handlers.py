"""The management API's handlers over a real broker core, without sockets."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from shoal.broker.core import Broker
from shoal.broker.settings import AddressSettings
from shoal.management.http import Context, Request
from shoal.management.routes import build_router
from shoal.security import hash_password, parse_security
from shoal.server.management_port import ServerPort
from support import PortServer

T0 = 1_700_000_000.0


class FakeSession:
    def __init__(self, peer: str, user: str | None = None) -> None:
        self.peer = peer
        self.user = user
        self.connected_at = T0
        self.frames_in = 3
        self.messages_out = 0


class Harness:
    """A core behind the server's port, a router and a clock; call() answers
    (status, parsed JSON)."""

    def __init__(self, security: Any = None) -> None:
        self.broker = Broker(AddressSettings(), T0)
        self.router = build_router()
        self.server = PortServer(self.broker, {"version": "test", "uptime_s": 1.0})
        self.port = ServerPort(self.server)
        self.security = security
        self.now = T0

    def call(
        self,
        method: str,
        path: str,
        query: dict[str, str] | None = None,
        body: Any = None,
        *,
        user: str | None = None,
        raw: bytes | None = None,
        advance: float = 0.0,
    ) -> tuple[int, Any]:
        self.now += advance
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else b"")
        resp = self.router.handle(
            Context(self.port, self.now, self.security),
            Request(method, path, query or {}, {}, data, user),
        )
        if resp.content_type.startswith("application/json"):
            return resp.status, json.loads(resp.body)
        return resp.status, resp.body.decode()

    def connect(self, conn_id: int, peer: str = "127.0.0.1:5000", user: str | None = None) -> None:
        self.broker.connect(conn_id, self.now, user=user)
        self.server.sessions[conn_id] = FakeSession(peer, user)

    def send(self, queue: str, group: str | None, body: bytes = b"x", conn_id: int = 99) -> None:
        if conn_id not in self.server.sessions:
            self.connect(conn_id)
        headers = {"JMSXGroupID": group} if group is not None else {}
        self.broker.send(conn_id, f"/queue/{queue}", headers, body, self.now)

    def deliveries(self) -> list[Any]:
        return [e for e in self.broker.take_effects() if type(e).__name__ == "Deliver"]


@pytest.fixture
def h() -> Harness:
    return Harness()


def two_consumers_with_groups(h: Harness) -> dict[str, str]:
    """Consumers 1/a and 2/b on queue 'orders'; groups g0..g3 spread over them."""
    h.connect(1)
    h.connect(2, "127.0.0.1:6000")
    h.broker.subscribe(1, "a", "/queue/orders", "client-individual", {}, h.now)
    h.broker.subscribe(2, "b", "/queue/orders", "client-individual", {}, h.now)
    for i in range(8):
        h.send("orders", f"g{i % 4}")
    owners: dict[str, str] = {}
    for d in h.deliveries():
        owners[d.message.group] = f"{d.conn_id}/{d.sub_id}"
    return owners


def test_health_is_open_and_unknown_paths_are_404_json(h):
    status, body = h.call("GET", "/health")
    assert status == 200 and body["status"] == "ok"
    status, body = h.call("GET", "/nope")
    assert status == 404 and body["error"] == "not-found"


def test_wrong_method_is_405_with_allow_header(h):
    from shoal.management.http import Request as Req

    resp = h.router.handle(Context(h.port, h.now), Req("PUT", "/api/queues", {}, {}))
    assert resp.status == 405
    allow = dict(resp.headers)["Allow"]
    assert "GET" in allow and "POST" in allow


def test_groups_show_owner_backlog_in_flight_state_and_reassigned(h):
    owners = two_consumers_with_groups(h)
    h.send("orders", "g0")  # still bound: goes to its owner
    status, body = h.call("GET", "/api/queues/orders/groups", advance=1.5)
    assert status == 200 and body["total"] == 4
    by_group = {g["group"]: g for g in body["groups"]}
    assert set(by_group) == {"g0", "g1", "g2", "g3"}
    for name, g in by_group.items():
        assert set(g) >= {
            "group",
            "owner",
            "backlog",
            "in_flight",
            "oldest_age_ms",
            "state",
            "reassigned",
        }
        assert g["owner"] == owners[name]
        assert g["state"] == "owned"
        assert g["reassigned"] == 0
        assert g["oldest_age_ms"] >= 1500
    assert by_group["g0"]["in_flight"] + by_group["g0"]["backlog"] == 3
    assert body["states"] == {"ready": 0, "owned": 4, "draining": 0, "parked": 0}


def test_groups_filter_sort_and_page(h):
    owners = two_consumers_with_groups(h)
    _, body = h.call("GET", "/api/queues/orders/groups", {"owner": "1/a"})
    assert {g["group"] for g in body["groups"]} == {g for g, o in owners.items() if o == "1/a"}
    _, by_conn = h.call("GET", "/api/queues/orders/groups", {"owner": "2"})
    assert {g["group"] for g in by_conn["groups"]} == {g for g, o in owners.items() if o == "2/b"}
    _, body = h.call("GET", "/api/queues/orders/groups", {"state": "parked"})
    assert body == {**body, "groups": [], "total": 0}
    _, body = h.call("GET", "/api/queues/orders/groups", {"sort": "group", "order": "desc"})
    assert [g["group"] for g in body["groups"]] == ["g3", "g2", "g1", "g0"]
    _, page = h.call(
        "GET", "/api/queues/orders/groups", {"sort": "group", "limit": "2", "offset": "1"}
    )
    assert [g["group"] for g in page["groups"]] == ["g1", "g2"] and page["total"] == 4
    _, found = h.call("GET", "/api/queues/orders/groups", {"q": "3"})
    assert [g["group"] for g in found["groups"]] == ["g3"]


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"state": "sleeping"}, "state"),
        ({"state": ""}, "state"),
        ({"state": "owned,"}, "state"),
        ({"order": ""}, "order"),
        ({"limit": ""}, "limit"),
        ({"sort": "colour"}, "sort"),
        ({"order": "up"}, "order"),
        ({"limit": "ten"}, "limit"),
        ({"limit": "-1"}, "limit"),
        ({"limit": "5_0"}, "limit"),
        ({"offset": "1.5"}, "offset"),
    ],
)
def test_bad_group_query_is_400_naming_the_parameter(h, query, field):
    two_consumers_with_groups(h)
    status, body = h.call("GET", "/api/queues/orders/groups", query)
    assert status == 400 and body["field"] == field and field in body["message"]


def test_unknown_queue_is_404_everywhere(h):
    for method, path in [
        ("GET", "/api/queues/ghost"),
        ("GET", "/api/queues/ghost/groups"),
        ("GET", "/api/queues/ghost/messages"),
        ("DELETE", "/api/queues/ghost"),
        ("POST", "/api/queues/ghost/purge"),
        ("POST", "/api/queues/ghost/groups/reset"),
        ("POST", "/api/queues/ghost/groups/g/park"),
        ("POST", "/api/queues/ghost/groups/g/resume"),
    ]:
        status, body = h.call(method, path)
        assert status == 404, (method, path, body)
        assert body["error"] == "not-found" and "ghost" in body["message"]


def test_reset_one_group_moves_it_after_draining(h):
    owners = two_consumers_with_groups(h)
    status, body = h.call("POST", "/api/queues/orders/groups/reset", body={"group": "g1"})
    assert status == 200 and body == {"queue": "orders", "group": "g1", "reset": 1}
    _, groups = h.call("GET", "/api/queues/orders/groups", {"state": "draining"})
    assert [g["group"] for g in groups["groups"]] == ["g1"]
    assert groups["groups"][0]["owner"] == owners["g1"]


def test_reset_all_and_unknown_group(h):
    two_consumers_with_groups(h)
    status, body = h.call("POST", "/api/queues/orders/groups/reset", body={})
    assert status == 200 and body["group"] is None and body["reset"] == 4
    # An untracked group is idle, unbound and not parked: resetting it does nothing.
    status, body = h.call("POST", "/api/queues/orders/groups/reset", body={"group": "nope"})
    assert status == 200 and body == {"queue": "orders", "group": "nope", "reset": 0}


def test_reset_idle_group_stays_listed_with_its_history(h):
    h.connect(1)
    h.broker.subscribe(1, "a", "/queue/orders", "client-individual", {}, h.now)
    h.send("orders", "g1")
    for d in h.deliveries():
        h.broker.ack(d.conn_id, d.ack_id, h.now)
    status, body = h.call("POST", "/api/queues/orders/groups/reset", body={"group": "g1"})
    assert status == 200 and body["reset"] == 1
    _, groups = h.call("GET", "/api/queues/orders/groups", {"q": "g1"})
    assert [(g["group"], g["owner"], g["state"]) for g in groups["groups"]] == [
        ("g1", None, "ready")
    ]


def test_park_resume_reset_on_a_bucketed_queue_take_id_or_bucket(h):
    h.connect(1)
    h.broker.subscribe(1, "a", "/queue/b?group-buckets=4", "client-individual", {}, h.now)
    h.send("b", "order-7")
    _, listed = h.call("GET", "/api/queues/b/groups")
    (bucket,) = [g["group"] for g in listed["groups"]]
    assert bucket.startswith("#")
    status, body = h.call("POST", "/api/queues/b/groups/order-7/park")
    assert status == 200 and body == {
        "queue": "b",
        "group": "order-7",
        "state": "parked",
        "bucket": bucket,
    }
    status, body = h.call("POST", f"/api/queues/b/groups/%23{bucket[1:]}/resume")
    assert status == 200 and body["state"] == "owned" and "bucket" not in body
    status, body = h.call("POST", "/api/queues/b/groups/reset", body={"group": "order-7"})
    assert status == 200 and body["reset"] == 1


def test_park_of_an_untracked_group_creates_it_parked(h):
    h.connect(1)
    h.broker.subscribe(1, "a", "/queue/q", "client-individual", {}, h.now)
    status, body = h.call("POST", "/api/queues/q/groups/later/park")
    assert status == 200 and body["state"] == "parked"
    h.send("q", "later")
    assert h.deliveries() == []  # waits until resumed
    status, body = h.call("POST", "/api/queues/q/groups/never/resume")
    assert status == 409


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        (b"{not json", "body"),
        (b"[1, 2]", "body"),
        (b'{"group": 7}', "group"),
        (b'{"groups": "g1"}', "groups"),
    ],
)
def test_bad_reset_body_is_400_naming_the_field(h, raw, field):
    two_consumers_with_groups(h)
    status, body = h.call("POST", "/api/queues/orders/groups/reset", raw=raw)
    assert status == 400 and body["field"] == field


def test_park_and_resume_a_group(h):
    two_consumers_with_groups(h)
    status, body = h.call("POST", "/api/queues/orders/groups/g2/park")
    assert status == 200 and body["state"] == "parked"
    _, groups = h.call("GET", "/api/queues/orders/groups", {"state": "parked"})
    assert [g["group"] for g in groups["groups"]] == ["g2"]
    status, body = h.call("POST", "/api/queues/orders/groups/g2/resume")
    assert status == 200 and body["state"] != "parked"
    status, body = h.call("POST", "/api/queues/orders/groups/g2/resume")
    assert status == 409 and body["error"] == "conflict"


def test_group_names_with_slashes_are_path_encoded(h):
    h.connect(1)
    h.broker.subscribe(1, "a", "/queue/q", "client-individual", {}, h.now)
    h.send("q", "tenant/7")
    status, body = h.call("POST", "/api/queues/q/groups/tenant%2F7/park")
    assert status == 200 and body["group"] == "tenant/7" and body["state"] == "parked"


def test_create_queue_with_settings_then_conflict_then_delete(h):
    status, q = h.call(
        "POST",
        "/api/queues",
        body={
            "name": "billing.eu",
            "settings": {"group-buckets": 16, "group-rebalance": True, "poison-policy": "park"},
        },
    )
    assert status == 201 and q["name"] == "billing.eu"
    assert q["settings"]["group-buckets"] == 16 and q["settings"]["poison-policy"] == "park"
    assert q["settings"]["group-mode"] == "sticky"  # the default still in force
    status, body = h.call("POST", "/api/queues", body={"name": "billing.eu"})
    assert status == 409 and body["error"] == "conflict"
    status, q = h.call("GET", "/api/queues/billing.eu")
    assert status == 200 and q["depth"] == 0
    assert h.call("DELETE", "/api/queues/billing.eu") == (200, {"deleted": "billing.eu"})
    assert h.call("GET", "/api/queues/billing.eu")[0] == 404


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "name"),
        ({"name": 5}, "name"),
        ({"name": "has space"}, "name"),
        ({"name": "/queue/x"}, "name"),
        ({"name": "x\n"}, "name"),
        ({"name": "x", "settings": []}, "settings"),
        ({"name": "x", "settings": {"colour": "red"}}, "settings.colour"),
        ({"name": "x", "settings": {"group-buckets": "4"}}, "settings.group-buckets"),
        ({"name": "x", "settings": {"group-buckets": -2}}, "settings.group-buckets"),
        ({"name": "x", "settings": {"exclusive": "true"}}, "settings.exclusive"),
        ({"name": "x", "settings": {"exclusive": 1}}, "settings.exclusive"),
        ({"name": "x", "settings": {"group-mode": "loose"}}, "settings.group-mode"),
        ({"name": "x", "settings": {"max-delivery-attempts": 0}}, "settings.max-delivery-attempts"),
        ({"name": "x", "extra": 1}, "extra"),
    ],
)
def test_bad_create_is_400_naming_the_field(h, body, field):
    status, resp = h.call("POST", "/api/queues", body=body)
    assert status == 400, resp
    assert resp["error"] == "bad-parameter" and resp["field"] == field
    assert h.call("GET", "/api/queues/x")[0] == 404


def test_purge_drops_waiting_messages(h):
    for i in range(5):
        h.send("work", f"g{i}")
    _, q = h.call("GET", "/api/queues/work")
    assert q["depth"] == 5
    assert h.call("POST", "/api/queues/work/purge") == (200, {"queue": "work", "purged": 5})
    assert h.call("GET", "/api/queues/work")[1]["depth"] == 0


def test_browse_does_not_consume_and_encodes_binary_bodies(h):
    h.send("inbox", "g1", "héllo".encode())
    h.send("inbox", None, b"\xff\x00\xfe")
    status, body = h.call("GET", "/api/queues/inbox/messages", {"limit": "10"})
    assert status == 200 and body["count"] == 2
    text, binary = body["messages"]
    assert text["body"] == "héllo" and text["body_encoding"] == "text" and text["group"] == "g1"
    assert text["headers"]["JMSXGroupID"] == "g1"
    assert text["redelivered"] is False and text["delivery_count"] == 0
    assert base64.b64decode(binary["body"]) == b"\xff\x00\xfe"
    assert binary["body_encoding"] == "base64" and binary["group"] is None
    assert h.call("GET", "/api/queues/inbox")[1]["depth"] == 2  # nothing consumed
    _, one = h.call("GET", "/api/queues/inbox/messages", {"limit": "1"})
    assert [m["id"] for m in one["messages"]] == [text["id"]]
    assert h.call("GET", "/api/queues/inbox/messages", {"limit": "100000"})[0] == 400


def test_queue_list_has_counters_and_rates_from_sampling(h):
    h.connect(1)
    h.broker.subscribe(1, "a", "/queue/flow", "auto", {}, h.now)
    _, first = h.call("GET", "/api/queues")
    flow = next(q for q in first["queues"] if q["name"] == "flow")
    assert flow["rates"] == {"enqueue": None, "deliver": None, "ack": None}  # one sample only
    for _ in range(20):
        h.send("flow", None)
    _, second = h.call("GET", "/api/queues", advance=2.0)
    flow = next(q for q in second["queues"] if q["name"] == "flow")
    assert flow["enqueued"] == 20 and flow["delivered"] == 20
    assert flow["rates"]["enqueue"] == pytest.approx(10.0)
    assert flow["rates"]["deliver"] == pytest.approx(10.0)
    _, broker = h.call("GET", "/api/broker")
    assert broker["rates"]["enqueue"] == pytest.approx(10.0)
    _, hist = h.call("GET", "/api/history", advance=2.0)
    assert hist["points"] and "flow" in hist["queues"]


def test_connections_and_consumers_show_address_user_credit_unsettled(h):
    two_consumers_with_groups(h)
    status, body = h.call("GET", "/api/connections")
    assert status == 200
    conns = {c["id"]: c for c in body["connections"]}
    assert conns[2]["client_address"] == "127.0.0.1:6000"
    assert conns[1]["subscriptions"] == ["a"]
    assert conns[1]["unsettled"] + conns[2]["unsettled"] == 8
    assert conns[1]["credit"] == 1000 - conns[1]["unsettled"]
    _, consumers = h.call("GET", "/api/consumers", {"queue": "orders"})
    assert {c["id"] for c in consumers["consumers"]} == {"1/a", "2/b"}
    _, detail = h.call("GET", "/api/connections/2")
    assert [c["id"] for c in detail["consumers"]] == ["2/b"]
    _, queue = h.call("GET", "/api/queues/orders")
    assert {c["id"] for c in queue["consumer_list"]} == {"1/a", "2/b"}
    assert queue["group_states"]["owned"] == 4


def test_close_connection_asks_the_server_to_close_it(h):
    two_consumers_with_groups(h)
    assert h.call("DELETE", "/api/connections/2") == (200, {"closed": 2})
    assert h.server.closed == {2: "connection closed by an operator"}
    assert 2 in h.server.sessions  # the server's flush shuts the session down, not the handler
    assert h.call("DELETE", "/api/connections/77")[0] == 404
    status, body = h.call("DELETE", "/api/connections/two")
    assert status == 400 and body["field"] == "id"


def test_close_connection_without_a_socket_drops_it_from_the_core(h):
    h.broker.connect(50, h.now)  # like the sink's connection: the core's only
    assert h.call("DELETE", "/api/connections/50") == (200, {"closed": 50})
    assert h.server.closed == {}
    assert h.call("GET", "/api/connections/50")[0] == 404


def test_metrics_exposition(h):
    two_consumers_with_groups(h)
    h.call("POST", "/api/queues/orders/groups/g3/park")
    status, text = h.call("GET", "/metrics")
    assert status == 200
    lines = text.splitlines()
    assert 'shoal_queue_enqueued_total{queue="orders"} 8' in lines
    assert 'shoal_queue_in_flight{queue="orders"} 8' in lines
    assert 'shoal_queue_consumers{queue="orders"} 2' in lines
    assert 'shoal_queue_groups{queue="orders",state="parked"} 1' in lines
    assert 'shoal_queue_groups{queue="orders",state="owned"} 3' in lines
    assert "shoal_connections 3" in lines and "shoal_consumers 2" in lines
    assert "# TYPE shoal_journal_fsync_seconds histogram" in lines
    assert 'shoal_delivery_latency_seconds_bucket{le="+Inf"} 0' in lines
    for name in ("acked", "redelivered", "dead_lettered", "expired", "delivered"):
        assert f"# TYPE shoal_queue_{name}_total counter" in lines


def test_openapi_document_lists_every_api_route(h):
    status, doc = h.call("GET", "/openapi.json")
    assert status == 200 and doc["openapi"].startswith("3.1")
    spark_only = ("/api/sinks", "/api/logs/{queue}/")  # Arrow bodies: docs/spark.md
    for method, pattern in h.router.routes():
        if pattern.startswith(spark_only):
            continue
        if pattern.startswith("/api/") or pattern in ("/health", "/metrics"):
            assert method.lower() in doc["paths"][pattern], (method, pattern)
    assert "security" not in doc  # no users configured


def test_console_is_served_from_the_package(h):
    status, html = h.call("GET", "/")
    assert status == 200 and "/static/console.js" in html
    assert h.call("GET", "/static/console.js")[0] == 200
    assert h.call("GET", "/static/console.css")[0] == 200
    assert h.call("GET", "/static/..%2Fhttp.py")[0] == 404
    assert h.call("GET", "/static/nothing.js")[0] == 404


# --- authorization -----------------------------------------------------------------


@pytest.fixture
def secured() -> Harness:
    users = {
        "ops": {"password-hash": hash_password("x"), "roles": ["admin"]},
        "viewer": {"password-hash": hash_password("x"), "roles": ["viewer"]},
        "orders-team": {"password-hash": hash_password("x"), "roles": ["orders"]},
    }
    security = parse_security(
        users,
        [
            {"match": "#", "browse": ["admin", "viewer"], "manage": ["admin"]},
            {"match": "orders.#", "browse": ["orders"], "manage": ["orders"]},
        ],
    )
    h = Harness(security)
    h.send("orders.eu", "g1")
    h.send("billing", "g1")
    return h


def test_unauthenticated_requests_get_401_except_health(secured):
    assert secured.call("GET", "/health")[0] == 200
    assert secured.call("GET", "/openapi.json")[0] == 401
    assert secured.call("GET", "/openapi.json", user="viewer")[0] == 200
    status, body = secured.call("GET", "/api/queues")
    assert status == 401 and body["error"] == "unauthenticated"


def test_reads_need_browse_and_operations_need_manage(secured):
    assert secured.call("GET", "/api/queues/billing/groups", user="viewer")[0] == 200
    status, body = secured.call("POST", "/api/queues/billing/purge", user="viewer")
    assert status == 403 and body["permission"] == "manage" and "manage" in body["message"]
    assert secured.call("POST", "/api/queues/billing/purge", user="ops")[0] == 200
    status, body = secured.call("GET", "/api/queues/billing", user="orders-team")
    assert status == 403 and body["permission"] == "browse"
    assert (
        secured.call("POST", "/api/queues/orders.eu/groups/reset", body={}, user="orders-team")[0]
        == 200
    )
    status, body = secured.call("GET", "/api/connections", user="orders-team")
    assert status == 403 and body["address"] == "#"
    status, body = secured.call(
        "POST", "/api/queues", body={"name": "billing.x"}, user="orders-team"
    )
    assert status == 403 and body["permission"] == "manage"
    assert (
        secured.call("POST", "/api/queues", body={"name": "orders.x"}, user="orders-team")[0] == 201
    )


def test_queue_list_shows_only_browsable_queues(secured):
    _, mine = secured.call("GET", "/api/queues", user="orders-team")
    assert [q["name"] for q in mine["queues"]] == ["orders.eu"]
    # The most specific rule decides: 'orders.#' grants browse to the orders role only.
    _, others = secured.call("GET", "/api/queues", user="viewer")
    assert [q["name"] for q in others["queues"]] == ["billing"]
    _, doc = secured.call("GET", "/openapi.json", user="viewer")
    assert doc["security"] and "basic" in doc["components"]["securitySchemes"]


def test_log_queue_shows_per_bucket_offsets_and_lag(h):
    status, q = h.call(
        "POST",
        "/api/queues",
        body={"name": "events", "settings": {"queue-type": "log", "log-buckets": 4}},
    )
    assert status == 201 and q["type"] == "log"
    for i in range(6):
        h.send("events", f"g{i}")
    status, q = h.call("GET", "/api/queues/events")
    assert status == 200 and q["lag"] == 6
    assert [b["bucket"] for b in q["buckets"]] == [0, 1, 2, 3]
    assert sum(b["end"] - b["committed"] for b in q["buckets"]) == 6
    status, log = h.call("GET", "/api/logs/events")
    assert status == 200 and log["lag"] == 6
    status, body = h.call("GET", "/api/queues/events/groups")
    assert status == 409 and "log queue" in body["message"]
    _, listed = h.call("GET", "/api/queues")
    assert [x["type"] for x in listed["queues"] if x["name"] == "events"] == ["log"]
    assert 'shoal_queue_depth{queue="events"} 6' in h.call("GET", "/metrics")[1]


def test_operations_from_another_web_origin_are_refused(h):
    two_consumers_with_groups(h)

    def reset(headers):
        resp = h.router.handle(
            Context(h.port, h.now),
            Request("POST", "/api/queues/orders/groups/reset", {}, headers, b"{}"),
        )
        return resp.status, json.loads(resp.body)

    status, body = reset({"origin": "https://evil.example", "host": "127.0.0.1:8161"})
    assert status == 403 and "cross-origin" in body["message"]
    assert reset({"origin": "null", "host": "127.0.0.1:8161"})[0] == 403
    assert reset({"origin": "http://127.0.0.1:8161", "host": "127.0.0.1:8161"})[0] == 200
    assert reset({"host": "127.0.0.1:8161"})[0] == 200  # scripts and the CLI send no Origin
    resp = h.router.handle(
        Context(h.port, h.now),
        Request("GET", "/api/queues", {}, {"origin": "https://evil.example", "host": "x"}),
    )
    assert resp.status == 200


# --- what the head alone decides (the server calls admit before reading a body) ----------


def _admit(h: Harness, method: str, path: str, user: str | None = None):
    return h.router.admit(
        Context(h.port, h.now, h.security), Request(method, path, {}, {}, b"", user)
    )


def test_admission_refuses_from_the_head_and_names_the_body_cap(secured):
    assert _admit(secured, "POST", "/api/queues/billing/purge").refusal.status == 401
    refusal = _admit(secured, "POST", "/api/queues/billing/purge", "viewer").refusal
    assert refusal.status == 403 and json.loads(refusal.body)["permission"] == "manage"
    assert _admit(secured, "POST", "/api/nowhere", "ops").refusal.status == 404
    assert _admit(secured, "PUT", "/api/queues", "ops").refusal.status == 405
    ok = _admit(secured, "POST", "/api/queues/billing/purge", "ops")
    assert ok.refusal is None and ok.body == "json"
    staged = _admit(secured, "POST", "/api/sinks/stage", "ops")
    assert staged.refusal is None and staged.body == "upload"


def test_every_route_names_a_known_body_cap(h):
    from shoal.management.http import BODY_LIMITS

    assert {r.body for r in h.router.route_info()} <= set(BODY_LIMITS)
    assert [r.pattern for r in h.router.route_info() if r.body == "upload"] == ["/api/sinks/stage"]
    with pytest.raises(ValueError, match="unknown body limit"):
        h.router.add("POST", "/x", lambda *a: None, body="huge")


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        (b"[" * 100_000, "nested too deeply"),
        (b'{"a":' * 100_000 + b"1" + b"}" * 100_000, "nested too deeply"),
        (b'{"group": Infinity}', "Infinity is not a JSON value"),
        (b'{"group": "g1"', "not valid JSON"),
        (b"\xff", "not valid JSON"),
    ],
)
def test_bad_json_bodies_are_400_not_500(h, raw, words):
    two_consumers_with_groups(h)
    status, body = h.call("POST", "/api/queues/orders/groups/reset", raw=raw)
    assert status == 400 and body["field"] == "body" and words in body["message"]


def test_cluster_status_is_404_on_a_single_node_and_groups_carry_a_null_node(h):
    status, body = h.call("GET", "/api/cluster")
    assert status == 404 and body["error"] == "not-found" and "cluster" in body["message"]
    h.broker.connect(1, h.now)
    h.broker.send(1, "/queue/q", {"JMSXGroupID": "g"}, b"x", h.now)
    status, body = h.call("GET", "/api/queues/q/groups")
    assert status == 200 and [(g["group"], g["node"]) for g in body["groups"]] == [("g", None)]


def test_bindings_are_404_on_a_single_node(h):
    h.send("orders", "g1")
    status, body = h.call("GET", "/api/queues/orders/bindings")
    assert status == 404 and "not a cluster node" in body["message"]


def test_bindings_show_the_node_holding_each_group_of_the_queue(h):
    from shoal.cluster.grouping import ClusterGrouping

    h.send("orders", None)  # the queue, as a producer's SEND makes it
    grouping = ClusterGrouping("n1", 1000)
    h.broker.cluster = grouping  # a cluster node that routed these groups
    grouping.bindings.update(
        {
            ("orders", "g2"): "n3",
            ("orders", "g1"): "n2",
            ("orders", "g3"): "n1",
            ("orders", "g10"): "n2",
            ("other", "g1"): "n3",
        }
    )
    status, body = h.call("GET", "/api/queues/orders/bindings")
    assert status == 200
    assert [(b["group"], b["node"]) for b in body["bindings"]] == [
        ("g1", "n2"),
        ("g10", "n2"),
        ("g2", "n3"),
        ("g3", "n1"),
    ]
    assert body["total"] == 4 and body["nodes"] == {"n1": 1, "n2": 2, "n3": 1}
    _, body = h.call("GET", "/api/queues/orders/bindings", {"node": "n2", "q": "1", "limit": "1"})
    assert [b["group"] for b in body["bindings"]] == ["g1"] and body["total"] == 2
    _, body = h.call("GET", "/api/queues/orders/bindings", {"offset": "3"})
    assert [b["group"] for b in body["bindings"]] == ["g3"]
    status, body = h.call("GET", "/api/queues/orders/bindings", {"limit": "x"})
    assert status == 400 and body["field"] == "limit"
    assert h.call("GET", "/api/queues/nope/bindings")[0] == 404


def test_forward_queues_are_listed_as_internal(h):
    h.send("orders", "g1")
    h.broker.ensure_forward_queue("n2")
    status, body = h.call("GET", "/api/queues")
    assert status == 200
    flags = {q["name"]: (q["internal"], q["forwards_to"]) for q in body["queues"]}
    assert flags == {"orders": (False, None), "$cluster.forward.n2": (True, "n2")}
    assert h.call("GET", "/api/queues/$cluster.forward.n2")[1]["internal"] is True


def test_rate_sampling_reads_the_counters_the_queue_list_shows(h):
    owners = two_consumers_with_groups(h)
    assert owners
    h.call("POST", "/api/queues", body={"name": "events", "settings": {"queue-type": "log"}})
    for i in range(3):
        h.send("events", f"g{i}")
    fields = ("name", "enqueued", "delivered", "acked", "depth")
    listed = sorted(tuple(q.get(k, 0) for k in fields) for q in h.port.queue_infos())
    counted = sorted(tuple(q.get(k, 0) for k in fields) for q in h.port.queue_counters())
    assert counted == listed
    assert ("events", 3, 0, 0, 3) in counted and ("orders", 8, 8, 0, 0) in counted
