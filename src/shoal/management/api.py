"""The JSON API: reads and operations through the broker port (``broker_port.py``).

Every handler takes ``(ctx, request, params)`` and returns a Response; the
router turns raised BrokerErrors into 4xx JSON bodies naming the problem.
Routes, auth levels and shapes are documented in ``docs/management.md`` and
served as OpenAPI at ``/openapi.json`` (``openapi.py``).
"""

from __future__ import annotations

import base64
import heapq
import re
from typing import Any

from shoal.broker.model import GROUP_STATES
from shoal.broker.views import GROUP_SORT_KEYS
from shoal.cluster.grouping import FORWARD_PREFIX
from shoal.errors import BrokerError, Conflict, InvalidSetting, NotFound
from shoal.management.broker_port import MessageView, SessionView
from shoal.management.http import (
    BROKER_WIDE,
    BadRequest,
    Context,
    Request,
    Response,
    Router,
    allowed,
    authorize,
    json_response,
    query_choice,
    query_int,
    read_json,
)
from shoal.management.sampling import ManagementState

GROUPS_LIMIT_DEFAULT = 100
NOT_A_CLUSTER_NODE = "this broker is not a cluster node (no [cluster] section)"
GROUPS_LIMIT_MAX = 10_000
BROWSE_LIMIT_DEFAULT = 50
BROWSE_LIMIT_MAX = 1_000
QUEUE_NAME_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,199}$"
# fullmatch on the unanchored form: Python's "$" would let a trailing newline through.
QUEUE_NAME_RE = re.compile(QUEUE_NAME_PATTERN[1:-1])

# Settings a queue may be created with over HTTP: kebab-case name -> JSON
# Schema. Built from the core's QueueSettings (so a new setting appears by
# itself), with the bounds below; openapi.py serves this same table, so the
# document and the validation cannot disagree.
INT32_MAX = 2**31 - 1
_BOUNDS: dict[str, tuple[int, int]] = {
    "group-buckets": (-1, 1_048_576),
    "group-bindings-max": (1, INT32_MAX),
    "consumers-before-dispatch": (0, 1_000_000),
    "delay-before-dispatch": (0, 86_400_000),
    "max-delivery-attempts": (1, 1_000_000),
    "log-buckets": (1, 1024),
    "max-size-bytes": (-1, 2**53),
}
_ADDRESS_LIKE = ("dead-letter-address", "expiry-address")


def _build_setting_schema() -> dict[str, dict[str, Any]]:
    import dataclasses

    from shoal.broker import settings as core_settings

    choices: dict[str, tuple[str, ...]] = getattr(core_settings, "_CHOICES", {})
    table: dict[str, dict[str, Any]] = {}
    for f in dataclasses.fields(core_settings.QueueSettings):
        name = f.name.replace("_", "-")
        kind = str(f.type)
        spec: dict[str, Any]
        if kind == "bool":
            spec = {"type": "boolean"}
        elif kind == "int":
            lo, hi = _BOUNDS.get(name, (0, INT32_MAX))
            spec = {"type": "integer", "minimum": lo, "maximum": hi}
        elif f.name in choices:
            spec = {"type": "string", "enum": list(choices[f.name])}
        elif name in _ADDRESS_LIKE:
            spec = {"type": "string", "pattern": QUEUE_NAME_PATTERN}
        else:
            spec = {"type": "string", "minLength": 1, "maxLength": 256}
        if "None" in kind:
            spec["type"] = [spec["type"], "null"]
        table[name] = spec
    table["address"] = {"type": "string", "pattern": QUEUE_NAME_PATTERN}
    table["routing"] = {"type": "string", "enum": ["anycast", "multicast"]}
    return table


SETTING_SCHEMA: dict[str, dict[str, Any]] = _build_setting_schema()


def log_queues_available() -> bool:
    try:
        import shoal.broker.logqueue  # noqa: F401 - another engineer's module
    except ImportError:
        return False
    return True


def setting_schema() -> dict[str, dict[str, Any]]:
    """The settings table as served (``log`` only when log queues exist)."""
    table = {k: dict(v) for k, v in SETTING_SCHEMA.items()}
    if not log_queues_available():
        table["queue-type"]["enum"] = ["classic"]
    return table


# --- helpers -----------------------------------------------------------------


