"""The replay fold: records in journal order -> ``Recovered``.

Shared by :class:`~shoal.store.memory.MemoryStore` and the journal (which
also runs it while writing, with message locations as values, to know which
segments still hold live messages). The rules are in ``docs/journal.md``,
section "The replay fold".

The fold is generic over what it keeps per live message (``value``): the
``MessageStored`` itself when recovering, a location when the journal writer
tracks liveness. Hooks tell the owner when a message enters, leaves, or is
touched by a later record (``DeliveryCounted``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from shoal.records import (
    DeliveryCounted,
    GroupBound,
    GroupParked,
    GroupResumed,
    LogCommitted,
    MessageRemoved,
    MessageStored,
    QueueDeclared,
    QueueDeleted,
    Record,
    Recovered,
    SinkBatchPublished,
)

Hook = Callable[[str, int, Any], None]

_MISSING = object()


def queue_to_dict(q: QueueDeclared) -> dict[str, Any]:
    return {
        "name": q.name,
        "address": q.address,
        "routing": q.routing,
        "settings": q.settings,
        "subscription": q.subscription,
        "client_id": q.client_id,
    }


def queue_from_dict(d: dict[str, Any]) -> QueueDeclared:
    return QueueDeclared(
        name=d["name"],
        address=d["address"],
        routing=d["routing"],
        settings=dict(d.get("settings") or {}),
        subscription=d.get("subscription"),
        client_id=d.get("client_id"),
    )


class Replay:
    """Folds records into the state ``Store.open()`` returns."""

    __slots__ = (
        "queues",
        "messages",
        "counts",
        "parked",
        "log_commits",
        "sink_batches",
        "bindings",
        "max_id",
        "log_index",
        "on_store",
        "on_drop",
        "on_touch",
        "_handlers",
    )

    def __init__(
        self,
        *,
        on_store: Hook | None = None,
        on_drop: Hook | None = None,
        on_touch: Hook | None = None,
    ) -> None:
        self.queues: dict[str, QueueDeclared] = {}
        # queue -> {id: value}; dict order is the original store order.
        self.messages: dict[str, dict[int, Any]] = {}
        self.counts: dict[tuple[str, int], int] = {}
        self.parked: set[tuple[str, str]] = set()
        self.log_commits: dict[tuple[str, int], int] = {}
        self.sink_batches: dict[str, int] = {}
        self.bindings: dict[tuple[str, str], str] = {}
        self.max_id = 0
        # (queue, bucket) -> deque of (offset, id) in store order (log queues only)
        self.log_index: dict[tuple[str, int], deque[tuple[int, int]]] = {}
        self.on_store = on_store
        self.on_drop = on_drop
        self.on_touch = on_touch
        self._handlers: dict[type, Callable[[Any, Any], None]] = {
            MessageStored: self.stored,
            MessageRemoved: self._removed,
            DeliveryCounted: self._counted,
            QueueDeclared: self._declared,
            QueueDeleted: self._deleted,
            GroupParked: self._parked,
            GroupResumed: self._resumed,
            LogCommitted: self._committed,
            SinkBatchPublished: self._sink,
            GroupBound: self._bound,
        }

    # -- applying ------------------------------------------------------------

    def apply(self, record: Record, value: Any = _MISSING) -> None:
        """Apply one record; ``value`` is what to keep for a MessageStored."""
        self._handlers[type(record)](record, record if value is _MISSING else value)

    def apply_all(self, records: Iterable[Record]) -> None:
        handlers = self._handlers
        for r in records:
            handlers[type(r)](r, r)

    def stored(self, m: MessageStored, value: Any) -> None:
        q = m.queue
        mid = m.id
        if mid > self.max_id:
            self.max_id = mid
        if m.bucket >= 0:
            key = (q, m.bucket)
            c = self.log_commits.get(key)
            if c is not None and m.offset < c:
                return  # already committed: dead on arrival
            idx = self.log_index.get(key)
            if idx is None:
                idx = self.log_index[key] = deque()
            idx.append((m.offset, mid))
        d = self.messages.get(q)
        if d is None:
            d = self.messages[q] = {}
        elif mid in d:
            return  # duplicate of a live message: the first one stands
        d[mid] = value
        if self.on_store is not None:
            self.on_store(q, mid, value)

    def remove(self, queue: str, mid: int) -> None:
        d = self.messages.get(queue)
        if d is None:
            return
        v = d.pop(mid, _MISSING)
        if v is _MISSING:
            return
        if self.counts:
            self.counts.pop((queue, mid), None)
        if self.on_drop is not None:
            self.on_drop(queue, mid, v)

    def _removed(self, r: MessageRemoved, _v: Any) -> None:
        self.remove(r.queue, r.id)

    def _counted(self, r: DeliveryCounted, _v: Any) -> None:
        d = self.messages.get(r.queue)
        if d is None:
            return
        v = d.get(r.id, _MISSING)
        if v is _MISSING:
            return
        self.counts[(r.queue, r.id)] = r.count
        if self.on_touch is not None:
            self.on_touch(r.queue, r.id, v)

    def _declared(self, r: QueueDeclared, _v: Any) -> None:
        self.queues[r.name] = r

    def _deleted(self, r: QueueDeleted, _v: Any) -> None:
        self.queues.pop(r.name, None)
        self.drop_queue(r.name)

    def drop_queue(self, name: str) -> None:
        """Drop a deleted queue's messages and per-queue state."""
        msgs = self.messages.pop(name, None)
        if msgs:
            if self.counts:
                for mid in msgs:
                    self.counts.pop((name, mid), None)
            if self.on_drop is not None:
                for mid, v in msgs.items():
                    self.on_drop(name, mid, v)
        self.parked = {p for p in self.parked if p[0] != name}
        for key in [k for k in self.log_commits if k[0] == name]:
            del self.log_commits[key]
        for key in [k for k in self.log_index if k[0] == name]:
            del self.log_index[key]

    def _parked(self, r: GroupParked, _v: Any) -> None:
        self.parked.add((r.queue, r.group))

    def _resumed(self, r: GroupResumed, _v: Any) -> None:
        self.parked.discard((r.queue, r.group))

    def _committed(self, r: LogCommitted, _v: Any) -> None:
        self.commit(r.queue, r.bucket, r.offset)

    def commit(self, queue: str, bucket: int, offset: int) -> None:
        key = (queue, bucket)
        prev = self.log_commits.get(key)
        if prev is not None and offset <= prev:
            return
        self.log_commits[key] = offset
        idx = self.log_index.get(key)
        while idx and idx[0][0] < offset:
            _, mid = idx.popleft()
            self.remove(queue, mid)

    def _sink(self, r: SinkBatchPublished, _v: Any) -> None:
        prev = self.sink_batches.get(r.sink_id)
        if prev is None or r.batch_id > prev:
            self.sink_batches[r.sink_id] = r.batch_id

    def _bound(self, r: GroupBound, _v: Any) -> None:
        if r.node:
            self.bindings[(r.queue, r.group)] = r.node
        else:
            self.bindings.pop((r.queue, r.group), None)

    # -- snapshots of the small state ----------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """The small state (everything but messages) as JSON-able data."""
        return {
            "queues": [queue_to_dict(q) for q in self.queues.values()],
            "parked": sorted([list(p) for p in self.parked]),
            "log_commits": [[q, b, o] for (q, b), o in self.log_commits.items()],
            "sink_batches": dict(self.sink_batches),
            "bindings": [[q, g, n] for (q, g), n in self.bindings.items()],
            "next_message_id": self.max_id + 1,
        }

    def load_snapshot(self, snap: dict[str, Any]) -> None:
        """Replace the small state with a snapshot's (see docs/journal.md)."""
        queues = {d["name"]: queue_from_dict(d) for d in snap.get("queues", [])}
        for name in list(self.queues):
            if name not in queues:  # deleted in a segment that is gone
                self.drop_queue(name)
        self.queues = queues
        self.parked = {(q, g) for q, g in snap.get("parked", [])}
        commits = [(q, int(b), int(o)) for q, b, o in snap.get("log_commits", [])]
        for q, b, o in commits:
            self.commit(q, b, o)
        self.log_commits = {(q, b): o for q, b, o in commits}
        self.sink_batches = {str(k): int(v) for k, v in snap.get("sink_batches", {}).items()}
        self.bindings = {(str(q), str(g)): str(n) for q, g, n in snap.get("bindings", [])}
        nxt = int(snap.get("next_message_id", 1))
        if nxt - 1 > self.max_id:
            self.max_id = nxt - 1

    # -- result --------------------------------------------------------------

    def result(self, notes: list[str] | None = None) -> Recovered:
        """``Recovered`` from a fold whose values are the MessageStored records."""
        counts_by_queue: dict[str, list[tuple[int, int]]] = {}
        for (q, mid), c in self.counts.items():
            counts_by_queue.setdefault(q, []).append((mid, c))
        commits_by_queue: dict[str, dict[int, int]] = {}
        for (q, b), o in self.log_commits.items():
            commits_by_queue.setdefault(q, {})[b] = o
        messages: dict[str, list[MessageStored]] = {}
        for q, d in self.messages.items():
            if not d:
                continue
            counted = counts_by_queue.get(q)
            if counted:
                for mid, c in counted:
                    m = d[mid]
                    if m.delivery_count != c:
                        d[mid] = replace(m, delivery_count=c)
            lst = list(d.values())
            commits = commits_by_queue.get(q)
            if commits:
                lst = [
                    m for m in lst if m.bucket < 0 or m.offset >= commits.get(m.bucket, m.offset)
                ]
            if lst:
                messages[q] = lst
        return Recovered(
            queues=dict(self.queues),
            messages=messages,
            parked=set(self.parked),
            log_commits=dict(self.log_commits),
            sink_batches=dict(self.sink_batches),
            bindings=dict(self.bindings),
            next_message_id=self.max_id + 1,
            notes=list(notes or []),
        )


def replay(records: Iterable[Record], notes: list[str] | None = None) -> Recovered:
    """Fold ``records`` (in order) into ``Recovered``."""
    r = Replay()
    r.apply_all(records)
    return r.result(notes)
