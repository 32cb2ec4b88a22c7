"""Power cuts under the journal, simulated by ``faultfs.FaultFS``.

A hypothesis state machine appends batches, syncs (group commit: several
appends, one fsync), closes, and cuts the power: while idle, or during a sync
with any subset of the sectors of the write in flight reaching the disk
(the rest old bytes or junk). After every cut the journal must reopen without
``repair``, keep every acknowledged (synced) batch, and bring back of the
batches in flight only whole writes: a batch nobody heard was stored is
either absent or, when its whole write reached the disk, present in full.
"""

from __future__ import annotations

import shutil
import struct
import tempfile
from itertools import accumulate
from pathlib import Path

import pytest
from faultfs import FaultFS, PowerCut
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from store_helpers import msg, recovered_equal

from shoal.records import MessageRemoved, Record
from shoal.store.journal import JournalStore
from shoal.store.journal.codec import encode_batch
from shoal.store.replay_fold import replay

SEGMENT = 8192  # small: syncs cross segment boundaries now and then


class PowerCutMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="shoal-powercut-"))
        self.fs = FaultFS()
        self.acked: list[list[Record]] = []
        self.pending: list[list[Record]] = []
        self.next_id = 1
        self.preallocate = True
        self.store: JournalStore | None = None
        self.cuts = 0

    def _open(self) -> None:
        self.fs = FaultFS()
        self.store = JournalStore(
            self.dir, segment_size=SEGMENT, preallocate=self.preallocate, file_ops=self.fs
        )
        self.recovered = self.store.open()  # never CorruptRecordError: no repair needed

    def _live(self) -> list[tuple[str, int]]:
        r = replay([rec for b in self.acked + self.pending for rec in b])
        return [(q, m.id) for q, ms in sorted(r.messages.items()) for m in ms]

    @initialize(preallocate=st.booleans())
    def start(self, preallocate: bool) -> None:
        self.preallocate = preallocate
        self._open()
        assert self.recovered.notes == []

    @rule(
        n=st.integers(1, 5),
        size=st.sampled_from([0, 10, 300, 1500]),
        queue=st.sampled_from(["q", "r"]),
        group=st.sampled_from([None, "a", "b"]),
    )
    def append(self, n: int, size: int, queue: str, group: str | None) -> None:
        batch: list[Record] = [
            msg(self.next_id + k, queue, group=group, body=bytes([(self.next_id + k) % 251]) * size)
            for k in range(n)
        ]
        self.next_id += n
        assert self.store is not None
        self.store.append(batch)
        self.pending.append(batch)

    @rule(data=st.data())
    def remove(self, data: st.DataObject) -> None:
        live = self._live()
        if not live:
            return
        q, mid = data.draw(st.sampled_from(live))
        batch: list[Record] = [MessageRemoved(q, mid)]
        assert self.store is not None
        self.store.append(batch)
        self.pending.append(batch)

    @rule()
    def sync(self) -> None:
        assert self.store is not None
        self.store.sync()
        self.acked += self.pending
        self.pending = []

    @rule()
    def close_and_reopen(self) -> None:
        assert self.store is not None
        self.store.close()
        self.acked += self.pending
        self.pending = []
        self._open()
        assert self.recovered.notes == []
        assert recovered_equal(self.recovered, replay([r for b in self.acked for r in b]))

    @precondition(lambda self: self.pending)
    @rule(data=st.data(), mode=st.sampled_from(["none", "all", "subset", "subset-junk"]))
    def power_cut_during_sync(self, data: st.DataObject, mode: str) -> None:
        """The write is on its way when the power goes: any of its sectors may
        have reached the disk; none of its batches was acknowledged."""
        assert self.store is not None
        self.fs.arm()
        with pytest.raises(PowerCut):
            self.store.sync()
        # The cut hit the sync's first write: one frame holding the first m
        # batches in flight (as many as fit the segment).
        [torn] = self.fs.unsynced
        (length,) = struct.unpack_from("<I", torn.new, 4)
        sizes = list(accumulate(len(encode_batch(b)[0]) for b in self.pending))
        assert length in sizes, "a write holds whole batches, back to back"
        m = sizes.index(length) + 1

        def choose(_w: object, _i: int) -> str:
            if mode == "none":
                return "old"
            if mode == "all":
                return "new"
            lost = "junk" if mode == "subset-junk" else "old"
            return data.draw(st.sampled_from(["new", lost]))

        fates = self.fs.power_cut(choose, seed=self.next_id)
        mixed = len(set(fates[0])) > 1
        event(f"cut during sync: {mode}, " + ("sectors mixed" if mixed else "uniform"))
        self._after_cut(m)

    @rule()
    def power_cut_while_idle(self) -> None:
        """Appends not synced yet never reached a file: they are gone."""
        assert self.store is not None
        assert self.fs.unsynced == []
        self.fs.power_cut(lambda _w, _i: "old")
        self._after_cut(0)

    def _after_cut(self, in_torn_write: int) -> None:
        """``in_torn_write``: how many batches in flight the torn write held."""
        assert self.store is not None
        self.store.crash()
        inflight, self.pending = self.pending, []
        self.cuts += 1
        self._open()  # must not need --repair
        acked = [r for b in self.acked for r in b]
        # Which prefix of the batches in flight came back (all of each, or none).
        matches = [
            k
            for k in range(len(inflight) + 1)
            if recovered_equal(self.recovered, replay(acked + [r for b in inflight[:k] for r in b]))
        ]
        assert matches, "recovered state is not acked + a prefix of whole batches in flight"
        # One write, one frame: all of it or nothing.
        assert 0 in matches or in_torn_write in matches, (matches, in_torn_write)
        k = max(matches)
        self.acked += inflight[:k]
        for note in self.recovered.notes:
            assert "torn" in note and "never acknowledged" in note, note

    @invariant()
    def acknowledged_batches_are_readable(self) -> None:
        """Bodies of live acknowledged messages read back from the segments."""
        if self.store is None or self.pending:
            return
        for q, mid in self._live()[:5]:
            assert self.store.load_body(mid, q) == bytes([mid % 251]) * len(
                self.store.load_body(mid, q)
            )

    def teardown(self) -> None:
        if self.store is not None:
            self.store.crash()
        shutil.rmtree(self.dir, ignore_errors=True)


def test_power_cuts_never_lose_an_acknowledged_batch_nor_need_repair(no_fsync):
    run_state_machine_as_test(
        PowerCutMachine,
        settings=settings(
            max_examples=200,
            stateful_step_count=40,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        ),
    )