def _queue_infos(ctx: Context, state: ManagementState) -> list[dict[str, Any]]:
    queues = state.sample(ctx)
    for q in queues:
        q.setdefault("type", "classic")
        # A cluster node's store-and-forward queue to another node: the
        # broker's own, listed apart from the queues users made.
        name = str(q.get("name"))
        forward = name.startswith(FORWARD_PREFIX)
        q["internal"] = forward
        q["forwards_to"] = name[len(FORWARD_PREFIX) :] if forward else None
    return queues


def _find_queue(ctx: Context, state: ManagementState, name: str) -> dict[str, Any]:
    for q in _queue_infos(ctx, state):
        if q.get("name") == name:
            return q
    raise NotFound(f"no queue {name!r}")


def _classic(ctx: Context, state: ManagementState, name: str) -> dict[str, Any]:
    q = _find_queue(ctx, state, name)
    if q.get("type") == "log":
        raise Conflict(f"queue {name!r} is a log queue: it has no groups and no browsable backlog")
    return q


def _with_rates(ctx: Context, state: ManagementState, q: dict[str, Any]) -> dict[str, Any]:
    q["rates"] = state.rates.rates(q["name"], ctx.now)
    return q


def _credit(c: dict[str, Any]) -> int | None:
    prefetch = c.get("prefetch")
    if not isinstance(prefetch, int) or prefetch <= 0:
        return None  # unbounded
    return max(0, prefetch - int(c.get("in_flight") or 0))


def _consumer(c: dict[str, Any], sessions: dict[int, SessionView]) -> dict[str, Any]:
    session = sessions.get(c.get("connection"))  # type: ignore[arg-type]
    return {
        "id": c["id"],
        "connection": c.get("connection"),
        "subscription": c.get("subscription"),
        "queue": c.get("queue"),
        "destination": c.get("destination"),
        "client_address": session.peer if session else None,
        "user": session.user if session else None,
        "ack_mode": c.get("ack_mode"),
        "prefetch": c.get("prefetch"),
        "window_size": c.get("window_size"),
        "credit": _credit(c),
        "unsettled": c.get("in_flight", 0),
        "delivered": c.get("delivered", 0),
        "acked": c.get("acked", 0),
        "nacked": c.get("nacked", 0),
        "groups": c.get("groups", 0),
        "exclusive": c.get("exclusive", False),
        "selector": c.get("selector"),
        "active": c.get("active", True),
        "since": c.get("since"),
    }


def _consumers(
    ctx: Context, sessions: dict[int, SessionView] | None = None
) -> list[dict[str, Any]]:
    if sessions is None:
        sessions = ctx.port.sessions()
    return [_consumer(c, sessions) for c in ctx.port.consumer_infos()]


def _connections(ctx: Context) -> list[dict[str, Any]]:
    sessions = ctx.port.sessions()
    consumers = _consumers(ctx, sessions)
    by_conn: dict[Any, list[dict[str, Any]]] = {}
    for c in consumers:
        by_conn.setdefault(c["connection"], []).append(c)
    core = {c["id"]: c for c in ctx.port.connection_infos()}
    out = []
    for conn_id in sorted(set(core) | set(sessions)):
        c = core.get(conn_id, {})
        s = sessions.get(conn_id)
        mine = by_conn.get(conn_id, [])
        credit_list = [x["credit"] for x in mine]
        out.append(
            {
                "id": conn_id,
                "client_address": s.peer if s else None,
                "protocol": s.protocol if s else None,
                "user": c.get("user", s.user if s else None),
                "client_id": c.get("client_id"),
                "connected": conn_id in core,
                "connected_at": (s.connected_at if s else None) or c.get("since"),
                "subscriptions": [x["subscription"] for x in mine],
                "credit": None if any(x is None for x in credit_list) else sum(credit_list),
                "unsettled": c.get("in_flight", 0),
                "transactions": c.get("transactions", 0),
                "sent": c.get("sent", 0),
                "frames_in": s.frames_in if s else None,
                "messages_out": s.messages_out if s else None,
                "writable": c.get("writable", True),
                "blocked": c.get("blocked", False),
                "temp_queues": c.get("temp_queues", []),
            }
        )
    return out


def _conn_id(params: dict[str, str]) -> int:
    raw = params["id"]
    if not re.fullmatch(r"[0-9]{1,18}", raw):
        raise BadRequest(f"connection id must be a non-negative integer, not {raw!r}", "id")
    return int(raw)


