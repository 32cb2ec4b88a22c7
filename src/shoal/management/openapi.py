"""The OpenAPI 3.1 document for the management API, served at /openapi.json.

Built from the same tables the handlers validate with (settings, sort keys,
limits), so the document and the behaviour agree; the tests run schemathesis
against it on a live broker.
"""

from __future__ import annotations

import json
from typing import Any

from shoal import __version__
from shoal.broker.model import GROUP_STATES
from shoal.broker.views import GROUP_SORT_KEYS
from shoal.management import api
from shoal.management.http import Context, Request, Response
from shoal.management.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE

INT = {"type": "integer"}
NINT = {"type": ["integer", "null"]}
NUM = {"type": "number"}
NNUM = {"type": ["number", "null"]}
STR = {"type": "string"}
NSTR = {"type": ["string", "null"]}
BOOL = {"type": "boolean"}


def ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def obj(required: list[str], props: dict[str, Any], *, extra: bool = True) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "required": required, "properties": props}
    if not extra:
        schema["additionalProperties"] = False
    return schema


RATES = obj(
    ["enqueue", "deliver", "ack"],
    {"enqueue": NNUM, "deliver": NNUM, "ack": NNUM},
)

GROUP = obj(
    ["group", "owner", "backlog", "in_flight", "oldest_age_ms", "state", "reassigned"],
    {
        "group": {**STR, "description": "group id ('#N' for bucket N when hashed)"},
        "node": {**NSTR, "description": "cluster node holding the group; null on a single node"},
        "owner": {**NSTR, "description": "consumer id 'connection/subscription', or null"},
        "backlog": {**INT, "description": "messages not yet delivered"},
        "in_flight": {**INT, "description": "messages delivered and not yet settled"},
        "oldest_age_ms": {**NINT, "description": "age of the group's oldest message"},
        "state": {"type": "string", "enum": list(GROUP_STATES)},
        "reassigned": {**INT, "description": "times the group moved to another consumer"},
    },
)

STATE_COUNTS = obj(list(GROUP_STATES), dict.fromkeys(GROUP_STATES, INT))

CONSUMER = obj(
    ["id", "connection", "subscription", "queue"],
    {
        "id": STR,
        "connection": INT,
        "subscription": STR,
        "queue": STR,
        "destination": NSTR,
        "client_address": NSTR,
        "user": NSTR,
        "ack_mode": NSTR,
        "prefetch": NINT,
        "window_size": NINT,
        "credit": {
            **NINT,
            "description": "deliveries the consumer may still take; null: unbounded",
        },
        "unsettled": INT,
        "delivered": INT,
        "acked": INT,
        "nacked": INT,
        "groups": INT,
        "exclusive": BOOL,
        "selector": {**NSTR, "description": "the SUBSCRIBE selector; null: takes everything"},
        "active": BOOL,
        "since": NNUM,
    },
)

CONNECTION = obj(
    ["id", "client_address", "user", "subscriptions", "unsettled"],
    {
        "id": INT,
        "client_address": NSTR,
        "protocol": NSTR,
        "user": NSTR,
        "client_id": NSTR,
        "connected": BOOL,
        "connected_at": NNUM,
        "subscriptions": {"type": "array", "items": STR},
        "credit": NINT,
        "unsettled": INT,
        "transactions": INT,
        "sent": INT,
        "frames_in": NINT,
        "messages_out": NINT,
        "writable": BOOL,
        "blocked": BOOL,
        "temp_queues": {"type": "array", "items": STR},
        "consumers": {"type": "array", "items": ref("Consumer")},
    },
)

