"""The live process's side of replication (C12), sans-I/O.

``ReplicationPrimary`` is told each batch the journal appends and hands out
the messages that carry it to the backup; it says which batches may be
receipted. Time is passed in (ms of a monotonic clock); it never sleeps,
reads a clock, or touches a socket or a file.

The in-sync record. Whether the backup may take over is not decided here:
ZooKeeper keeps, with the term's epoch, a flag "the backup is in sync"
(the server writes it; tests play it with a dict). The primary asks for the flag
to change (``RecordInSync`` from ``take_requests``) and is told once it is
recorded (``in_sync_recorded``). The rule that keeps receipted records safe,
as Kafka's in-sync replicas do:

- while the flag is, or is about to be, true, a batch is receipted only once
  the backup has it (``sync = "fsync"``: on its disk; ``"received"``: in its
  memory);
- the primary stops waiting for the backup only after the flag is recorded
  false; a backup takes over only while the flag is true.

So a receipted batch is always on a process that may be live next. The flag
goes false (the pair is degraded, and serves on) when the backup is absent or
has not caught up within ``timeout_ms``, or lags by more than
``max_lag_bytes``; it goes true again once the backup holds every batch.

Catch-up. A backup says where it is (``Hello``). If it holds this term's
batches up to one the primary still keeps, the stream resumes there;
otherwise the primary asks its host for an image of the store
(``CopyWanted``), sends it (``Copy``), and streams what follows. A backup
coming from another term always copies: its journal may hold batches the
live process never had, so it never serves a stale journal.

Fencing. A primary that learns of a higher epoch (``fence``, or any message
that carries one) stops: nothing more is sent or receipted, and its host
must stop serving. Messages of lower epochs get ``Stale``.
"""

from __future__ import annotations

from collections import deque
from itertools import islice

from shoal.replication.messages import Ack, Copy, Data, Hello, Message, Plain, Stale

SYNC_MODES = ("fsync", "received")


class CopyWanted(Plain):
    """Host: read an image of the store (every batch appended so far) and
    call ``copy_ready(primary.last_seq, image)``."""

    __slots__ = FIELDS = ()


class RecordInSync(Plain):
    """Host: record the in-sync flag ``in_sync`` for ``epoch`` (a conditional
    write: only while the term is still ``epoch``), then call
    ``in_sync_recorded(version)``; if the term moved on, call ``fence``."""

    __slots__ = FIELDS = ("epoch", "in_sync", "version")

    def __init__(self, epoch: int, in_sync: bool, version: int) -> None:
        self.epoch, self.in_sync, self.version = epoch, in_sync, version


Request = CopyWanted | RecordInSync


