"""Read-only views of the core for management: queues, groups, consumers, connections.

Nothing here changes state, and nothing in the delivery path imports this
module.
"""

from __future__ import annotations

import heapq
import itertools
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from shoal.broker.model import F_PARKED, F_RELEASE, PENDING, STATE_ORDER, Group
from shoal.broker.queue import Queue
from shoal.broker.settings import settings_to_kebab
from shoal.errors import NotFound

if TYPE_CHECKING:
    from collections.abc import Iterable

    from shoal.broker.core import Broker
    from shoal.broker.model import Message


GROUP_SORT_KEYS = ("group", "owner", "backlog", "in_flight", "oldest_age_ms", "state", "reassigned")


def owner_matches(cid: str, wanted: str) -> bool:
    """Owner filter: a consumer id 'conn/sub', or a connection id alone."""
    return cid == wanted or ("/" not in wanted and cid.split("/", 1)[0] == wanted)


def oldest_pending_ts(q: Queue) -> int | None:
    if not q.depth:
        return None
    best: int | None = None
    best_id = 1 << 62
    for g in q.all_fifos():
        if not g.backlog:
            continue
        m = g.head
        while m is not None and m.state != PENDING:
            m = m.link
        if m is not None and m.id < best_id:
            best_id = m.id
            best = m.timestamp
    return best


def queue_info(q: Queue, now_ms: int) -> dict[str, Any]:
    oldest = oldest_pending_ts(q)
    return {
        "name": q.name,
        "address": q.address,
        "routing": q.routing,
        "type": q.kind,
        "durable": q.durable,
        "temporary": q.temp_owner is not None,
        "subscription": q.subscription,
        "settings": settings_to_kebab(q.settings),
        "depth": q.depth,
        "in_flight": q.in_flight,
        "bytes": q.bytes,
        "paged": q.paged,
        "paged_bytes": q.paged_bytes,
        "consumers": len(q.consumers),
        "enqueued": q.enqueued,
        "delivered": q.delivered,
        "acked": q.acked,
        "redelivered": q.redelivered,
        "dead_lettered": q.dead_lettered,
        "expired": q.expired,
        "oldest_age_ms": max(0, now_ms - oldest) if oldest is not None else None,
        "groups": len(q.groups),
        "dispatch_held": q.dispatch_held,
    }


def _oldest_in_flight(q: Queue, groups: list[Group] | None = None) -> dict[int, int]:
    """id(group) -> timestamp of its oldest in-flight message.

    For ``groups`` only the connections of their holders are scanned
    (G2: one holder per group), else every in-flight message of the queue.
    """
    if groups is None:
        out: dict[int, int] = {}
        for m in q.in_flight_messages():
            g = m.grp
            if g is not None:
                t = out.get(id(g))
                if t is None or m.timestamp < t:
                    out[id(g)] = m.timestamp
        return out
    wanted = {id(g) for g in groups if g.in_flight}
    conns = {id(g.holder.conn): g.holder.conn for g in groups if g.holder is not None}
    out = {}
    get = out.get
    for conn in conns.values():
        msgs: Iterable[Message] = conn.acks.values()
        if conn.txs:
            msgs = itertools.chain(msgs, *((*tx.acks, *tx.nacks) for tx in conn.txs.values()))
        for m in msgs:
            g = m.grp
            if g is not None and id(g) in wanted:
                t = get(id(g))
                if t is None or m.timestamp < t:
                    out[id(g)] = m.timestamp
    return out


def _oldest_ts(g: Group, in_flight_ts: dict[int, int]) -> int | None:
    ts = in_flight_ts.get(id(g)) if g.in_flight else None
    m = g.head
    while m is not None and m.state != PENDING:
        m = m.link
    if m is not None and (ts is None or m.timestamp < ts):
        ts = m.timestamp
    return ts


def group_rows(q: Queue, groups: Iterable[Group], now_ms: int) -> list[dict[str, Any]]:
    """The G15 management row of each group."""
    groups = list(groups)
    in_flight_ts = _oldest_in_flight(q, groups) if any(g.in_flight for g in groups) else {}
    out = []
    for g in groups:
        ts = _oldest_ts(g, in_flight_ts)
        out.append(
            {
                "group": g.name,
                "owner": g.owner.cid if g.owner is not None else None,
                "backlog": g.backlog,
                "in_flight": g.in_flight,
                "oldest_age_ms": max(0, now_ms - ts) if ts is not None else None,
                "state": g.state(),
                "reassigned": g.reassigned,
            }
        )
    return out