QUEUE = obj(
    ["name", "type", "settings"],
    {
        "name": STR,
        "address": STR,
        "routing": {"type": "string", "enum": ["anycast", "multicast"]},
        "type": {"type": "string", "enum": ["classic", "log"]},
        "durable": BOOL,
        "temporary": BOOL,
        "subscription": NSTR,
        "settings": {"type": "object", "description": "every setting in force, kebab-case"},
        "depth": {**INT, "description": "messages waiting, not yet delivered"},
        "in_flight": INT,
        "bytes": {**INT, "description": "bytes of message bodies held in memory"},
        "paged": {**INT, "description": "messages whose body is paged out to the journal"},
        "paged_bytes": {**INT, "description": "bytes of those paged-out bodies"},
        "consumers": INT,
        "enqueued": INT,
        "delivered": INT,
        "acked": INT,
        "redelivered": INT,
        "dead_lettered": INT,
        "expired": INT,
        "oldest_age_ms": NINT,
        "groups": INT,
        "internal": {
            **BOOL,
            "description": "the broker's own queue: a cluster node's store-and-forward "
            "queue to another node",
        },
        "forwards_to": {**NSTR, "description": "internal queues: the node it forwards to"},
        "dispatch_held": BOOL,
        "rates": ref("Rates"),
        "lag": {**INT, "description": "log queues: records after the committed offsets"},
        "log_buckets": INT,
        "buckets": {
            "type": "array",
            "items": ref("LogBucket"),
            "description": "log queues: per-bucket offsets and lag",
        },
    },
)

BUCKET = obj(
    ["bucket", "start", "end", "committed", "lag"],
    {"bucket": INT, "start": INT, "end": INT, "committed": INT, "lag": INT, "bytes": INT},
)

LOG = obj(
    ["name", "lag", "buckets"],
    {
        "name": STR,
        "type": {"type": "string", "enum": ["log"]},
        "log_buckets": INT,
        "lag": {**INT, "description": "records after the committed offsets, all buckets"},
        "buckets": {"type": "array", "items": ref("LogBucket")},
        "start": {"type": "object", "additionalProperties": INT},
        "end": {"type": "object", "additionalProperties": INT},
        "committed": {"type": "object", "additionalProperties": INT},
    },
)

QUEUE_DETAIL = {
    "allOf": [
        ref("Queue"),
        {
            "type": "object",
            "properties": {
                "consumer_list": {"type": "array", "items": ref("Consumer")},
                "group_states": ref("GroupStateCounts"),
                "depth_history": {"type": "array", "items": INT},
            },
        },
    ]
}

MESSAGE = obj(
    [
        "id",
        "headers",
        "body",
        "body_encoding",
        "group",
        "timestamp",
        "delivery_count",
        "redelivered",
    ],
    {
        "id": INT,
        "destination": STR,
        "headers": {"type": "object", "additionalProperties": STR},
        "body": STR,
        "body_encoding": {"type": "string", "enum": ["text", "base64"]},
        "paged": {
            **BOOL,
            "description": "the body is paged out to the journal and not "
            "shown (body is empty); size is its length",
        },
        "size": INT,
        "group": NSTR,
        "group_seq": NINT,
        "persistent": BOOL,
        "priority": NINT,
        "expires": {**NINT, "description": "epoch ms, null for never"},
        "timestamp": {**INT, "description": "epoch ms when the broker accepted it"},
        "delivery_count": INT,
        "redelivered": BOOL,
    },
)

BROKER = obj(
    ["version", "uptime_s", "listeners", "journal"],
    {
        "name": STR,
        "version": STR,
        "uptime_s": NUM,
        "listeners": {"type": "object", "additionalProperties": STR},
        "journal": {"type": "object"},
        "fsync": obj(["count"], {"count": INT, "recent_mean_ms": NNUM, "recent_max_ms": NNUM}),
        "security": BOOL,
        "user": NSTR,
        "connections": INT,
        "consumers": INT,
        "queues": INT,
        "depth": INT,
        "in_flight": INT,
        "rates": ref("Rates"),
        "time": NUM,
    },
)

HISTORY = obj(
    ["interval_s", "points", "queues"],
    {
        "interval_s": NUM,
        "points": {
            "type": "array",
            "items": obj(
                ["t", "enqueue", "deliver", "ack", "depth"],
                {"t": NUM, "enqueue": NNUM, "deliver": NNUM, "ack": NNUM, "depth": INT},
            ),
        },
        "queues": {"type": "object", "additionalProperties": {"type": "array", "items": INT}},
    },
)

