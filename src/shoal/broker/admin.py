"""Admin commands: reset, park and resume groups; create, delete, purge queues.

Operator commands from the HTTP API and the CLI. Each takes an optional
``now`` and dispatches what it unblocked.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from shoal.broker.model import F_PARKED
from shoal.broker.settings import by_config_name, coerce_settings
from shoal.errors import Conflict, InvalidDestination, NotFound

if TYPE_CHECKING:
    from shoal.broker.core import Broker
    from shoal.broker.queue import Queue


def park(q: Queue, group: str, *, record: bool) -> None:
    """Park a group (or its bucket) of ``q``: nothing of it is delivered until resumed."""
    if q.groups.buckets == 0:
        raise NotFound(f"queue {q.name!r} does not group messages (group-buckets 0)")
    key = q.groups.key_for_name(group)
    g = q.groups.get(key)
    if g is None:
        g = q.groups.new_group(key)
    q.park(g, record=record)


class Admin:
    """Operator commands on the broker's queues and groups."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def reset_groups(self, queue: str, group: str | None = None, now: float | None = None) -> int:
        """Free one or all groups; a group with messages in flight moves once drained.

        Returns how many bound groups were freed. Naming rules, shared with
        park/resume: ``group`` is a group id or, on a bucketed queue, a bucket
        label ``#N`` (an id means its bucket); a group the queue does not
        track is idle, unbound and not parked, so resetting it does nothing
        (0). A reset group stays listed, unbound, with its ``reassigned``
        count, until it is evicted like any idle group.
        """
        q = self.broker.addresses.classic(queue)
        if now is not None:
            self.broker.set_clock(now)
        if group is not None:
            if q.groups.buckets == 0:
                raise NotFound(f"queue {q.name!r} does not group messages (group-buckets 0)")
            g = q.groups.get(q.groups.key_for_name(group))
            n = int(q.reset_group(g, keep=True)) if g is not None else 0
        else:
            n = 0
            for g in list(q.groups.values()):
                n += q.reset_group(g, keep=True)
        self.broker.dispatch_touched()
        return n

    def park_group(self, queue: str, group: str, now: float | None = None) -> None:
        """Park a group (or its bucket): nothing of it is delivered until resumed.
        A group the queue does not track yet is created parked, so that its
        future messages wait."""
        q = self.broker.addresses.classic(queue)
        if now is not None:
            self.broker.set_clock(now)
        park(q, group, record=True)

    def resume_group(self, queue: str, group: str, now: float | None = None) -> None:
        """Resume a parked group (or bucket); Conflict if it is not parked
        (an untracked group is not parked either)."""
        q = self.broker.addresses.classic(queue)
        if now is not None:
            self.broker.set_clock(now)
        if q.groups.buckets == 0:
            raise NotFound(f"queue {q.name!r} does not group messages (group-buckets 0)")
        g = q.groups.get(q.groups.key_for_name(group))
        if g is None or not g.flags & F_PARKED:
            raise Conflict(f"group {group!r} of queue {queue!r} is not parked")
        q.resume(g)
        self.broker.dispatch_touched()

    def create_queue(self, name: str, settings: dict[str, Any], now: float | None = None) -> None:
        if now is not None:
            self.broker.set_clock(now)
        if name in self.broker.queues:
            raise Conflict(f"queue {name!r} already exists")
        if not name or "?" in name or name.startswith("/"):
            raise InvalidDestination(f"invalid queue name {name!r}")
        raw = dict(settings)
        address = raw.pop("address", None)
        routing = raw.pop("routing", "anycast")
        if routing not in ("anycast", "multicast"):
            raise InvalidDestination(f"routing must be anycast or multicast, not {routing!r}")
        own = by_config_name(coerce_settings(raw))
        self.broker.addresses.make_queue(name, own, address=address or name, routing=routing)
        self.broker.dispatch_touched()

    def delete_queue(self, name: str, now: float | None = None) -> None:
        if now is not None:
            self.broker.set_clock(now)
        q = self.broker.queues.get(name)
        if q is None:
            raise NotFound(f"no queue {name!r}")
        self.broker.addresses.delete_queue(q, record=getattr(q, "durable", True))
        self.broker.dispatch_touched()

    def purge_queue(self, name: str, now: float | None = None) -> int:
        if now is not None:
            self.broker.set_clock(now)
        q = self.broker.addresses.classic(name)
        n = q.purge()
        self.broker.dispatch_touched()
        return n
