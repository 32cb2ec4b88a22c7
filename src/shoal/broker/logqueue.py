"""Log queues (``queue-type = "log"``): replayable bucket logs for Spark.

A classic queue deletes a message once it is acknowledged, so a reader that
recovers by replaying an offset range (Spark Structured Streaming) cannot use
it. A log queue keeps its messages in ``log-buckets`` N append-only bucket
logs instead:

* a message goes to bucket ``stable_hash(group id) % N``
  (:func:`shoal.broker.hashing.bucket_of`), so every message of a group is in
  one bucket;
* each bucket has dense offsets 0, 1, 2, ... in the order the broker accepted
  the messages, so offset order is group order;
* ungrouped messages use the queue's ``default-group`` when it is set (the
  core fills it in), otherwise the empty string ``""`` as their hash key: they
  all land in bucket ``bucket_of("", N)`` and stay in acceptance order;
* messages are kept until the reader commits past them
  (:meth:`LogQueue.commit`); ``expires`` and ``priority`` are carried but not
  acted on, and nothing is ever delivered over STOMP;
* a read of ``[start, end)`` returns the same entries every time, until the
  range is committed (then it is trimmed and a read of it is a Conflict);
* every message is durable: :meth:`offer` always appends a
  :class:`MessageStored` record with its bucket and offset, whatever the
  ``persistent`` header says, and a commit appends :class:`LogCommitted`.

One reader (one Spark query, one checkpoint) per log queue: the commit is a
single cursor per bucket.

The class is pure like the rest of the core: no I/O, no clock. The broker
core constructs it for ``queue_type == "log"``, calls :meth:`offer` for every
message routed to it and :meth:`restore_message` / :meth:`restore_commit`
after a restart, and drains ``records`` into the journal.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from shoal.broker.hashing import bucket_of
from shoal.broker.model import Message
from shoal.broker.settings import QueueSettings
from shoal.errors import Conflict, NotFound, StoreError
from shoal.records import LogCommitted, MessageStored

if TYPE_CHECKING:
    from shoal.broker.queue_context import RecordLog

UNGROUPED_KEY = ""  # hash key of messages without a group id (and no default-group)
BUCKET_CACHE_MAX = 65_536  # group -> bucket memo; cleared when full


class _Bucket:
    """One bucket log: ``entries[i]`` has offset ``base + i``."""

    __slots__ = ("base", "entries", "committed", "bytes", "durable")

    def __init__(self) -> None:
        self.base = 0  # offset of entries[0]; everything below is trimmed
        self.entries: list[MessageStored] = []
        self.committed = 0  # the reader committed everything below this offset
        self.bytes = 0
        self.durable = 0  # offsets below this were shown after a sync barrier

    @property
    def end(self) -> int:
        return self.base + len(self.entries)

    def trim(self, offset: int) -> int:
        """Drop entries below ``offset``; returns how many were dropped."""
        n = min(offset, self.end) - self.base
        if n <= 0:
            return 0
        dropped = self.entries[:n]
        del self.entries[:n]
        self.bytes -= sum(len(r.body) for r in dropped)  # type: ignore[arg-type,misc]  # log records keep their bodies
        self.base += n
        return n


class LogQueue:
    """N bucket logs with dense offsets, kept until the reader commits."""

    kind = "log"
    durable = True

    def __init__(self, name: str, settings: QueueSettings, core: RecordLog) -> None:
        self.name = name
        self.settings = settings
        self.core = core  # its records go to the journal
        self.nbuckets = settings.log_buckets
        self.buckets = [_Bucket() for _ in range(self.nbuckets)]
        self._bucket_cache: dict[str | None, int] = {}
        self.enqueued = 0  # since this process started
        self.acked = 0  # entries trimmed by commits since this process started

    # ------------------------------------------------------------- writing

    def bucket_for(self, group: str | None) -> int:
        b = self._bucket_cache.get(group)
        if b is None:
            b = bucket_of(group if group else UNGROUPED_KEY, self.nbuckets)
            if len(self._bucket_cache) >= BUCKET_CACHE_MAX:
                self._bucket_cache.clear()
            self._bucket_cache[group] = b
        return b

    def offer(self, message: Message, now: float) -> None:
        """Append ``message`` to its group's bucket with the next offset."""
        self.offer_many(
            message.id,
            message.destination,
            ((None, message.headers, message.body),),  # type: ignore[arg-type]  # offered with its body
            (message.group,),
            (message.group_seq,),
            (message.expires,),
            (message.priority,),
            message.timestamp,
        )

    def offer_many(
        self,
        first_id: int,
        destination: str,
        rows: Iterable[tuple[Any, dict[str, str], bytes]],
        groups: Iterable[str | None],
        seqs: Iterable[int],
        expires: Iterable[int],
        priorities: Iterable[int],
        timestamp: int,
    ) -> int:
        """Append messages with ids ``first_id, first_id + 1, ...``; returns how many.

        ``rows`` are ``(_, headers, body)``; the other fields come in parallel
        iterables. One MessageStored per message, straight from the fields (no
        Message object): the bucket's entry and the journal record are the
        same object.
        """
        name = self.name
        cache = self._bucket_cache
        buckets = self.buckets
        append_record = self.core.records.append
        mid = first_id
        for (_, headers, body), group, seq, exp, prio in zip(
            rows, groups, seqs, expires, priorities, strict=True
        ):
            b = cache.get(group)
            if b is None:
                b = self.bucket_for(group)
            bucket = buckets[b]
            entries = bucket.entries
            rec = MessageStored(  # positional: this is the hot path
                name,
                mid,
                destination,
                headers,
                body,
                group,
                seq,
                exp,
                prio,
                timestamp,
                0,
                b,
                bucket.base + len(entries),
            )
            entries.append(rec)
            bucket.bytes += len(body)
            append_record(rec)
            mid += 1
        n = mid - first_id
        self.enqueued += n
        return n

    # -------------------------------------------------------------- restore

    def restore_message(self, record: MessageStored) -> None:
        """Re-insert a recovered message (in id order; emits no record)."""
        b = record.bucket
        if not 0 <= b < self.nbuckets:
            raise StoreError(
                f"log queue {self.name!r}: recovered message {record.id} is in bucket {b}, "
                f"but the queue has {self.nbuckets} buckets (log-buckets changed?)"
            )
        bucket = self.buckets[b]
        if record.offset < bucket.end:
            return  # already there (a duplicate in the journal): keep the first
        if record.offset > bucket.end:
            if bucket.entries:
                raise StoreError(
                    f"log queue {self.name!r} bucket {b}: recovered offset {record.offset} "
                    f"after {bucket.end - 1}; the offsets must be dense"
                )
            bucket.base = record.offset  # everything below was committed and trimmed
            bucket.committed = max(bucket.committed, record.offset)
        bucket.entries.append(record)
        bucket.bytes += len(record.body)  # type: ignore[arg-type]  # log records keep their bodies
        bucket.durable = bucket.end  # recovered from the journal: on disk

    def restore_commit(self, bucket: int, offset: int) -> None:
        """Apply a recovered commit (after the messages; emits no record)."""
        if not 0 <= bucket < self.nbuckets:
            return  # the bucket count shrank: nothing of that bucket is left
        bk = self.buckets[bucket]
        if offset <= bk.committed and offset <= bk.base:
            return
        bk.committed = max(bk.committed, offset)
        bk.trim(offset)
        if not bk.entries and bk.base < offset:
            bk.base = offset  # fully committed: the next message gets ``offset``
        bk.durable = max(bk.durable, bk.end)

    # -------------------------------------------------------------- reading

    def _bucket(self, bucket: int) -> _Bucket:
        if not isinstance(bucket, int) or not 0 <= bucket < self.nbuckets:
            raise NotFound(
                f"log queue {self.name!r} has buckets 0..{self.nbuckets - 1}, no bucket {bucket!r}"
            )
        return self.buckets[bucket]

    def read(
        self, bucket: int, start: int, end: int | None = None, max_rows: int | None = None
    ) -> list[MessageStored]:
        """Entries with offsets in ``[start, min(end, log end))``, at most ``max_rows``.

        Deterministic: the same range gives the same entries every time. A
        range starting below the trimmed part raises Conflict (the reader
        committed past it); a negative or inverted range raises NotFound.
        """
        bk = self._bucket(bucket)
        if end is None:
            end = bk.end
        if start < 0 or end < start:
            raise NotFound(f"bucket {bucket} has no offset range [{start}, {end})")
        if start < bk.base:
            raise Conflict(
                f"log queue {self.name!r} bucket {bucket}: offsets below {bk.base} were "
                f"committed and trimmed; cannot read from {start}"
            )
        stop = min(end, bk.end)
        if max_rows is not None and max_rows >= 0:
            stop = min(stop, start + max_rows)
        if stop <= start:
            return []
        return bk.entries[start - bk.base : stop - bk.base]

    def commit(self, bucket: int, offset: int) -> bool:
        """The reader is done with everything below ``offset`` in ``bucket``.

        Idempotent and monotonic: an offset at or below the current commit is
        ignored (returns False). An offset past the log's end is a Conflict.
        Appends a LogCommitted record and frees the committed entries.
        """
        bk = self._bucket(bucket)
        if not isinstance(offset, int) or offset < 0:
            raise NotFound(f"commit offset must be a non-negative integer, not {offset!r}")
        if offset <= bk.committed:
            return False
        if offset > bk.end:
            raise Conflict(
                f"log queue {self.name!r} bucket {bucket}: cannot commit {offset}, "
                f"the log ends at {bk.end}"
            )
        bk.committed = offset
        self.acked += bk.trim(offset)
        self.core.records.append(LogCommitted(self.name, bucket, offset))
        return True

    def barrier(self) -> bool:
        """Make sure the offsets a reader is about to see are on disk.

        Offsets are only served durable: a reader that planned a batch over
        offsets a broker crash then lost would replay different messages. If
        any bucket has offsets not yet covered, append one no-op record (a
        re-commit of bucket 0 at its current offset; replay ignores it) and
        return True: the server answers a request that produced records only
        after the fsync covering them, and the journal is written in order,
        so every message appended before is synced by then.
        """
        fresh = False
        for bk in self.buckets:
            if bk.end > bk.durable:
                fresh = True
                bk.durable = bk.end
        if fresh:
            self.core.records.append(LogCommitted(self.name, 0, self.buckets[0].committed))
        return fresh

    # ---------------------------------------------------------------- views

    def end_offsets(self) -> dict[int, int]:
        return {i: bk.end for i, bk in enumerate(self.buckets)}

    def start_offsets(self) -> dict[int, int]:
        """The first offset still kept per bucket (the committed offset)."""
        return {i: bk.base for i, bk in enumerate(self.buckets)}

    def committed_offsets(self) -> dict[int, int]:
        return {i: bk.committed for i, bk in enumerate(self.buckets)}

    def lag(self) -> int:
        return sum(bk.end - bk.committed for bk in self.buckets)

    def bucket_infos(self) -> list[dict[str, Any]]:
        return [
            {
                "bucket": i,
                "start": bk.base,
                "end": bk.end,
                "committed": bk.committed,
                "lag": bk.end - bk.committed,
                "bytes": bk.bytes,
            }
            for i, bk in enumerate(self.buckets)
        ]

    def info(self) -> dict[str, Any]:
        """Merged into ``Broker.queue_infos()`` next to name/type/settings."""
        lag = self.lag()
        return {
            "durable": True,
            "temporary": False,
            "log_buckets": self.nbuckets,
            "depth": lag,
            "lag": lag,
            "in_flight": 0,
            "consumers": 0,
            "bytes": sum(bk.bytes for bk in self.buckets),
            "enqueued": self.enqueued,
            "acked": self.acked,
            "buckets": self.bucket_infos(),
        }

    def __repr__(self) -> str:
        return f"LogQueue({self.name!r}, buckets={self.nbuckets}, lag={self.lag()})"