ERROR = obj(
    ["error", "message"],
    {
        "error": {**STR, "description": "stable error code (shoal.errors.CATALOGUE)"},
        "message": STR,
        "field": {**STR, "description": "the parameter or body field at fault"},
        "permission": {**STR, "description": "the permission the user lacks"},
        "address": STR,
    },
)

DESCRIPTIONS = {
    "200": "OK",
    "201": "Created",
    "202": "Accepted: started; the result shows later",
    "400": "Bad input; the body names the field",
    "401": "Credentials missing or wrong",
    "403": "The user lacks the permission named in the body",
    "404": "No such queue, group or connection",
    "409": "The object exists or is in a state that forbids the operation",
    "413": 'The request body is larger than this route\'s limit (docs/configuration.md, "HTTP limits")',
    "421": "The Host header is not one of the broker's names (allowed-hosts)",
}


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"application/json": {"schema": schema}}


def _error(description: str) -> dict[str, Any]:
    return {"description": description, "content": _json(ref("Error"))}


def _responses(ok: dict[str, Any], *codes: str, ok_code: str = "200") -> dict[str, Any]:
    out: dict[str, Any] = {ok_code: {"description": DESCRIPTIONS[ok_code], "content": _json(ok)}}
    for code in ("401", "403", *codes):
        out[code] = _error(DESCRIPTIONS[code])
    return out


def _path(name: str, description: str, schema: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "name": name,
        "in": "path",
        "required": True,
        "description": description,
        "schema": schema or STR,
    }


def _query(name: str, description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "description": description,
        "schema": schema,
    }


QUEUE_PARAM = _path("name", "queue name")
GROUP_PARAM = _path("group", "group id")
CONN_PARAM = _path(
    "id", "connection id", {"type": "integer", "minimum": 0, "maximum": 999_999_999_999_999_999}
)
STATE_ALT = "|".join(GROUP_STATES)
GROUP_PAGING = [
    _query(
        "limit", "page size", {"type": "integer", "minimum": 0, "maximum": api.GROUPS_LIMIT_MAX}
    ),
    _query("offset", "page start", {"type": "integer", "minimum": 0, "maximum": 999_999_999_999}),
]


