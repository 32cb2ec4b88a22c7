"""A primary/backup pair over a simulated network: the pure replication
cores (shoal.replication), no I/O.

Two processes, ``a`` and ``b``. A dict plays ZooKeeper: the current epoch,
which process is live, whose term it is and the in-sync flag. A new term
is a conditional write (epoch + 1, flag false); the primary's
``RecordInSync`` requests are conditional writes on its epoch, carried out
in order by a rule of their own, and a write for an older epoch fences the
primary that asked.

Each process has a store: records (opaque bytes, one per batch) on disk and
writes appended since its last sync, lost by a crash. The network is a bag:
any message may be delivered, dropped, or delivered and kept (a duplicate),
in any order. Rules: a client sends a record to a process that acts as
primary; a store syncs; a message moves; ZooKeeper carries out a write;
time passes (timers: resends, hellos, degradation); a process crashes
(kill -9, its disk optionally lost) and restarts; the live process pauses
(its ZooKeeper session expires while it runs on, a zombie) and later wakes
as a backup; the backup takes over when ZooKeeper allows; a backup hears of
a new epoch from ZooKeeper's watch.

Failures: at most one process at a time is down, and a crash leaves a
process that may be live with everything: the other one (live, or an
in-sync backup of the current term), or the crashed one itself when it was
live and keeps its disk. (A backup about to be recorded out of sync, the
write on its way to ZooKeeper, counts as failed already.)

Invariants:
- every process that may be live next (the live one, or a backup that
  ``can_take_over``) holds every receipted record, in send order (receipts
  themselves may come in another order: a zombie's acked batch can be
  receipted after the new live process receipted its own); so after any
  failover the new live process has them all;
- a record is receipted only by a primary whose term is current, or whose
  in-sync backup has it (a fenced or zombie primary's solo receipts would
  break the first invariant);
- one primary per epoch: every batch a backup accepted for an epoch came
  from one process;
- a stale primary's writes are refused: no store takes a write of a term
  older than the newest its backup has heard of (from ZooKeeper or a
  message); one that has not heard yet may, and then cannot take over.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from shoal.replication import (
    Apply,
    CopyWanted,
    Data,
    Install,
    Message,
    RecordInSync,
    ReplicationBackup,
    ReplicationPrimary,
    Write,
)

PROCS = ("a", "b")
OTHER = {"a": "b", "b": "a"}
TIMEOUT_MS, RESEND_MS, HELLO_MS = 1000, 100, 300
MAX_LAG_BYTES = 48  # a few dozen records: a backup far behind is dropped and copies


def _event(text: str) -> None:
    try:
        event(text)
    except InvalidArgument:
        pass


def _image(records: list[bytes]) -> bytes:
    return b",".join(records)


def _records(image: bytes) -> list[bytes]:
    return image.split(b",") if image else []


class Proc:
    """One process: its disk (kept across crashes) and what it runs."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.disk: list[bytes] = []
        self.position = (0, 0)  # (term, seq) the disk holds, as a backup
        self.primary_term = 0  # the term this disk was the live journal of
        self.up = True
        self.pending: list[tuple[str, int, int, Any]] = []  # kind, term, seq, payload/records
        self.role: str | None = None  # "primary" or "backup"
        self.primary: ReplicationPrimary | None = None
        self.backup: ReplicationBackup | None = None
        self.outstanding: deque[tuple[int, bytes]] = deque()  # (seq, record) not receipted
        self.local_synced = 0  # the primary's batches up to it are on its own disk

    def contents(self) -> list[bytes]:
        records = list(self.disk)
        for kind, _term, _seq, data in self.pending:
            if kind == "install":
                records = list(data)
            else:
                records.append(data)
        return records

    def sync(self) -> None:
        self.disk = self.contents()
        if self.pending and self.role == "backup":
            _kind, term, seq, _data = self.pending[-1]
            self.position = (term, seq)
            assert self.backup is not None
            self.backup.synced(term, seq)
        if self.role == "primary":
            assert self.primary is not None
            self.local_synced = self.primary.last_seq
        self.pending = []