def _find_connection(ctx: Context, conn_id: int) -> dict[str, Any]:
    for c in _connections(ctx):
        if c["id"] == conn_id:
            return c
    raise NotFound(f"no connection {conn_id}")


# --- reads --------------------------------------------------------------------


def make_handlers(state: ManagementState) -> dict[str, Any]:
    def get_broker(ctx: Context, request: Request, params: dict[str, str]) -> Response:
        queues = _queue_infos(ctx, state)
        port = ctx.port
        info = port.broker_info()
        fsyncs = port.fsync_stats()
        recent = list(fsyncs.recent)[-100:] if fsyncs is not None else []
        return json_response(
            {
                "name": "shoal",
                "version": info.get("version"),
                "uptime_s": info.get("uptime_s"),
                "listeners": info.get("listeners", {}),
                "journal": info.get("journal", {}),
                "fsync": {
                    "count": fsyncs.count if fsyncs is not None else 0,
                    "recent_mean_ms": round(sum(recent) / len(recent) * 1000, 3)
                    if recent
                    else None,
                    "recent_max_ms": round(max(recent) * 1000, 3) if recent else None,
                },
                "security": bool(getattr(ctx.security, "enabled", False)),
                "user": request.user,
                "connections": len(port.connection_infos()),
                "consumers": len(port.consumer_infos()),
                "queues": len(queues),
                "depth": sum(int(q.get("depth") or 0) for q in queues),
                "in_flight": sum(int(q.get("in_flight") or 0) for q in queues),
                "rates": state.rates.total_rates(ctx.now),
                "time": ctx.now,
            }
        )

    def get_cluster(ctx: Context, request: Request, params: dict[str, str]) -> Response:
        status = ctx.port.cluster_status()
        if status is None:
            raise NotFound(NOT_A_CLUSTER_NODE)
        return json_response(status)

    def forget_node(ctx: Context, request: Request, params: dict[str, str]) -> Response:
        started = ctx.port.cluster_forget(params["node"])
        if started is None:
            raise NotFound(NOT_A_CLUSTER_NODE)
        return json_response(started, status=202)

    def rebalance_queue(ctx: Context, request: Request, params: dict[str, str]) -> Response:
        started = ctx.port.cluster_rebalance(params["queue"])
        if started is None:
            raise NotFound(NOT_A_CLUSTER_NODE)
        return json_response(started, status=202)

    def get_addresses(ctx: Context, request: Request, params: dict[str, str]) -> Response:
        addresses: dict[str, dict[str, Any]] = {}
        for q in _queue_infos(ctx, state):
            if not allowed(ctx, request, "browse", q["name"]):
                continue
            address = q.get("address") or q["name"]
            a = addresses.setdefault(
                address, {"name": address, "routing": q.get("routing", "anycast"), "queues": []}
            )
            a["queues"].append(q["name"])
        return json_response({"addresses": sorted(addresses.values(), key=lambda a: a["name"])})

    def list_queues(ctx: Context, request: Request, params: dict[str, str]) -> Response:
        queues = [
            _with_rates(ctx, state, q)
            for q in _queue_infos(ctx, state)
            if allowed(ctx, request, "browse", q["name"])
        ]
        queues.sort(key=lambda q: q["name"])
        return json_response({"queues": queues})

    def get_queue(ctx: Context, request: Request, params: dict[str, str]) -> Response:
        name = params["name"]
        q = _with_rates(ctx, state, _find_queue(ctx, state, name))
        q["consumer_list"] = [c for c in _consumers(ctx) if c["queue"] == name]
        if q.get("type") != "log":
            q["group_states"] = ctx.port.group_state_counts(name)
        q["depth_history"] = state.rates.depth_history(name)
        return json_response(q)

    def list_groups(ctx: Context, request: Request, params: dict[str, str]) -> Response:
        name = params["name"]
        _classic(ctx, state, name)
        states_raw = request.query.get("state")
        states: set[str] | None = None
        if states_raw is not None:
            states = set()
            for s in states_raw.split(","):
                if s not in GROUP_STATES:
                    raise BadRequest(
                        f"query parameter 'state' must be one of {', '.join(GROUP_STATES)} "
                        f"(comma-separated), not {s!r}",
                        "state",
                    )
                states.add(s)
        owner = request.query.get("owner") or None
        needle = request.query.get("q") or None
        sort = query_choice(request, "sort", GROUP_SORT_KEYS, "group")
        order = query_choice(request, "order", ("asc", "desc"), "asc")
        limit = query_int(request, "limit", GROUPS_LIMIT_DEFAULT, maximum=GROUPS_LIMIT_MAX)
        offset = query_int(request, "offset", 0)
        # The core filters, sorts and pages without a row per group (G15 at
        # 100k+ groups); the state counts are one pass without rows too.
        page, total = ctx.port.group_page(
            name,
            state=states,
            owner=owner,
            contains=needle,
            sort=sort or "group",
            descending=order == "desc",
            offset=offset,
            limit=limit,
            now=ctx.now,
        )
        counts = ctx.port.group_state_counts(name)
        # C10: the node holding these groups (this one: a group is only ever
        # in the queue of the node it is bound to); null on a single node
        node = ctx.port.cluster_node()
        for g in page:
            g["node"] = node
        return json_response(
            {
                "queue": name,
                "groups": page,
                "total": total,
                "offset": offset,
                "limit": limit,
                "states": counts,
            }
        )

    def list_bindings(ctx: Context, request: Request, params: dict[str, str]) -> Response:
        """Where a queue's groups live across the cluster, as this node knows
        (C10): on the node a producer sends to, that is every group it routed."""
        name = params["name"]
        _classic(ctx, state, name)
        bindings = ctx.port.cluster_bindings(name)
        if bindings is None:
            raise NotFound(NOT_A_CLUSTER_NODE)
        node = request.query.get("node") or None
        needle = request.query.get("q") or None
        limit = query_int(request, "limit", GROUPS_LIMIT_DEFAULT, maximum=GROUPS_LIMIT_MAX)
        offset = query_int(request, "offset", 0)
        nodes: dict[str, int] = {}
        matching: list[str] = []
        for group, holder in bindings.items():
            nodes[holder] = nodes.get(holder, 0) + 1
            if (node is None or holder == node) and (needle is None or needle in group):
                matching.append(group)
        # one page without sorting them all (a producer's node may know 100k+)
        page = heapq.nsmallest(offset + limit, matching)[offset:]
        return json_response(
            {
                "queue": name,
                "node": ctx.port.cluster_node(),
                "bindings": [{"group": g, "node": bindings[g]} for g in page],
                "total": len(matching),
                "offset": offset,
                "limit": limit,
                "nodes": dict(sorted(nodes.items())),
            }
        )

    def browse(ctx: Context, request: Request, params: dict[str, str]) -> Response:
        name = params["name"]
        _classic(ctx, state, name)
        limit = query_int(request, "limit", BROWSE_LIMIT_DEFAULT, maximum=BROWSE_LIMIT_MAX)
        messages = [_message(m) for m in ctx.port.browse(name, limit)]
        return json_response({"queue": name, "messages": messages, "count": len(messages)})

    def list_connections(ctx: Context, request: Request, params: dict[str, str]) -> Response:
        return json_response({"connections": _connections(ctx)})

    def get_connection(ctx: Context, request: Request, params: dict[str, str]) -> Response:
        conn_id = _conn_id(params)
        conn = _find_connection(ctx, conn_id)
        conn["consumers"] = [c for c in _consumers(ctx) if c["connection"] == conn_id]
        return json_response(conn)

    def list_consumers(ctx: Context, request: Request, params: dict[str, str]) -> Response:
        queue = request.query.get("queue") or None
        consumers = [
            c
            for c in _consumers(ctx)
            if (queue is None or c["queue"] == queue)
            and allowed(ctx, request, "browse", c["queue"])
        ]
        return json_response({"consumers": consumers})

    def history(ctx: Context, request: Request, params: dict[str, str]) -> Response:
        queues = _queue_infos(ctx, state)
        return json_response(
            {
                "interval_s": state.rates.history_interval,
                "points": list(state.rates.history),
                "queues": {
                    q["name"]: state.rates.depth_history(q["name"])
                    for q in queues
                    if allowed(ctx, request, "browse", q["name"])
                },
            }
        )

    # --- operations -----------------------------------------------------------

    def create_queue(ctx: Context, request: Request, params: dict[str, str]) -> Response:
        body = read_json(request)
        if not isinstance(body, dict):
            raise BadRequest("request body must be a JSON object", "body")
        for key in body:
            if key not in ("name", "settings"):
                raise BadRequest(f"unknown field {key!r}; expected 'name' and 'settings'", key)
        name = body.get("name")
        if not isinstance(name, str):
            raise BadRequest("'name' is required and must be a string", "name")
        if not QUEUE_NAME_RE.fullmatch(name):
            raise BadRequest(
                f"'name' {name!r} is not a valid queue name (letters, digits, '_', '.', ':', '-'; "
                "at most 200 characters)",
                "name",
            )
        authorize(ctx, request, "manage", name)
        settings = body.get("settings", {})
        if not isinstance(settings, dict):
            raise BadRequest("'settings' must be a JSON object of kebab-case settings", "settings")
        checked = validate_settings(settings)
        if ctx.security is not None:  # dead letters etc. go to the address a setting names
            ctx.security.check_named_addresses(request.user, settings)
        ctx.port.create_queue(name, checked, ctx.now)
        return json_response(_with_rates(ctx, state, _find_queue(ctx, state, name)), 201)

    def delete_queue(ctx: Context, request: Request, params: dict[str, str]) -> Response:
        name = params["name"]
        _find_queue(ctx, state, name)
        ctx.port.delete_queue(name, ctx.now)
        return json_response({"deleted": name})

    def purge(ctx: Context, request: Request, params: dict[str, str]) -> Response:
        name = params["name"]
        _classic(ctx, state, name)
        n = ctx.port.purge_queue(name, ctx.now)
        return json_response({"queue": name, "purged": int(n or 0)})

    def reset_groups(ctx: Context, request: Request, params: dict[str, str]) -> Response:
        name = params["name"]
        _classic(ctx, state, name)
        body = read_json(request)
        if not isinstance(body, dict):
            raise BadRequest('request body must be a JSON object: {} or {"group": ...}', "body")
        for key in body:
            if key != "group":
                raise BadRequest(f"unknown field {key!r}; expected only 'group'", key)
        group = body.get("group")
        if group is not None and not isinstance(group, str):
            raise BadRequest("'group' must be a string (omit it to reset every group)", "group")
        n = ctx.port.reset_groups(name, group, ctx.now)
        return json_response({"queue": name, "group": group, "reset": int(n or 0)})

    def park(ctx: Context, request: Request, params: dict[str, str]) -> Response:
        name, group = params["name"], params["group"]
        _classic(ctx, state, name)
        ctx.port.park_group(name, group, ctx.now)
        return json_response(_group_state(ctx, name, group))

    def resume(ctx: Context, request: Request, params: dict[str, str]) -> Response:
        name, group = params["name"], params["group"]
        _classic(ctx, state, name)
        ctx.port.resume_group(name, group, ctx.now)
        return json_response(_group_state(ctx, name, group))

    def close_connection(ctx: Context, request: Request, params: dict[str, str]) -> Response:
        conn_id = _conn_id(params)
        _find_connection(ctx, conn_id)
        reason = (
            f"connection closed by operator {request.user}"
            if request.user
            else ("connection closed by an operator")
        )
        ctx.port.close_connection(conn_id, reason, ctx.now)
        return json_response({"closed": conn_id})

    return {name: fn for name, fn in locals().items() if callable(fn) and name != "state"}