def build_document(*, security: bool) -> dict[str, Any]:
    settings_props = api.setting_schema()
    create_body = obj(
        ["name"],
        {
            "name": {"type": "string", "pattern": api.QUEUE_NAME_PATTERN},
            "settings": {
                "type": "object",
                "properties": settings_props,
                "additionalProperties": False,
                "description": "queue settings, kebab-case (as in the TOML configuration), "
                "plus 'address' and 'routing' for a queue bound to a topic",
            },
        },
        extra=False,
    )
    reset_body = obj([], {"group": {"type": "string"}}, extra=False)

    def op(
        summary: str,
        responses: dict[str, Any],
        *,
        params: list[Any] | None = None,
        body: dict[str, Any] | None = None,
        body_required: bool = False,
        tag: str = "queues",
        open_: bool = False,
    ) -> dict[str, Any]:
        o: dict[str, Any] = {"summary": summary, "tags": [tag], "responses": responses}
        if params:
            o["parameters"] = params
        if body is not None:
            o["requestBody"] = {"required": body_required, "content": _json(body)}
        if open_:
            o["security"] = []
            for code in ("401", "403"):
                responses.pop(code, None)
        return o

    paths: dict[str, Any] = {
        "/health": {
            "get": op(
                "Liveness",
                {
                    "200": {
                        "description": "OK",
                        "content": _json(
                            obj(
                                ["status", "build"],
                                {
                                    "status": {"type": "string", "enum": ["ok"]},
                                    "build": {"type": "string", "enum": ["compiled", "pure"]},
                                    "build_reason": {
                                        "type": "string",
                                        "description": "why the pure-Python modules run "
                                        "(SHOAL_PURE, a stale or a missing compiled build)",
                                    },
                                },
                            )
                        ),
                    }
                },
                tag="broker",
                open_=True,
            )
        },
        "/metrics": {
            "get": op(
                "Prometheus metrics (text exposition format 0.0.4)",
                {
                    "200": {
                        "description": "OK",
                        "content": {
                            METRICS_CONTENT_TYPE.split(";")[0]: {"schema": {"type": "string"}}
                        },
                    },
                    "401": _error(DESCRIPTIONS["401"]),
                    "403": _error(DESCRIPTIONS["403"]),
                },
                tag="broker",
            )
        },
        "/api/broker": {
            "get": op(
                "Broker info: version, uptime, listeners, journal, totals",
                _responses(ref("Broker")),
                tag="broker",
            )
        },
        "/api/cluster": {
            "get": op(
                "Cluster node status: nodes, link addresses and states, bindings held, forward "
                "backlog (docs/cluster.md); 404 on a single node",
                _responses(
                    obj(
                        ["cluster", "node", "nodes"],
                        {
                            "cluster": {"type": "string"},
                            "node": {"type": "string"},
                            "nodes": {"type": "array", "items": {"type": "object"}},
                        },
                    ),
                    "404",
                ),
                tag="broker",
            )
        },
        "/api/cluster/nodes/{node}/forget": {
            "post": op(
                "C6: start releasing every group binding of a lost node (out of "
                "membership); the status' 'forgets' shows when it is done (docs/cluster.md)",
                _responses(
                    obj(["node", "state"], {"node": STR, "state": STR, "released": INT}),
                    "404",
                    "409",
                    ok_code="202",
                ),
                params=[_path("node", "the lost node's id")],
                tag="broker",
            )
        },
        "/api/cluster/queues/{queue}/rebalance": {
            "post": op(
                "C7: plan which drained groups of the queue move so that the nodes with "
                "consumers hold as many as each other; holders release them as they drain. "
                "The status' 'rebalances' shows the plan (docs/cluster.md)",
                _responses(
                    obj(["queue", "state"], {"queue": STR, "state": STR}),
                    "404",
                    "409",
                    ok_code="202",
                ),
                params=[_path("queue", "the queue's name")],
                tag="broker",
            )
        },
        "/api/history": {
            "get": op(
                "Recent message rates and queue depth history (console chart)",
                _responses(ref("History")),
                tag="broker",
            )
        },
        "/api/addresses": {
            "get": op(
                "Addresses and the queues bound to them",
                _responses(
                    obj(
                        ["addresses"],
                        {
                            "addresses": {
                                "type": "array",
                                "items": obj(
                                    ["name", "routing", "queues"],
                                    {
                                        "name": STR,
                                        "routing": STR,
                                        "queues": {"type": "array", "items": STR},
                                    },
                                ),
                            }
                        },
                    )
                ),
            )
        },
        "/api/queues": {
            "get": op(
                "Queues the user may browse, with counters and rates",
                _responses(obj(["queues"], {"queues": {"type": "array", "items": ref("Queue")}})),
            ),
            "post": op(
                "Create a queue (needs manage on its name)",
                _responses(ref("Queue"), "400", "409", ok_code="201"),
                body=create_body,
                body_required=True,
            ),
        },
        "/api/queues/{name}": {
            "get": op(
                "One queue: settings in force, counters, rates, consumers, group states",
                _responses(QUEUE_DETAIL, "404"),
                params=[QUEUE_PARAM],
            ),
            "delete": op(
                "Delete a queue; its consumers are closed, its messages dropped",
                _responses(obj(["deleted"], {"deleted": STR}), "404"),
                params=[QUEUE_PARAM],
            ),
        },
        "/api/queues/{name}/purge": {
            "post": op(
                "Drop every message waiting in the queue (in-flight ones stay)",
                _responses(obj(["queue", "purged"], {"queue": STR, "purged": INT}), "404", "409"),
                params=[QUEUE_PARAM],
            )
        },
        "/api/queues/{name}/groups": {
            "get": op(
                "Groups of a queue: paged, sortable, filterable by state and owner",
                _responses(
                    obj(
                        ["groups", "total"],
                        {
                            "queue": STR,
                            "groups": {"type": "array", "items": ref("Group")},
                            "total": INT,
                            "offset": INT,
                            "limit": INT,
                            "states": ref("GroupStateCounts"),
                        },
                    ),
                    "400",
                    "404",
                    "409",
                ),
                params=[
                    QUEUE_PARAM,
                    _query(
                        "state",
                        "only groups in these states (comma-separated)",
                        {"type": "string", "pattern": f"^({STATE_ALT})(,({STATE_ALT}))*$"},
                    ),
                    _query(
                        "owner",
                        "only groups owned by this consumer id, by any consumer of this "
                        "connection id, or 'none' for unowned groups",
                        STR,
                    ),
                    _query("q", "only groups whose id contains this text", STR),
                    _query("sort", "sort key", {"type": "string", "enum": list(GROUP_SORT_KEYS)}),
                    _query("order", "sort order", {"type": "string", "enum": ["asc", "desc"]}),
                    *GROUP_PAGING,
                ],
                tag="groups",
            )
        },
        "/api/queues/{name}/bindings": {
            "get": op(
                "Cluster nodes: which node holds each group of a queue, as this node knows "
                "(every group it routed); 404 on a single broker",
                _responses(
                    obj(
                        ["bindings", "total"],
                        {
                            "queue": STR,
                            "node": NSTR,
                            "bindings": {
                                "type": "array",
                                "items": obj(["group", "node"], {"group": STR, "node": STR}),
                            },
                            "total": INT,
                            "offset": INT,
                            "limit": INT,
                            "nodes": {
                                "type": "object",
                                "additionalProperties": INT,
                                "description": "node -> groups of this queue it holds",
                            },
                        },
                    ),
                    "400",
                    "404",
                    "409",
                ),
                params=[
                    QUEUE_PARAM,
                    _query("node", "only groups held by this node", STR),
                    _query("q", "only groups whose id contains this text", STR),
                    *GROUP_PAGING,
                ],
                tag="groups",
            )
        },
        "/api/queues/{name}/groups/reset": {
            "post": op(
                'Reset one group ({"group": G}) or every group ({}); moves complete as groups drain',
                _responses(
                    obj(["queue", "group", "reset"], {"queue": STR, "group": NSTR, "reset": INT}),
                    "400",
                    "404",
                    "409",
                ),
                params=[QUEUE_PARAM],
                body=reset_body,
                tag="groups",
            )
        },
        "/api/queues/{name}/groups/{group}/park": {
            "post": op(
                "Park a group (a group id, or a bucket '#k'; an untracked group is created "
                "parked): nothing of it is delivered until it is resumed",
                _responses(
                    obj(
                        ["queue", "group", "state"],
                        {"queue": STR, "group": STR, "state": NSTR, "bucket": STR},
                    ),
                    "404",
                    "409",
                ),
                params=[QUEUE_PARAM, GROUP_PARAM],
                tag="groups",
            )
        },
        "/api/queues/{name}/groups/{group}/resume": {
            "post": op(
                "Resume a parked group (a group id, or a bucket '#k'); 409 when not parked",
                _responses(
                    obj(
                        ["queue", "group", "state"],
                        {"queue": STR, "group": STR, "state": NSTR, "bucket": STR},
                    ),
                    "404",
                    "409",
                ),
                params=[QUEUE_PARAM, GROUP_PARAM],
                tag="groups",
            )
        },
        "/api/queues/{name}/messages": {
            "get": op(
                "Browse waiting messages without consuming them",
                _responses(
                    obj(
                        ["messages"],
                        {
                            "queue": STR,
                            "count": INT,
                            "messages": {"type": "array", "items": ref("Message")},
                        },
                    ),
                    "400",
                    "404",
                    "409",
                ),
                params=[
                    QUEUE_PARAM,
                    _query(
                        "limit",
                        "at most this many messages",
                        {"type": "integer", "minimum": 0, "maximum": api.BROWSE_LIMIT_MAX},
                    ),
                ],
            )
        },
        "/api/connections": {
            "get": op(
                "STOMP connections",
                _responses(
                    obj(
                        ["connections"],
                        {"connections": {"type": "array", "items": ref("Connection")}},
                    )
                ),
                tag="connections",
            )
        },
        "/api/connections/{id}": {
            "get": op(
                "One connection with its consumers",
                _responses(ref("Connection"), "400", "404"),
                params=[CONN_PARAM],
                tag="connections",
            ),
            "delete": op(
                "Close a connection (it gets an ERROR frame saying why)",
                _responses(obj(["closed"], {"closed": INT}), "400", "404"),
                params=[CONN_PARAM],
                tag="connections",
            ),
        },
        "/api/logs": {
            "get": op(
                "Log queues the user may browse: per-bucket offsets and lag",
                _responses(obj(["logs"], {"logs": {"type": "array", "items": ref("Log")}})),
                tag="logs",
            )
        },
        "/api/logs/{queue}": {
            "get": op(
                "One log queue: per-bucket start, end, committed offset and lag (reading records "
                "and committing are the Spark connector's routes, docs/spark.md)",
                _responses(ref("Log"), "404"),
                params=[_path("queue", "log queue name")],
                tag="logs",
            )
        },
        "/api/consumers": {
            "get": op(
                "Consumers (subscriptions) the user may browse",
                _responses(
                    obj(["consumers"], {"consumers": {"type": "array", "items": ref("Consumer")}})
                ),
                params=[_query("queue", "only consumers of this queue", STR)],
                tag="connections",
            )
        },
    }
    for methods in paths.values():
        for o in methods.values():
            if not security:
                for code in ("401", "403"):
                    o["responses"].pop(code, None)
            # Answered from the request's head, before any handler: every route can.
            if "requestBody" in o:
                o["responses"].setdefault("400", _error(DESCRIPTIONS["400"]))
                o["responses"]["413"] = _error(DESCRIPTIONS["413"])
            o["responses"]["421"] = _error(DESCRIPTIONS["421"])
    doc: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {
            "title": "Shoal management API",
            "version": __version__,
            "description": "Reads need the 'browse' permission, operations 'manage' (on the "
            "queue, or on '#' for broker-wide ones). Errors are JSON: {error, message, field?}. "
            "A request is judged on its head before its body is read (421, 401, 403, 413); a "
            "connection beyond http-max-connections gets 503 and one too slow to send its "
            'request 408 (docs/configuration.md, "HTTP limits").',
        },
        "paths": paths,
        "components": {
            "schemas": {
                "Error": ERROR,
                "Rates": RATES,
                "Group": GROUP,
                "GroupStateCounts": STATE_COUNTS,
                "Consumer": CONSUMER,
                "Connection": CONNECTION,
                "Queue": QUEUE,
                "Message": MESSAGE,
                "Broker": BROKER,
                "History": HISTORY,
                "Log": LOG,
                "LogBucket": BUCKET,
            },
        },
    }
    if security:
        doc["components"]["securitySchemes"] = {
            "basic": {"type": "http", "scheme": "basic"},
            "bearer": {"type": "http", "scheme": "bearer"},
        }
        doc["security"] = [{"basic": []}, {"bearer": []}]
    return doc


def register(router: Any) -> None:
    cache: dict[tuple[bool, bool], bytes] = {}

    def handle(ctx: Context, request: Request, params: dict[str, str]) -> Response:
        security = bool(getattr(ctx.security, "enabled", False))
        key = (security, api.log_queues_available())
        if key not in cache:
            cache[key] = json.dumps(build_document(security=security), indent=1).encode()
        return Response(200, cache[key], "application/json")

    router.add("GET", "/openapi.json", handle, auth="user")
