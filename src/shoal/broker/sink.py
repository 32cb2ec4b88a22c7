"""Exactly-once sink staging: rows wait in the broker until a batch commits.

Spark's sink protocol splits a micro-batch into tasks (``write`` on the
executors) and one driver-side ``commit(messages, batchId)``. A task may run
twice and a whole batch is replayed after a crash, so publishing from the
tasks would duplicate. Instead:

1. each task stages its rows under a fresh *handle* (:meth:`SinkStaging.stage`);
2. the driver's commit publishes every handle of the batch in one go
   (:meth:`SinkStaging.publish`), at most once per ``(sink_id, batch_id)``:
   the broker remembers the last published batch id of every sink (a Spark
   query id) and drops any batch at or below it;
3. ``abort`` discards the staged rows (:meth:`SinkStaging.discard`), and
   stagings nobody published or discarded are collected after a while
   (:meth:`SinkStaging.collect_orphans`).

Publishing a row means sending a message through the broker core with
``persistent:true``, in the same call that appends the
:class:`SinkBatchPublished` record, so the messages and the batch marker
reach the journal in one atomic append and one fsync.

Staged rows are NOT durable: they live in memory only. If the broker
restarts between ``write`` and ``commit``, the stagings are gone, the publish
is refused (Conflict naming the missing handles), the Spark query fails and,
restarted from its checkpoint, re-runs the batch: still exactly once. The
last published batch id per sink IS durable (``SinkBatchPublished`` in the
journal, restored from ``Recovered.sink_batches``).

Pure: no I/O and no clock; ``now`` is an argument.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import TYPE_CHECKING, Any, Protocol

from shoal.errors import Conflict
from shoal.records import Record, SinkBatchPublished

if TYPE_CHECKING:
    from shoal.broker.queue_context import RecordLog

# A row to publish: (group id or None, headers, body).
Row = tuple[str | None, dict[str, str], bytes]
# publish_fn(destination, group, headers, body) sends one message.
PublishFn = Callable[[str, str | None, dict[str, str], bytes], None]
# publish_many(destination, rows) sends all rows or none (raising), returns how
# many: len(rows), or 0 when it cannot take them in one go (publish_fn sends them)
PublishManyFn = Callable[[str, Sequence[Row]], int]

DEFAULT_ORPHAN_AGE = 600.0  # s: stagings older than this are collected


@dataclass(slots=True)
class Staged:
    destination: str
    rows: list[Row] = field(default_factory=list)
    created: float = 0.0
    updated: float = 0.0
    bytes: int = 0


class SinkStaging:
    """Staged rows per handle, and the last published batch id per sink."""

    def __init__(self, core: RecordLog, published: dict[str, int] | None = None) -> None:
        self.core = core  # SinkBatchPublished records go to its journal
        # sink id -> last published batch id; the core's own dict when it keeps one
        self.published: dict[str, int] = published if published is not None else {}
        self.staged: dict[str, Staged] = {}
        # (sink, batch) -> handles fully sent by a publish that failed part-way
        self._partial: dict[tuple[str, int], set[str]] = {}
        self.collected = 0  # orphaned stagings collected so far
        self.batches_published = 0
        self.batches_duplicate = 0
        self.rows_published = 0

    # ------------------------------------------------------------- staging

    def stage(self, handle: str, destination: str, rows: Iterable[Row], now: float) -> int:
        """Stage ``rows`` under ``handle``; returns how many rows it holds.

        Staging a handle again replaces its rows, so a retried request (the
        answer was lost, the client sent it again) cannot stage twice. A task
        that stages in several chunks uses one handle per chunk.
        """
        added = list(rows)
        self.staged[handle] = Staged(
            destination, added, created=now, updated=now, bytes=sum(len(r[2]) for r in added)
        )
        return len(added)

    def last_batch(self, sink_id: str) -> int | None:
        return self.published.get(sink_id)

    def publish(
        self,
        sink_id: str,
        batch_id: int,
        handles: Sequence[str],
        publish_fn: PublishFn,
        publish_many: PublishManyFn | None = None,
    ) -> dict[str, Any]:
        """Publish every row of ``handles`` once for ``(sink_id, batch_id)``.

        Returns ``{"status": "published" | "duplicate", "rows": n, ...}``.
        A batch id at or below the sink's last published one is a duplicate:
        its stagings are discarded and nothing is sent. A handle that is not
        staged (the broker restarted, or it was collected) refuses the whole
        batch with Conflict before anything is sent. If ``publish_fn`` fails
        part-way, the rows sent so far stay sent, the rest stays staged and
        the batch is not marked: retrying the same publish sends the rest.
        ``publish_many``, when given, is tried first for each handle's rows
        (all or nothing); the rows it does not take go through ``publish_fn``.
        """
        handles = list(dict.fromkeys(handles))  # each handle once, first position wins
        last = self.published.get(sink_id)
        if last is not None and batch_id <= last:
            self.discard(handles)
            self.batches_duplicate += 1
            return {"status": "duplicate", "rows": 0, "last_batch_id": last}
        done = self._partial.get((sink_id, batch_id), set())
        missing = [h for h in handles if h not in self.staged and h not in done]
        if missing:
            raise Conflict(
                f"sink {sink_id!r} batch {batch_id}: {len(missing)} staged handle(s) are gone "
                f"(broker restarted or stagings collected), e.g. {missing[0]!r}; "
                "re-run the batch"
            )
        n = 0
        for h in handles:
            if h in done:
                continue
            st = self.staged[h]
            dest = st.destination
            rows = st.rows
            i = 0
            try:
                if publish_many is not None:
                    i = publish_many(dest, rows)
                for group, headers, body in islice(rows, i, None):
                    publish_fn(dest, group, headers, body)
                    i += 1
            finally:
                # On a failure (e.g. a full queue with policy "fail") the rows
                # already sent stay sent (their records are journaled) and only
                # the rest stays staged: a retry of the commit sends the rest.
                n += i
                self.rows_published += i
                if i < len(rows):
                    del rows[:i]
                    st.bytes = sum(len(r[2]) for r in rows)
                    self._partial[(sink_id, batch_id)] = done
                else:
                    del self.staged[h]
                    done.add(h)
        self._partial.pop((sink_id, batch_id), None)
        self.published[sink_id] = batch_id
        self.core.records.append(SinkBatchPublished(sink_id, batch_id))
        self.batches_published += 1
        return {"status": "published", "rows": n, "last_batch_id": batch_id}

    def discard(self, handles: Iterable[str]) -> int:
        """Drop stagings (Spark's abort); unknown handles are ignored. Returns rows dropped."""
        n = 0
        for h in handles:
            st = self.staged.pop(h, None)
            if st is not None:
                n += len(st.rows)
        return n

    def collect_orphans(self, now: float, max_age: float = DEFAULT_ORPHAN_AGE) -> list[str]:
        """Drop stagings not touched for ``max_age`` seconds; returns their handles."""
        old = [h for h, st in self.staged.items() if now - st.updated > max_age]
        for h in old:
            del self.staged[h]
        self.collected += len(old)
        return old

    def info(self) -> dict[str, Any]:
        return {
            "sinks": {k: {"last_batch_id": v} for k, v in sorted(self.published.items())},
            "staged_handles": len(self.staged),
            "staged_rows": sum(len(st.rows) for st in self.staged.values()),
            "staged_bytes": sum(st.bytes for st in self.staged.values()),
            "collected": self.collected,
            "batches_published": self.batches_published,
            "batches_duplicate": self.batches_duplicate,
            "rows_published": self.rows_published,
        }


class SinkHost(Protocol):
    """What the sink keeps on the broker (``Broker`` is one)."""

    records: list[Record]
    sink_batches: dict[str, int]
    sink_staging: SinkStaging | None


def staging_of(broker: SinkHost) -> SinkStaging:
    """The broker's SinkStaging, created on first use.

    It lives on the broker object (attribute ``sink_staging``). The last
    published batch id per sink is the core's ``broker.sink_batches`` dict,
    which ``Broker.restore`` fills from ``Recovered.sink_batches``, so a
    batch published before a broker restart is still a duplicate after it.
    """
    st = broker.sink_staging
    if st is None:
        st = broker.sink_staging = SinkStaging(broker, broker.sink_batches)
    return st