def group_infos(q: Queue, now_ms: int, limit: int | None = None) -> list[dict[str, Any]]:
    groups: Iterable[Group] = q.groups.values()
    if limit is not None:
        groups = itertools.islice(groups, max(0, limit))
    return group_rows(q, groups, now_ms)


def group_state_counts(q: Queue) -> dict[str, int]:
    """{state: groups}: one tight pass, no per-group objects."""
    parked = draining = owned = 0
    for g in q.groups.values():
        f = g.flags
        if f & F_PARKED:
            parked += 1
        elif g.in_flight and (f & F_RELEASE or g.holder is not g.owner):
            draining += 1
        elif g.owner is not None:
            owned += 1
    ready = len(q.groups) - parked - draining - owned
    return {"ready": ready, "owned": owned, "draining": draining, "parked": parked}


def group_page(
    q: Queue,
    now_ms: int,
    *,
    states: frozenset[str] | None = None,
    owner: str | None = None,
    contains: str | None = None,
    sort: str = "group",
    descending: bool = False,
    offset: int = 0,
    limit: int = 100,
) -> tuple[list[dict[str, Any]], int]:
    """Filter, sort and page the groups; rows are built for the page only.

    Filtering is one pass over the groups with the state computed inline;
    a page near the top of the order is taken with a heap
    (``heapq.nsmallest`` / ``nlargest``), otherwise by sorting. Ties in
    the sort key fall back to the group name; nulls sort first.
    """
    table = q.groups
    named = q.groups.buckets < 0  # keys are group ids, else bucket numbers ('#N')
    cands: Any
    if states is None and owner is None and contains is None:
        cands = table.values()
    else:
        cands = []
        add = cands.append
        owner_ok: dict[Any, bool] = {}
        for g in table.values():
            if states is not None:
                f = g.flags
                if f & F_PARKED:
                    st = "parked"
                elif g.in_flight and (f & F_RELEASE or g.holder is not g.owner):
                    st = "draining"
                elif g.owner is not None:
                    st = "owned"
                else:
                    st = "ready"
                if st not in states:
                    continue
            if owner is not None:
                o = g.owner
                if o is None:
                    if owner != "none":
                        continue
                elif owner == "none":
                    continue
                else:
                    ok = owner_ok.get(o)
                    if ok is None:
                        ok = owner_ok[o] = owner_matches(o.cid, owner)
                    if not ok:
                        continue
            if contains is not None and contains not in (g.key if named else f"#{g.key}"):
                continue
            add(g)
    total = len(cands)
    want = offset + limit
    if limit <= 0 or offset >= total:
        return [], total
    key = _sort_key(q, sort, named, now_ms)
    if want * 8 < total:
        # Keys are unique (the name breaks ties), so the scan order is
        # free: walking newest first for a descending order keeps the
        # heap quiet when groups were created in key order (ids with a
        # counter), which would otherwise replace the heap top each step.
        if descending:
            page = heapq.nlargest(want, reversed(cands), key=key)[offset:]
        else:
            page = heapq.nsmallest(want, cands, key=key)[offset:]
    else:
        page = sorted(cands, key=key, reverse=descending)[offset:want]
    return group_rows(q, page, now_ms), total


def _sort_key(q: Queue, sort: str, named: bool, now_ms: int) -> Any:
    def name(g: Group) -> str:
        return g.key if named else f"#{g.key}"

    if sort == "group":
        return attrgetter("key") if named else name
    if named:  # the hot cases without a call per group for the name
        if sort == "backlog":
            return lambda g: (g.backlog, g.key)
        if sort == "in_flight":
            return lambda g: (g.in_flight, g.key)
        if sort == "reassigned":
            return lambda g: (g.binds - 1 if g.binds > 1 else 0, g.key)
    if sort == "backlog":
        return lambda g: (g.backlog, name(g))
    if sort == "in_flight":
        return lambda g: (g.in_flight, name(g))
    if sort == "reassigned":
        return lambda g: (g.binds - 1 if g.binds > 1 else 0, name(g))
    if sort == "state":
        return lambda g: (STATE_ORDER[g.state()], name(g))
    if sort == "owner":
        return lambda g: (False, "", name(g)) if g.owner is None else (True, g.owner.cid, name(g))
    if sort == "oldest_age_ms":
        in_flight_ts = _oldest_in_flight(q)
        oldest = _oldest_ts

        def age_key(g: Group) -> tuple[bool, int, str]:
            ts = oldest(g, in_flight_ts)
            if ts is None:
                return (False, 0, name(g))
            return (True, max(0, now_ms - ts), name(g))

        return age_key
    raise ValueError(f"cannot sort groups by {sort!r}; one of {', '.join(GROUP_SORT_KEYS)}")