def _group_state(ctx: Context, queue: str, group: str) -> dict[str, Any]:
    """Park/resume answer: the state of the group, or of its bucket on a
    bucketed queue (``bucket`` names it; the request may name either)."""
    row = ctx.port.group_info(queue, group, ctx.now)
    out: dict[str, Any] = {
        "queue": queue,
        "group": group,
        "state": row["state"] if row is not None else "ready",
    }
    if row is not None and row["group"] != group:
        out["bucket"] = row["group"]
    return out


def _message(m: MessageView) -> dict[str, Any]:
    raw = m.body
    paged = raw is None  # body paged out to the journal: shown as size only
    body = raw or b""
    try:
        text: str = body.decode("utf-8")
        encoding = "text"
    except UnicodeDecodeError:
        text = base64.b64encode(body).decode("ascii")
        encoding = "base64"
    count = int(m.delivery_count or 0)
    return {
        "id": m.id,
        "destination": m.destination,
        "headers": dict(m.headers),
        "body": text,
        "body_encoding": encoding,
        "paged": paged,
        "size": int(m.size) if paged else len(body),
        "group": m.group,
        "group_seq": m.group_seq,
        "persistent": bool(m.persistent),
        "priority": m.priority,
        "expires": m.expires or None,
        "timestamp": m.timestamp,
        "delivery_count": count,
        "redelivered": count > 0,
    }


