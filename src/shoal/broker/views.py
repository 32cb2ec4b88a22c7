"""Read-only views of the core for management: queues, groups, consumers, connections.

Nothing here changes state, and nothing in the delivery path imports this
module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from shoal.broker.queue import GROUP_STATES, Queue, settings_to_kebab
from shoal.errors import NotFound

if TYPE_CHECKING:
    from collections.abc import Iterable

    from shoal.broker.core import Broker
    from shoal.broker.message import Message


class ViewsMixin:
    __slots__ = ()

    def _classic(self: Broker, name: str) -> Queue:
        q = self.queues.get(name)
        if q is None or q.__class__ is not Queue:
            raise NotFound(f"no queue {name!r}")
        return q

    def queue_infos(self: Broker) -> list[dict[str, Any]]:
        out = []
        for q in self.queues.values():
            if q.__class__ is Queue:
                out.append(q.info(self.now_ms))
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
        self: Broker, queue: str, now: float | None = None, *, limit: int | None = None
    ) -> list[dict[str, Any]]:
        q = self._classic(queue)
        now_ms = self.now_ms if now is None else int(now * 1000)
        return q.group_infos(now_ms, limit)

    def group_state_counts(self: Broker, queue: str) -> dict[str, int]:
        """{state: number of groups} without building a dict per group (metrics)."""
        return self._classic(queue).group_state_counts()

    def group_page(
        self: Broker,
        queue: str,
        *,
        state: str | Iterable[str] | None = None,
        owner: str | None = None,
        contains: str | None = None,
        sort: str = "group",
        descending: bool = False,
        offset: int = 0,
        limit: int = 100,
        now: float | None = None,
    ) -> tuple[list[dict[str, Any]], int]:
        """One page of G15 group rows and the number of groups that match.

        ``state``: a state or several (``ready``, ``owned``, ``draining``,
        ``parked``); ``owner``: a consumer id ``conn/sub``, a connection id,
        or ``"none"`` for unowned groups; ``contains``: substring of the group
        name (``#N`` for buckets); ``sort``: ``group``, ``owner``,
        ``backlog``, ``in_flight``, ``oldest_age_ms``, ``state`` or
        ``reassigned`` (ties by group name, nulls first; ``descending``
        reverses the whole order). Rows are built for the page only.
        """
        q = self._classic(queue)
        now_ms = self.now_ms if now is None else int(now * 1000)
        states: frozenset[str] | None
        if state is None:
            states = None
        elif isinstance(state, str):
            states = frozenset((state,))
        else:
            states = frozenset(state)
        if states is not None and not states <= frozenset(GROUP_STATES):
            raise ValueError(f"group states are {', '.join(GROUP_STATES)}, not {sorted(states)}")
        return q.group_page(
            now_ms, states=states, owner=owner, contains=contains, sort=sort,
            descending=descending, offset=max(0, offset), limit=max(0, limit),
        )

    def group_info(self: Broker, queue: str, group: str, now: float | None = None) -> dict[str, Any] | None:
        """The row of the group (or, on a bucketed queue, of the bucket) that
        ``group`` names: a group id or a bucket label ``#N``. None when the
        queue tracks nothing for it (an idle group that is not parked)."""
        q = self._classic(queue)
        if q.buckets == 0:
            raise NotFound(f"queue {q.name!r} does not group messages (group-buckets 0)")
        g = q.groups.get(q.key_for_name(group))
        if g is None:
            return None
        now_ms = self.now_ms if now is None else int(now * 1000)
        return q.group_rows([g], now_ms)[0]

    def consumer_infos(self: Broker) -> list[dict[str, Any]]:
        out = []
        for conn in self._conns.values():
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
                        "active": c in c.queue.active,
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

    def connection_infos(self: Broker) -> list[dict[str, Any]]:
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
            for conn in self._conns.values()
        ]

    def browse(self: Broker, queue: str, limit: int = 100) -> list[Message]:
        """Pending (not yet delivered) messages in queue order."""
        q = self._classic(queue)
        return q.pending_messages(limit)

    def queue(self: Broker, name: str) -> Queue:
        """The classic queue object (tests, diagnostics)."""
        return self._classic(name)