class Views:
    """The broker's read-only views (``Broker.queue_infos`` and the rest)."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def queue_infos(self) -> list[dict[str, Any]]:
        out = []
        for q in self.broker.queues.values():
            if q.__class__ is Queue:
                out.append(queue_info(q, self.broker.now_ms))
            else:
                info: dict[str, Any] = {
                    "name": q.name,
                    "address": q.name,
                    "routing": "anycast",
                    "type": "log",
                    "settings": settings_to_kebab(q.settings),
                }
                extra = getattr(q, "info", None)
                if callable(extra):
                    info.update(extra())
                out.append(info)
        return out

    def group_infos(
        self, queue: str, now: float | None = None, *, limit: int | None = None
    ) -> list[dict[str, Any]]:
        q = self.broker.addresses.classic(queue)
        now_ms = self.broker.now_ms if now is None else int(now * 1000)
        return group_infos(q, now_ms, limit)

    def group_state_counts(self, queue: str) -> dict[str, int]:
        """{state: number of groups} without building a dict per group (metrics)."""
        return group_state_counts(self.broker.addresses.classic(queue))

    def group_info(self, queue: str, group: str, now: float | None = None) -> dict[str, Any] | None:
        """The row of the group (or, on a bucketed queue, of the bucket) that
        ``group`` names: a group id or a bucket label ``#N``. None when the
        queue tracks nothing for it (an idle group that is not parked)."""
        q = self.broker.addresses.classic(queue)
        if q.groups.buckets == 0:
            raise NotFound(f"queue {q.name!r} does not group messages (group-buckets 0)")
        g = q.groups.get(q.groups.key_for_name(group))
        if g is None:
            return None
        now_ms = self.broker.now_ms if now is None else int(now * 1000)
        return group_rows(q, [g], now_ms)[0]

    def durable_subscription_topic(self, client_id: str | None, name: str) -> str | None:
        """The topic of the durable subscription ``name`` of ``client_id``, if it exists
        (an AMQP client resumes or removes one by its link name alone)."""
        for q in self.broker.queues.values():
            if (
                isinstance(q, Queue)
                and q.subscription == name
                and q.client_id == client_id
                and not q.deleted
            ):
                return q.address
        return None

    def consumer_infos(self) -> list[dict[str, Any]]:
        out = []
        for conn in self.broker.connections.values():
            for c in conn.subs.values():
                out.append(
                    {
                        "id": c.cid,
                        "connection": conn.id,
                        "subscription": c.sub_id,
                        "queue": c.queue.name,
                        "destination": c.destination,
                        "ack_mode": c.ack_mode,
                        "prefetch": c.prefetch,
                        "window_size": c.window_size,
                        "exclusive": c.exclusive,
                        "selector": c.selector.text if c.selector is not None else None,
                        "active": c.active,
                        "ready": c.ready,
                        "in_flight": c.in_flight,
                        "delivered": c.delivered,
                        "acked": c.acked,
                        "nacked": c.nacked,
                        "groups": c.nbound,
                        "since": c.since,
                    }
                )
        return out

    def connection_infos(self) -> list[dict[str, Any]]:
        return [
            {
                "id": conn.id,
                "user": conn.user,
                "client_id": conn.client_id,
                "writable": conn.writable,
                "blocked": bool(conn.blocked_on),
                "subscriptions": len(conn.subs),
                "in_flight": len(conn.acks),
                "transactions": len(conn.txs),
                "sent": conn.sent,
                "temp_queues": sorted(conn.temps.values()),
                "since": conn.since,
            }
            for conn in self.broker.connections.values()
        ]

    def browse(self, queue: str, limit: int = 100) -> list[Message]:
        """Pending (not yet delivered) messages in queue order."""
        q = self.broker.addresses.classic(queue)
        return q.pending_messages(limit)

    def queue(self, name: str) -> Queue:
        """The classic queue object (tests, diagnostics)."""
        return self.broker.addresses.classic(name)