class Pair(RuleBasedStateMachine):
    sync_mode = "fsync"

    def __init__(self) -> None:
        super().__init__()
        self.now = 0
        self.procs = {n: Proc(n) for n in PROCS}
        # ZooKeeper: epoch, live process (None: its session is gone), in-sync flag
        self.epoch = 0
        self.live: str | None = None
        self.in_sync = False
        self.zk_writes: deque[tuple[ReplicationPrimary, RecordInSync]] = deque()
        self.wire: list[tuple[str, str, Message]] = []  # (from, to, message)
        self.next_record = 0
        self.receipted: list[bytes] = []
        self.senders: dict[int, set[str]] = {}  # epoch -> processes whose batches a backup took
        self.zombie: str | None = None  # a live process whose session expired, running on
        self.takeovers = 0
        self._new_term("a")
        self._start_backup("b")
        self._pump()

    # --- plumbing -------------------------------------------------------------

    def _new_term(self, name: str) -> None:
        """ZooKeeper's conditional write: ``name`` is live for a new epoch."""
        proc = self.procs[name]
        self.epoch += 1
        self.live, self.in_sync = name, False
        proc.sync()  # what it holds (a backup's memory too) is its journal now
        proc.role, proc.backup = "primary", None
        proc.primary = ReplicationPrimary(
            self.epoch,
            self.now,
            sync=self.sync_mode,
            timeout_ms=TIMEOUT_MS,
            resend_ms=RESEND_MS,
            max_lag_bytes=MAX_LAG_BYTES,
        )
        proc.primary_term, proc.position = self.epoch, (0, 0)
        proc.outstanding.clear()
        proc.local_synced = 0

    def _start_backup(self, name: str) -> None:
        proc = self.procs[name]
        term, seq = proc.position
        if self.sync_mode == "received":
            term, seq = 0, 0  # its memory was lost: its disk is no term's prefix
        proc.role, proc.primary = "backup", None
        proc.backup = ReplicationBackup(self.epoch, self.now, term=term, seq=seq, hello_ms=HELLO_MS)
        proc.outstanding.clear()

    def _eligible(self, proc: Proc) -> bool:
        """May be live next, and so must hold every receipted record."""
        if not proc.up:
            return False
        if proc.role == "primary":
            return self.live == proc.name
        assert proc.backup is not None
        return proc.backup.can_take_over(self.epoch, self.in_sync)

    def _failed(self, name: str) -> bool:
        return not self.procs[name].up or self.zombie == name

    def _pump(self) -> None:
        for _ in range(3):
            for proc in self.procs.values():
                if proc.up:
                    self._drain(proc)

    def _drain(self, proc: Proc) -> None:
        to = OTHER[proc.name]
        if proc.role == "primary":
            primary = proc.primary
            assert primary is not None
            for req in primary.take_requests():
                if isinstance(req, CopyWanted):
                    primary.copy_ready(primary.last_seq, _image(proc.contents()), self.now)
                else:
                    self.zk_writes.append((primary, req))
            self.wire.extend((proc.name, to, m) for m in primary.take_outgoing())
            if primary.fenced:
                _event("a fenced primary became the backup")
                if self.zombie == proc.name:
                    self.zombie = None
                proc.sync()
                proc.position = (0, 0)
                self._start_backup(proc.name)
                return
            top = min(primary.receiptable(), proc.local_synced)
            while proc.outstanding and proc.outstanding[0][0] <= top:
                self.receipted.append(proc.outstanding.popleft()[1])
        else:
            backup = proc.backup
            assert backup is not None
            self._write(proc, backup.take_writes())
            self.wire.extend((proc.name, to, m) for m in backup.take_outgoing())

    def _write(self, proc: Proc, writes: list[Write]) -> None:
        assert proc.backup is not None
        for w in writes:
            # a write of an old term only while the backup has not heard of
            # the new one (it then cannot take over: its term is not the
            # current epoch); never once it has
            assert w.term == proc.backup.epoch, f"{proc.name} took {w!r} knowing a newer epoch"
            if w.term < self.epoch:
                _event("an old term's batch reached a backup that had not heard of the new")
            if isinstance(w, Install):
                proc.pending.append(("install", w.term, w.seq, _records(w.image)))
            else:
                assert isinstance(w, Apply)
                proc.pending.append(("apply", w.term, w.seq, w.payload))

    # --- rules ----------------------------------------------------------------

    @rule(name=st.sampled_from(PROCS))
    def send(self, name: str) -> None:
        proc = self.procs[name]
        if not proc.up or proc.role != "primary":
            return
        assert proc.primary is not None
        self.next_record += 1
        record = b"%d" % self.next_record
        seq = proc.primary.append(record, self.now)
        proc.pending.append(("apply", 0, seq, record))
        proc.outstanding.append((seq, record))
        self._pump()

    @rule(name=st.sampled_from(PROCS))
    def sync(self, name: str) -> None:
        proc = self.procs[name]
        if proc.up:
            proc.sync()
            self._pump()

    @precondition(lambda self: self.wire)
    @rule(pick=st.integers(0, 1000), fate=st.sampled_from(["deliver"] * 4 + ["drop", "dup"]))
    def network(self, pick: int, fate: str) -> None:
        src, dst, msg = self.wire[pick % len(self.wire)]
        if fate != "dup":
            del self.wire[pick % len(self.wire)]
        proc = self.procs[dst]
        if fate == "drop" or not proc.up:
            return
        if proc.role == "primary":
            assert proc.primary is not None
            proc.primary.receive(msg, self.now)
        else:
            assert proc.backup is not None
            proc.backup.receive(msg, self.now)
            writes = proc.backup.take_writes()
            if writes:
                self.senders.setdefault(msg.epoch, set()).add(src)
            elif isinstance(msg, Data) and msg.epoch < proc.backup.epoch:
                _event("a stale primary's batch was refused")
            self._write(proc, writes)
        self._pump()

    @rule(rounds=st.integers(1, 4))
    def settle(self, rounds: int) -> None:
        """A healthy stretch: stores sync, every message and ZooKeeper write goes
        through in order."""
        for _ in range(rounds):
            for name in PROCS:
                self.sync(name)
            while self.wire:
                self.network(0, "deliver")
            while self.zk_writes:
                self.zookeeper()

    @precondition(lambda self: self.zk_writes)
    @rule()
    def zookeeper(self) -> None:
        primary, req = self.zk_writes.popleft()
        if req.epoch == self.epoch:
            self.in_sync = req.in_sync
            primary.in_sync_recorded(req.version)
            _event(f"in-sync flag recorded {req.in_sync}")
        else:
            primary.fence(self.epoch)  # the conditional write failed: the term moved on
        self._pump()

    @rule(ms=st.sampled_from([20, 100, 300, 1200]))
    def tick(self, ms: int) -> None:
        self.now += ms
        for proc in self.procs.values():
            if proc.up:
                (proc.primary or proc.backup).handle_timer(self.now)  # type: ignore[union-attr]
        self._pump()

    @rule(name=st.sampled_from(PROCS), lose_disk=st.booleans())
    def crash(self, name: str, lose_disk: bool) -> None:
        proc, other = self.procs[name], self.procs[OTHER[name]]
        if not proc.up or not other.up:
            return
        # the other may be live next unless a write declaring it out of sync
        # is on its way (it may land after this crash)
        degrading = any(not r.in_sync and r.epoch == self.epoch for _, r in self.zk_writes)
        other_will_do = self._eligible(other) and not degrading
        if not (other_will_do or (not lose_disk and proc.primary_term == self.epoch)):
            return  # a second failure: nobody left who holds everything could be live
        proc.up = False
        proc.pending = []
        if lose_disk:
            proc.disk, proc.position, proc.primary_term = [], (0, 0), 0
            _event("crash, disk lost")
        if self.live == name:
            self.live = None  # its session expires
        if self.zombie == name:
            self.zombie = None
        proc.role = proc.primary = proc.backup = None
        self.wire = [w for w in self.wire if w[0] != name]  # its connections are gone

    @rule(name=st.sampled_from(PROCS))
    def restart(self, name: str) -> None:
        proc = self.procs[name]
        if proc.up:
            return
        proc.up = True
        if self.live is None and proc.primary_term == self.epoch:
            _event("the live process came back as live")
            self._new_term(name)  # it was live and has its journal
        else:
            self._start_backup(name)
        self._pump()

    @precondition(lambda self: self.live is not None and self.zombie is None)
    @rule()
    def pause(self) -> None:
        assert self.live is not None
        if self._failed(OTHER[self.live]):
            return
        self.zombie, self.live = self.live, None

    @precondition(lambda self: self.zombie is not None)
    @rule()
    def wake(self) -> None:
        assert self.zombie is not None
        proc = self.procs[self.zombie]
        self.zombie = None
        proc.sync()
        proc.position = (0, 0)  # its journal was a primary's
        if self.live is None and proc.primary_term == self.epoch:
            self._new_term(proc.name)
        else:
            self._start_backup(proc.name)
        self._pump()

    @precondition(lambda self: self.live is None)
    @rule(name=st.sampled_from(PROCS))
    def take_over(self, name: str) -> None:
        proc = self.procs[name]
        if not proc.up or proc.role != "backup":
            return
        assert proc.backup is not None
        if not proc.backup.can_take_over(self.epoch, self.in_sync):
            return
        self.takeovers += 1
        _event("failover")
        self._new_term(name)
        self._pump()

    @rule(name=st.sampled_from(PROCS))
    def watch(self, name: str) -> None:
        proc = self.procs[name]
        if proc.up and proc.backup is not None:
            proc.backup.learn_epoch(self.epoch, self.now)
            self._pump()

    # --- invariants -----------------------------------------------------------

    @invariant()
    def every_receipted_record_is_where_it_may_be_needed(self) -> None:
        for proc in self.procs.values():
            if self._eligible(proc):
                wanted = set(self.receipted)
                held = [r for r in proc.contents() if r in wanted]
                assert held == sorted(wanted, key=int), (
                    f"{proc.name} ({proc.role}, epoch {self.epoch}) lacks receipted "
                    f"{sorted(wanted - set(held))} or holds them out of order"
                )

    @invariant()
    def one_primary_per_epoch(self) -> None:
        for epoch, senders in self.senders.items():
            assert len(senders) == 1, f"epoch {epoch}: batches from {sorted(senders)}"

    @invariant()
    def someone_may_always_be_live(self) -> None:
        # with at most one failure, a process that holds everything can be live
        if self.live is None:
            assert any(
                self._eligible(p) or (p.primary_term == self.epoch) for p in self.procs.values()
            )

    def teardown(self) -> None:
        if self.receipted:
            _event("receipts given")
        if self.takeovers:
            _event("a backup took over")


class ReceivedPair(Pair):
    sync_mode = "received"


TestPair = Pair.TestCase
TestReceivedPair = ReceivedPair.TestCase
TestPair.settings = settings(max_examples=300, stateful_step_count=80, deadline=None)
TestReceivedPair.settings = TestPair.settings