def validate_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """Check JSON types and bounds strictly (no "true" for true); names the field."""
    table = setting_schema()
    out: dict[str, Any] = {}
    for key, value in settings.items():
        spec = table.get(key)
        field = f"settings.{key}"
        if spec is None:
            raise InvalidSetting(key, f"unknown queue setting {key!r}")
        kinds = spec["type"] if isinstance(spec["type"], list) else [spec["type"]]
        if value is None:
            if "null" not in kinds:
                raise BadRequest(f"setting {key!r} must not be null", field)
            out[key] = None
            continue
        if "boolean" in kinds:
            if not isinstance(value, bool):
                raise BadRequest(f"setting {key!r} must be true or false, not {value!r}", field)
        elif "integer" in kinds:
            if isinstance(value, float) and value.is_integer():
                value = int(value)  # JSON Schema: 3.0 is an integer
            if isinstance(value, bool) or not isinstance(value, int):
                raise BadRequest(f"setting {key!r} must be an integer, not {value!r}", field)
            lo, hi = spec.get("minimum"), spec.get("maximum")
            if (lo is not None and value < lo) or (hi is not None and value > hi):
                raise BadRequest(
                    f"setting {key!r} must be between {lo} and {hi}, not {value}", field
                )
        elif "string" in kinds:
            if not isinstance(value, str):
                raise BadRequest(f"setting {key!r} must be a string, not {value!r}", field)
            if "enum" in spec and value not in spec["enum"]:
                raise BadRequest(
                    f"setting {key!r} must be one of {', '.join(spec['enum'])}, not {value!r}",
                    field,
                )
            if len(value) < spec.get("minLength", 0) or len(value) > spec.get("maxLength", 1 << 30):
                raise BadRequest(f"setting {key!r} has a bad length", field)
            if "pattern" in spec and not re.fullmatch(spec["pattern"][1:-1], value):
                raise BadRequest(f"setting {key!r}: {value!r} is not a valid queue name", field)
        out[key] = value
    return out


