"""Disk full and I/O errors (failure injection: os calls patched to raise),
and kill -9 of a process that appends and syncs in a loop."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from store_helpers import ids, msg, segments

from shoal.errors import StoreError
from shoal.store.journal import JournalStore


def enospc(*_a, **_k):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def eio(*_a, **_k):
    raise OSError(errno.EIO, os.strerror(errno.EIO))


def reopen_ids(directory, queue="q"):
    s = JournalStore(directory, segment_size=4096)
    try:
        rec = s.open()
        return ids(rec, queue), rec
    finally:
        s.close()


@pytest.mark.parametrize("call", ["fdatasync", "pwrite"])
def test_disk_full_raises_store_error_and_loses_nothing_synced(tmp_path, monkeypatch, call):
    s = JournalStore(tmp_path, segment_size=64 * 1024)
    s.open()
    s.append([msg(1)])
    s.sync()
    s.append([msg(2)])
    monkeypatch.setattr(os, call, enospc)
    if call == "fdatasync":
        monkeypatch.setattr(os, "fsync", enospc)
    with pytest.raises(StoreError) as ei:
        s.sync()
    assert ei.value.errno == errno.ENOSPC
    assert "ENOSPC" in str(ei.value)
    assert ei.value.code == "store"
    assert s.load_body(1) == b"body-1"  # reads keep working
    monkeypatch.undo()
    # The failed batch is still pending and goes out with the next sync.
    s.append([msg(3)])
    s.sync()
    s.close()
    got, rec = reopen_ids(tmp_path)
    assert got == [1, 2, 3] and rec.notes == []


def test_store_stays_recoverable_when_the_failure_persists(tmp_path, monkeypatch):
    s = JournalStore(tmp_path, segment_size=64 * 1024)
    s.open()
    s.append([msg(1)])
    s.sync()
    s.append([msg(2)])
    monkeypatch.setattr(os, "fdatasync", eio)
    monkeypatch.setattr(os, "fsync", eio)
    with pytest.raises(StoreError, match="EIO"):
        s.sync()
    with pytest.raises(StoreError):
        s.close()  # close syncs: it fails too, but closes
    monkeypatch.undo()
    got, _rec = reopen_ids(tmp_path)
    assert got[:1] == [1]  # message 2 was written but never acknowledged: either is fine
    assert got in ([1], [1, 2])


def test_a_partial_write_is_overwritten_by_the_retry(tmp_path, monkeypatch):
    s = JournalStore(tmp_path, segment_size=64 * 1024)
    s.open()
    s.append([msg(1)])
    s.sync()
    real_pwrite = os.pwrite
    calls = []

    def half_then_full(fd, data, pos):
        calls.append(len(data))
        if len(calls) == 1:
            real_pwrite(fd, bytes(data)[: len(data) // 2], pos)
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_pwrite(fd, data, pos)

    s.append([msg(2, body=b"x" * 500), msg(3, body=b"y" * 500)])
    monkeypatch.setattr(os, "pwrite", half_then_full)
    with pytest.raises(StoreError):
        s.sync()
    monkeypatch.undo()
    s.append([msg(4)])
    s.sync()
    s.close()
    got, rec = reopen_ids(tmp_path)
    assert got == [1, 2, 3, 4] and rec.notes == []


def test_garbage_from_a_failed_write_never_reaches_recovery(tmp_path, monkeypatch):
    """The device wrote junk where the failed write went (all of it, then
    failed); after the retry, recovery sees exactly the batches."""
    s = JournalStore(tmp_path, segment_size=64 * 1024)
    s.open()
    s.append([msg(1)])
    s.sync()
    real_pwrite = os.pwrite

    def garbage_then_fail(fd, data, pos):
        real_pwrite(fd, b"\xee" * len(data), pos)
        raise OSError(errno.ENOSPC, "No space left on device")

    s.append([msg(2, body=b"a" * 700)])
    monkeypatch.setattr(os, "pwrite", garbage_then_fail)
    with pytest.raises(StoreError):
        s.sync()
    monkeypatch.undo()
    s.sync()
    s.close()
    got, rec = reopen_ids(tmp_path)
    assert got == [1, 2] and rec.notes == []


def test_disk_full_when_creating_a_segment(tmp_path, monkeypatch):
    s = JournalStore(tmp_path, segment_size=4096)
    s.open()
    for i in range(1, 8):
        s.append([msg(i, body=b"z" * 400)])
        s.sync()
    n = len(segments(tmp_path))
    monkeypatch.setattr(os, "posix_fallocate", enospc)
    with pytest.raises(StoreError, match="ENOSPC"):
        for i in range(8, 30):
            s.append([msg(i, body=b"z" * 400)])
            s.sync()
    assert len(segments(tmp_path)) == n
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    monkeypatch.undo()
    s.sync()
    last = i
    s.close()
    got, rec = reopen_ids(tmp_path)
    assert got == list(range(1, last + 1)) and rec.notes == []


def test_closed_store_refuses_work(tmp_path):
    s = JournalStore(tmp_path)
    with pytest.raises(StoreError):
        s.sync()
    s.open()
    s.close()
    s.close()  # twice is fine
    with pytest.raises(StoreError):
        s.append([msg(1)])
    with pytest.raises(StoreError):
        s.sync()


# -- kill -9 ------------------------------------------------------------------

CHILD = textwrap.dedent(
    """
    import sys
    from shoal.store.journal import JournalStore
    from shoal.records import MessageStored, MessageRemoved

    store = JournalStore(sys.argv[1], segment_size=16384)
    rec = store.open()
    i = rec.next_message_id
    print("start", i, flush=True)
    while True:
        batch = [MessageStored("q", i, "/queue/q", {"n": str(i)}, b"p" * (i % 300), None,
                               0, 0, 4, 0)]
        if i > 50:
            batch.append(MessageRemoved("q", i - 50))
        store.append(batch)
        store.sync()
        print(i, flush=True)  # acknowledged
        i += 1
    """
)


@pytest.mark.slow
def test_kill_9_loses_no_acknowledged_batch(tmp_path):
    """A process appends and syncs in a loop, printing each acknowledged
    batch; it is killed with SIGKILL at a random moment, three times over.
    Each time, recovery holds every acknowledged batch, in order: the state
    after batch N for N = the last acknowledged one (or the one after, if
    the kill came between its sync and the print)."""
    for round_ in range(3):
        proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(tmp_path)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        first = proc.stdout.readline().split()
        assert first[0] == "start"
        acked = 0
        deadline = time.monotonic() + 0.7 + 0.3 * round_
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line.endswith("\n"):
                break
            acked = int(line)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        for line in proc.stdout:  # acknowledged before the kill landed
            if line.endswith("\n"):  # (a line cut by the kill is not an ack)
                acked = int(line)
        proc.stdout.close()
        assert acked > 0
        got, rec = reopen_ids(tmp_path)
        n = got[-1]
        assert n in (acked, acked + 1), (round_, acked, got[-3:])
        assert got == list(range(max(1, n - 49), n + 1))
        assert rec.next_message_id == n + 1
        bodies = {m.id: m.body for m in rec.messages["q"]}
        assert all(bodies[i] == b"p" * (i % 300) for i in got)
    assert len(segments(tmp_path)) < 20  # compaction kept up


def test_bytes_left_past_the_write_position_are_zeroed_by_the_next_write(tmp_path):
    """Defensive path: if junk sits past the write position (``_dirty_end``),
    the next write extends itself with zeros over it, and so does rotation."""
    s = JournalStore(tmp_path, segment_size=4096)
    s.open()
    s.append([msg(1)])
    s.sync()
    seg = segments(tmp_path)[-1]
    fd = os.open(seg, os.O_WRONLY)
    os.pwrite(fd, b"\xee" * 1500, s._pos)
    os.close(fd)
    s._dirty_end = s._pos + 1500
    s.append([msg(2)])
    s.sync()
    os.pwrite(s._fd, b"\xee" * 100, s._pos)  # and once more, then rotate away
    s._dirty_end = s._pos + 100
    for i in range(3, 12):
        s.append([msg(i, body=b"r" * 500)])
        s.sync()
    s.close()
    got, rec = reopen_ids(tmp_path)
    assert got == list(range(1, 12)) and rec.notes == []
