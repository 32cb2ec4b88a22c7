"""The passive process's side of replication (C12), sans-I/O.

``ReplicationBackup`` takes the primary's messages and says what to write
to the local store (``Apply``: one batch, appended after the ones before
it; ``Install``: an image that replaces the store) and what to answer. The
host appends, syncs, and calls ``synced(term, seq)`` once a sync covered every
write up to batch ``seq``: from then on the backup acks it as durable.

The backup's position is ``(term, seq)``: it holds the batches of term
``term`` up to ``seq``. A host that restarts gives back the position its
store holds on disk (0, 0 when it does not know: a copy follows). Under
``sync = "received"`` it must give 0, 0: it may have acked batches that
only its memory held, so its disk is not the term's whole prefix. Batches
are taken in order only; a gap or a repeat is answered with an ``Ack`` of
where it is, so the primary goes back. Messages of an epoch below the
highest one the backup knows get ``Stale``: a fenced primary's batches
never reach the store. A message of a higher epoch is a new term: the
backup says hello to it and, since its journal is of another term, takes a
copy before anything else.

Time is passed in: while the backup hears nothing it can use from its
primary it says hello again every ``hello_ms`` (a Hello or a reply lost on
the way).
"""

from __future__ import annotations

from shoal.replication.messages import Ack, Copy, Data, Hello, Message, Plain, Stale


class Apply(Plain):
    """Host: append this batch to the store (after every earlier write)."""

    __slots__ = FIELDS = ("term", "seq", "payload")

    def __init__(self, term: int, seq: int, payload: bytes) -> None:
        self.term, self.seq, self.payload = term, seq, payload


class Install(Plain):
    """Host: replace the store with ``image`` (batches up to ``seq`` of
    ``term``), atomically on disk: the old store stays until it is whole."""

    __slots__ = FIELDS = ("term", "seq", "image")

    def __init__(self, term: int, seq: int, image: bytes) -> None:
        self.term, self.seq, self.image = term, seq, image


Write = Apply | Install


class ReplicationBackup:
    def __init__(
        self,
        epoch: int,
        now_ms: int,
        *,
        term: int = 0,
        seq: int = 0,
        hello_ms: int = 1000,
    ) -> None:
        """``epoch``: the highest term known (ZooKeeper's); ``term, seq``: the
        position the store holds on disk."""
        if hello_ms <= 0:
            raise ValueError("hello_ms must be positive")
        self.epoch = max(epoch, term)
        self.term = term
        self.received = seq
        self.durable = seq
        self.hello_ms = hello_ms
        self._heard_ms = now_ms
        self._writes: list[Write] = []
        self._out: list[Message] = [self._hello()]
        self.refused = 0  # messages of an older term (a fenced primary's), for status
        self.copies = 0

    def _hello(self) -> Hello:
        return Hello(self.epoch, self.term, self.received)

    def _ack(self) -> Ack:
        # the term its numbers count in: after hearing of a new term, and
        # before its copy, the backup still counts the old one's batches
        return Ack(self.term, self.received, self.durable)

    def can_take_over(self, epoch: int, in_sync: bool) -> bool:
        """May this process become live for the term after ``epoch``? Only if
        ZooKeeper's flag says the backup of ``epoch`` is in sync and our store
        follows that very term (a restarted or copying backup of another term
        does not, even while the flag is still true)."""
        return in_sync and self.term == epoch and self.epoch == epoch

    def learn_epoch(self, epoch: int, now_ms: int) -> None:
        """A higher term exists (ZooKeeper said so): refuse the older ones and
        greet the new primary."""
        if epoch > self.epoch:
            self.epoch = epoch
            self._out.append(self._hello())
            self._heard_ms = now_ms

    def receive(self, msg: Message, now_ms: int) -> None:
        if msg.epoch < self.epoch:
            self.refused += 1
            self._out.append(Stale(self.epoch))
            return
        if msg.epoch > self.epoch:
            self.learn_epoch(msg.epoch, now_ms)  # a new term (a Stale says so too)
        if type(msg) not in (Data, Copy):
            return
        if type(msg) is Copy:
            self._heard_ms = now_ms
            if self.term == msg.epoch and self.received >= msg.upto:
                self._out.append(self._ack())  # a repeat: we hold more already
                return
            self.copies += 1
            self.term = msg.epoch
            self.received = msg.upto
            self.durable = 0
            self._writes.append(Install(msg.epoch, msg.upto, msg.image))
            self._out.append(self._ack())
        elif type(msg) is Data:
            if self.term != msg.epoch:
                return  # waiting for the copy our hello asked for (or lost)
            self._heard_ms = now_ms
            if msg.seq == self.received + 1:
                self.received = msg.seq
                self._writes.append(Apply(msg.epoch, msg.seq, msg.payload))
            # in order, a repeat or after a gap: say where we are
            self._out.append(self._ack())

    def synced(self, term: int, seq: int) -> None:
        """The store's sync covered every write up to batch ``seq`` of ``term``
        (the last ``Apply`` or ``Install`` taken before the sync began)."""
        if term == self.term and self.durable < seq <= self.received:
            self.durable = seq
            self._out.append(self._ack())

    def take_writes(self) -> list[Write]:
        out, self._writes = self._writes, []
        return out

    def take_outgoing(self) -> list[Message]:
        out = self._out
        self._out = []
        acks = [m for m in out if type(m) is Ack]
        if len(acks) > 1:  # cumulative: only the last one says anything new
            last = acks[-1]
            out = [m for m in out if type(m) is not Ack or m is last]
        return out

    def next_timer(self) -> int:
        return self._heard_ms + self.hello_ms

    def handle_timer(self, now_ms: int) -> None:
        if now_ms - self._heard_ms >= self.hello_ms:
            self._heard_ms = now_ms
            self._out.append(self._hello())