class ReplicationPrimary:
    """One term of a live process. A term starts with the backup out of sync
    (the process that takes over records the new epoch with the flag false)."""

    def __init__(
        self,
        epoch: int,
        now_ms: int,
        *,
        sync: str = "fsync",
        timeout_ms: int = 5000,
        resend_ms: int = 200,
        max_lag_bytes: int = 64 << 20,
    ) -> None:
        if sync not in SYNC_MODES:
            raise ValueError(f"sync must be one of {', '.join(SYNC_MODES)}, not {sync!r}")
        if epoch < 1 or timeout_ms <= 0 or resend_ms <= 0 or max_lag_bytes <= 0:
            raise ValueError("epoch, timeout_ms, resend_ms and max_lag_bytes must be positive")
        self.epoch = epoch
        self.sync = sync
        self.timeout_ms = timeout_ms
        self.resend_ms = resend_ms
        self.max_lag_bytes = max_lag_bytes
        self.fenced = False
        self.last_seq = 0  # the last batch appended in this term
        # batches the backup may still need: (seq, payload, appended at ms)
        self._kept: deque[tuple[int, bytes, int]] = deque()
        self._kept_bytes = 0
        self._base = 0  # every batch up to it is in the image a copy would send, or dropped
        # the backup
        self.received = 0  # acked in memory (this term)
        self.durable = 0  # acked on disk (this term)
        self.streaming = False  # a Hello placed the backup in this term's stream
        self._copy: Copy | None = None  # the image on its way, until acked
        self._copy_wanted = False
        self._next = 1  # the next batch to send
        self._progress_ms = now_ms  # when the backup last advanced (or the term began)
        self._sent_ms = now_ms
        # the in-sync flag: what we want, what is recorded, versions
        self.want_in_sync = False
        self.in_sync = False  # as recorded
        self._version = 0
        self._asked: dict[int, bool] = {}  # versions not recorded yet -> in_sync asked
        self._requests: list[Request] = []
        self._out: list[Message] = []
        self.copies = 0  # counters for status and metrics
        self.degradations = 0

    # --- the journal's side ---------------------------------------------------

    def append(self, payload: bytes, now_ms: int) -> int:
        """A batch the journal appended: returns its number in this term."""
        if self.fenced:
            raise ValueError(f"the term of epoch {self.epoch} is over (fenced)")
        if self.replicated == self.last_seq:
            self._progress_ms = now_ms  # the backup was level: the wait starts now
        self.last_seq += 1
        self._kept.append((self.last_seq, payload, now_ms))
        self._kept_bytes += len(payload)
        self._send_more(now_ms)
        self._prune()
        return self.last_seq

    @property
    def replicated(self) -> int:
        """The last batch the backup covers as ``sync`` asks."""
        return self.durable if self.sync == "fsync" else self.received

    def _waits(self) -> bool:
        """Receipts wait for the backup: the flag is, or may become, true."""
        return self.in_sync or any(self._asked.values())

    def receiptable(self) -> int:
        """Every batch up to this one may be receipted (once also synced
        locally). 0 after a fence: the term is over."""
        if self.fenced:
            return 0
        return self.replicated if self._waits() else self.last_seq

    def may_receipt(self, seq: int) -> bool:
        return seq <= self.receiptable()

    # --- status -------------------------------------------------------------

    @property
    def degraded(self) -> bool:
        """Serving without a backup that may take over."""
        return not self.in_sync

    @property
    def lag_records(self) -> int:
        return self.last_seq - self.replicated

    @property
    def lag_bytes(self) -> int:
        return sum(len(p) for seq, p, _ in self._kept if seq > self.replicated)

    # --- messages -------------------------------------------------------------

    def receive(self, msg: Message, now_ms: int) -> None:
        if msg.epoch > self.epoch:
            self.fence(msg.epoch)
            return
        if self.fenced:
            return
        if msg.epoch < self.epoch and type(msg) is not Hello:
            if type(msg) is not Ack:  # an old term's ack counts nothing here
                self._out.append(Stale(self.epoch))  # an old primary's
            return
        if type(msg) is Hello:
            self._hello(msg, now_ms)
        elif type(msg) is Ack:
            self._ack(msg, now_ms)
        elif type(msg) in (Data, Copy):
            # another primary with our epoch: impossible while epochs come from
            # one conditional write; refuse rather than trust either
            self._out.append(Stale(self.epoch))

    def _hello(self, msg: Hello, now_ms: int) -> None:
        # what it holds now, lower after a restart: acks of before count no more
        follows = msg.term == self.epoch and msg.seq <= self.last_seq
        self.received = msg.seq if follows else 0
        self.durable = min(self.durable, self.received)
        if follows and msg.seq >= self._base:
            self._copy = None
            self.streaming = True
            self._next = msg.seq + 1
            self._progress_ms = now_ms
            self._send_more(now_ms)
        elif self._copy is not None:
            self._out.append(self._copy)  # a copy is on its way: send it again
            self._sent_ms = now_ms
        else:
            self.streaming = False
            if not self._copy_wanted:
                self._copy_wanted = True
                self._requests.append(CopyWanted())

    def copy_ready(self, upto: int, image: bytes, now_ms: int) -> None:
        """The image a ``CopyWanted`` asked for: the store with every batch up
        to ``upto`` (at least every batch the primary no longer keeps)."""
        self._copy_wanted = False
        if self.fenced:
            return
        if not self._base <= upto <= self.last_seq:
            self._copy_wanted = True
            self._requests.append(CopyWanted())  # too old: batches after it are gone
            return
        self.copies += 1
        self._copy = Copy(self.epoch, upto, image)
        self._out.append(self._copy)
        self._sent_ms = now_ms

    def _ack(self, msg: Ack, now_ms: int) -> None:
        received = min(msg.received, self.last_seq)
        durable = min(msg.durable, received)
        if self._copy is not None and received >= self._copy.upto:
            self._copy = None  # installed: the stream goes on after it
            self.streaming = True
            self._next = received + 1
        if not self.streaming:
            return
        if received > self.received or durable > self.durable:
            self._progress_ms = now_ms
        self.received = max(self.received, received)
        self.durable = max(self.durable, durable)
        self._next = max(self._next, self.received + 1)
        self._trim(self.durable)
        if not self.want_in_sync and self.replicated == self.last_seq:
            self._want(True)  # caught up: receipts wait for it from now on
        self._send_more(now_ms)

    def _send_more(self, now_ms: int) -> None:
        if not self.streaming or self.fenced or self._next > self.last_seq:
            return
        kept = self._kept
        start = self._next - kept[0][0] if kept else len(kept)
        for seq, payload, _ in islice(kept, max(start, 0), None):
            self._out.append(Data(self.epoch, seq, payload))
        self._next = self.last_seq + 1
        self._sent_ms = now_ms

    def _prune(self) -> None:
        """Keep what a backup on its way may still need, within ``max_lag_bytes``."""
        if not (self.streaming or self._copy is not None or self._copy_wanted):
            self._trim(self.last_seq)  # no backup: one that returns copies
        elif self._kept_bytes > self.max_lag_bytes:
            if self.want_in_sync:
                self._want(False)  # too far behind: degrade first
            elif not self._waits():
                self._trim(self.last_seq)  # and then drop its batches: it copies
                self.streaming = False
                self._copy = None
                self._copy_wanted = False

    def _trim(self, upto: int) -> None:
        kept = self._kept
        while kept and kept[0][0] <= upto:
            self._kept_bytes -= len(kept.popleft()[1])
        self._base = max(self._base, upto)

    def take_outgoing(self) -> list[Message]:
        out, self._out = self._out, []
        return out

    def take_requests(self) -> list[Request]:
        out, self._requests = self._requests, []
        return out

    # --- the in-sync flag and fencing -----------------------------------------

    def _want(self, in_sync: bool) -> None:
        self.want_in_sync = in_sync
        self._version += 1
        if not in_sync:
            self.degradations += 1
        self._asked[self._version] = in_sync
        self._requests.append(RecordInSync(self.epoch, in_sync, self._version))

    def in_sync_recorded(self, version: int) -> None:
        """The ``RecordInSync`` of this version is recorded (the host records
        them in the order asked, so the ones before it are overwritten)."""
        if self.fenced or version not in self._asked:
            return
        self.in_sync = self._asked[version]
        for v in [v for v in self._asked if v <= version]:
            del self._asked[v]
        self._prune()

    def fence(self, epoch: int) -> None:
        """A higher epoch exists: this term is over."""
        if epoch > self.epoch:
            self.fenced = True
            self._out.clear()
            self._requests.clear()

    # --- time ---------------------------------------------------------------

    def next_timer(self) -> int | None:
        if self.fenced:
            return None
        times = []
        if self._copy is not None or (self.streaming and self.replicated < self.last_seq):
            times.append(self._sent_ms + self.resend_ms)
        if self.want_in_sync and self.replicated < self.last_seq:
            times.append(self._progress_ms + self.timeout_ms)
        return min(times) if times else None

    def handle_timer(self, now_ms: int) -> None:
        if self.fenced:
            return
        behind = self.replicated < self.last_seq
        if self.want_in_sync and behind and now_ms - self._progress_ms >= self.timeout_ms:
            self._want(False)  # absent, or too slow: degrade, serve on
        if now_ms - self._sent_ms < self.resend_ms:
            return
        if self._copy is not None:
            self._out.append(self._copy)
            self._sent_ms = now_ms
        elif self.streaming and behind and self._kept:
            # anything may have been lost: go back to what the backup acked
            # (level in memory, not yet on disk: the last batch again asks for
            # a fresh ack)
            self._next = max(min(self.received + 1, self.last_seq), self._kept[0][0])
            self._send_more(now_ms)