# --- registration --------------------------------------------------------------


def register(router: Router, state: ManagementState) -> None:
    h = make_handlers(state)
    add = router.add
    add("GET", "/api/broker", h["get_broker"], auth="browse")
    add("GET", "/api/addresses", h["get_addresses"], auth="user")
    add("GET", "/api/history", h["history"], auth="browse")
    add("GET", "/api/cluster", h["get_cluster"], auth="browse")
    add("POST", "/api/cluster/nodes/{node}/forget", h["forget_node"], auth="manage")
    add("POST", "/api/cluster/queues/{queue}/rebalance", h["rebalance_queue"], auth="manage")
    add("GET", "/api/queues", h["list_queues"], auth="user")
    add("POST", "/api/queues", h["create_queue"], auth="user")  # manage on the body's name
    add("GET", "/api/queues/{name}", h["get_queue"], auth="browse", address_param="name")
    add("DELETE", "/api/queues/{name}", h["delete_queue"], auth="manage", address_param="name")
    add("POST", "/api/queues/{name}/purge", h["purge"], auth="manage", address_param="name")
    add("GET", "/api/queues/{name}/groups", h["list_groups"], auth="browse", address_param="name")
    add(
        "POST",
        "/api/queues/{name}/groups/reset",
        h["reset_groups"],
        auth="manage",
        address_param="name",
    )
    add(
        "POST",
        "/api/queues/{name}/groups/{group}/park",
        h["park"],
        auth="manage",
        address_param="name",
    )
    add(
        "POST",
        "/api/queues/{name}/groups/{group}/resume",
        h["resume"],
        auth="manage",
        address_param="name",
    )
    add(
        "GET",
        "/api/queues/{name}/bindings",
        h["list_bindings"],
        auth="browse",
        address_param="name",
    )
    add("GET", "/api/queues/{name}/messages", h["browse"], auth="browse", address_param="name")
    add("GET", "/api/connections", h["list_connections"], auth="browse")
    add("GET", "/api/connections/{id}", h["get_connection"], auth="browse")
    add("DELETE", "/api/connections/{id}", h["close_connection"], auth="manage")
    add("GET", "/api/consumers", h["list_consumers"], auth="user")


__all__ = ["BROKER_WIDE", "BrokerError", "register", "setting_schema", "validate_settings"]
