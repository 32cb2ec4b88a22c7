"""Journal recovery: torn tails are cut, corruption is reported, repair keeps
every valid record. Damage is made at every offset of small journals."""

from __future__ import annotations

import os
import shutil

import pytest
from store_helpers import flip, ids, msg, recovered_equal, segments, side_files

from shoal.errors import CorruptRecordError
from shoal.records import (
    DeliveryCounted,
    GroupParked,
    LogCommitted,
    MessageRemoved,
    QueueDeclared,
    SinkBatchPublished,
)
from shoal.store.journal import JournalStore
from shoal.store.replay_fold import replay
from support import SEGMENT_HEADER_SIZE as SEG_HEADER
from support import journal_frames

# The batches of the small journal the damage tests use (one append each).
BATCHES = [
    [QueueDeclared("q", "q", "anycast", {"group-buckets": 2})],
    [msg(1), msg(2, group="g")],
    [msg(3, body=b"")],
    [MessageRemoved("q", 1), DeliveryCounted("q", 2, 1)],
    [msg(4, "r", headers={"a": "b", "c": "d"}), GroupParked("r", "g")],
    [msg(5, body=b"\0" * 13)],
    [SinkBatchPublished("s", 1), LogCommitted("log", 0, 1)],
    [msg(6), msg(7), msg(8)],
]


def build(directory, *, preallocate, segment_size=64 * 1024, batches=BATCHES, clean=False):
    """One sync per batch; then a crash (no clean-close marker: damage at the
    tail may be a torn write) or, with ``clean``, a clean close."""
    s = JournalStore(directory, segment_size=segment_size, preallocate=preallocate)
    s.open()
    for b in batches:
        s.append(b)
        s.sync()
    if clean:
        s.close()
    else:
        s.crash()


def expected(n):
    """What recovery must return when exactly the first n batches survive."""
    return replay([r for b in BATCHES[:n] for r in b])


def open_journal(directory, **kw):
    s = JournalStore(directory, segment_size=64 * 1024, **kw)
    try:
        return s.open()
    finally:
        s.crash()


# -- torn tails ---------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("preallocate", [False, True], ids=["truncate", "zero-fill"])
def test_cut_at_every_offset_keeps_the_whole_batches_before_it(tmp_path, no_fsync, preallocate):
    """A crash mid-write: the file is cut (or, preallocated, its tail never got
    written and reads as zeros) at every offset. Recovery keeps exactly the
    batches that were complete, notes the cut, and the journal stays usable."""
    pristine = tmp_path / "pristine"
    build(pristine, preallocate=preallocate, segment_size=4096)
    [seg] = segments(pristine)
    original = seg.read_bytes()
    fr = journal_frames(seg)
    assert len(fr) == len(BATCHES) + 1  # the opening snapshot + one frame per batch
    data_end = fr[-1].end
    work = tmp_path / "work"
    work.mkdir()
    for cut in range(SEG_HEADER, data_end + 1):
        for name in os.listdir(work):  # (cheaper than a new directory each time)
            os.unlink(work / name)
        target = work / seg.name
        if preallocate:
            damaged = original[:cut] + bytes(len(original) - cut)
        else:
            damaged = original[:cut]
        target.write_bytes(damaged)
        # The frames that survive are the leading ones whose bytes are all
        # still there (a zero-filled cut inside zero padding changes nothing).
        whole = 0
        while whole < len(fr):
            a, b = fr[whole].offset, fr[whole].end
            if damaged[a:b] != original[a:b]:
                break
            whole += 1
        rec = open_journal(work, preallocate=preallocate)
        survived = max(0, whole - 1)
        assert recovered_equal(rec, expected(survived)), cut
        rest = damaged[fr[whole - 1].end if whole else SEG_HEADER :]
        if not any(rest):
            assert rec.notes == [], cut
        else:
            assert len(rec.notes) == 1 and "torn" in rec.notes[0], (cut, rec.notes)
            assert any(n.startswith(seg.name + ".torn-") for n in os.listdir(work))
        if cut % 5 == 0:  # the journal goes on after the cut
            s = JournalStore(work, segment_size=64 * 1024, preallocate=preallocate)
            s.open()
            s.append([msg(100)])
            s.close()
            again = open_journal(work, preallocate=preallocate)
            assert again.notes == []
            assert ids(again) == ids(expected(survived)) + [100]


def test_torn_bytes_are_kept_aside(tmp_path):
    build(tmp_path, preallocate=False)
    [seg] = segments(tmp_path)
    last = journal_frames(seg)[-1]
    start, aligned = last.offset, last.end
    data = seg.read_bytes()
    with open(seg, "r+b") as f:
        f.truncate(aligned - 3)
    rec = open_journal(tmp_path, preallocate=False)
    assert recovered_equal(rec, expected(len(BATCHES) - 1))
    assert (tmp_path / f"{seg.name}.torn-{start}").read_bytes() == data[start : aligned - 3]
    assert seg.stat().st_size == start
    assert open_journal(tmp_path).notes == []  # cut once, for good


def test_garbage_after_the_end_in_the_last_segment_is_a_torn_tail(tmp_path):
    # A torn write whose later sectors reached the disk but not the first one.
    build(tmp_path, preallocate=True)
    [seg] = segments(tmp_path)
    end = journal_frames(seg)[-1].end
    with open(seg, "r+b") as f:
        f.seek(end + 512)
        f.write(b"\x17" * 100)
    rec = open_journal(tmp_path)
    assert recovered_equal(rec, expected(len(BATCHES)))
    assert "torn" in rec.notes[0]


# -- corruption ---------------------------------------------------------------


@pytest.mark.slow
def test_flipped_byte_anywhere_is_reported_or_cut_never_accepted(tmp_path, no_fsync):
    """Flip one byte at every position of a two-segment journal. Recovery must
    raise CorruptRecordError naming the segment and the damaged frame, or,
    for the very last frame, cut it as a torn tail; it never returns
    different data silently."""
    pristine = tmp_path / "pristine"
    many = BATCHES + [[msg(i, body=bytes([i]) * 600)] for i in range(20, 26)]
    build(pristine, preallocate=True, segment_size=4096, batches=many)
    segs = segments(pristine)
    assert len(segs) >= 2
    all_batches = replay([r for b in many for r in b])
    minus_last = replay([r for b in many[:-1] for r in b])
    work = tmp_path / "work"
    shutil.copytree(pristine, work)
    checked = 0
    for si, seg in enumerate(segs):
        fr = journal_frames(seg)
        data_end = fr[-1].end
        original = seg.read_bytes()
        is_last = si == len(segs) - 1
        positions = list(range(data_end)) + list(range(data_end, len(original), 97))
        target = work / seg.name
        fd = os.open(target, os.O_WRONLY)
        damaged = bytearray(original)
        for pos in positions:
            # Rewrite in place (truncating files is slow on this filesystem).
            damaged[pos] ^= 0xFF
            os.pwrite(fd, damaged, 0)
            damaged[pos] ^= 0xFF
            try:
                rec = open_journal(work)
            except CorruptRecordError as e:
                assert e.segment == str(target)
                if pos < SEG_HEADER:
                    assert e.offset == 0, pos
                elif pos >= data_end:
                    assert not is_last and e.offset == data_end, pos
                else:
                    frame = next(f for f in fr if f.offset <= pos < f.end)
                    assert e.offset == frame.offset, pos
                    # In the last frame only a flipped padding byte is
                    # corruption: the CRC checks, no torn write leaves that.
                    assert not (is_last and frame is fr[-1]) or "padding" in e.reason, pos
            else:
                if is_last and pos >= data_end:
                    assert recovered_equal(rec, all_batches), pos
                else:
                    assert is_last and fr[-1].offset <= pos < fr[-1].end, pos
                    assert recovered_equal(rec, minus_last), pos
                assert len(rec.notes) == 1 and "torn" in rec.notes[0]
            for name in side_files(work):
                os.unlink(work / name)
            checked += 1
        os.pwrite(fd, original, 0)
        os.close(fd)
    assert checked > 4000


def test_corruption_error_names_segment_and_offset(tmp_path):
    build(tmp_path, preallocate=True)
    [seg] = segments(tmp_path)
    start, end = journal_frames(seg)[3].offset, journal_frames(seg)[3].payload_end
    flip(seg, end - 1)
    with pytest.raises(CorruptRecordError) as ei:
        open_journal(tmp_path)
    e = ei.value
    assert (e.segment, e.offset) == (str(seg), start)
    assert "CRC" in e.reason and seg.name in str(e)
    assert e.code == "store"


def test_a_batch_from_another_segment_does_not_validate(tmp_path):
    """Frames are salted per segment: a frame copied from elsewhere fails."""
    big = [[msg(i, body=b"w" * 500)] for i in range(30)]
    build(tmp_path, preallocate=True, segment_size=4096, batches=big)
    s1, s2 = segments(tmp_path)[:2]
    f1 = journal_frames(s1)
    start, aligned = f1[2].offset, f1[2].end
    foreign = journal_frames(s2)[1]
    foreign_start, foreign_aligned = foreign.offset, foreign.end
    chunk = s2.read_bytes()[foreign_start:foreign_aligned]
    assert len(chunk) == aligned - start
    with open(s1, "r+b") as f:
        f.seek(start)
        f.write(chunk)
    with pytest.raises(CorruptRecordError) as ei:
        open_journal(tmp_path)
    assert ei.value.offset == start


def test_stale_batch_numbers_are_corruption(tmp_path):
    """A valid-looking frame that repeats an earlier batch number (e.g. a
    block written twice) is not accepted, not even at the tail: its CRC
    checks, so no torn write left it."""
    build(tmp_path, preallocate=True)
    [seg] = segments(tmp_path)
    fr = journal_frames(seg)
    data = seg.read_bytes()
    a0, a1 = fr[2].offset, fr[2].end
    # append a copy of frame 2 after the last frame: a stale batch in the tail
    end = fr[-1].end
    with open(seg, "r+b") as f:
        f.seek(end)
        f.write(data[a0:a1])
    with pytest.raises(CorruptRecordError) as ei:
        open_journal(tmp_path)
    assert ei.value.offset == end and "sequence" in ei.value.reason


# -- repair -------------------------------------------------------------------


def test_repair_keeps_every_valid_record_and_moves_the_damage_aside(tmp_path):
    build(tmp_path, preallocate=True)
    [seg] = segments(tmp_path)
    fr = journal_frames(seg)
    start, aligned = fr[3].offset, fr[3].end  # batch index 2: [msg(3)]
    flip(seg, start + 20)
    damaged = seg.read_bytes()[start:aligned]
    with pytest.raises(CorruptRecordError):
        open_journal(tmp_path)
    rec = open_journal(tmp_path, repair=True)
    want = replay([r for i, b in enumerate(BATCHES) if i != 2 for r in b])
    assert recovered_equal(rec, want)
    assert (tmp_path / f"{seg.name}.damaged-{start}").read_bytes() == damaged
    assert any("repair" in n and f"offset {start}" in n for n in rec.notes)
    # the repaired journal opens cleanly, without repair, and goes on
    again = open_journal(tmp_path)
    assert again.notes == [] and recovered_equal(again, want)


def test_repair_rebuilds_a_damaged_segment_header(tmp_path):
    build(tmp_path, preallocate=True)
    [seg] = segments(tmp_path)
    flip(seg, 3)  # inside the magic
    with pytest.raises(CorruptRecordError) as ei:
        open_journal(tmp_path)
    assert ei.value.offset == 0
    rec = open_journal(tmp_path, repair=True)
    assert recovered_equal(rec, expected(len(BATCHES)))  # the salt was intact
    assert side_files(tmp_path) == [f"{seg.name}.damaged-0"]
    assert open_journal(tmp_path).notes == []


def test_repair_of_a_damaged_salt_moves_every_frame_aside(tmp_path):
    more = BATCHES + [[msg(i, body=b"q" * 300)] for i in range(20, 40)]
    build(tmp_path, preallocate=True, segment_size=4096, batches=more)
    first = segments(tmp_path)[0]
    flip(first, 13)  # the salt: no frame of this segment checks out any more
    rec = open_journal(tmp_path, repair=True)
    names = side_files(tmp_path)
    assert f"{first.name}.damaged-0" in names and f"{first.name}.damaged-{SEG_HEADER}" in names
    assert rec.notes and all("repair" in n for n in rec.notes)
    assert ids(rec)  # later segments still recovered
    assert open_journal(tmp_path).notes == []


def test_repair_in_a_middle_segment_keeps_later_segments(tmp_path):
    many = BATCHES + [[msg(i, body=b"m" * 200)] for i in range(20, 60)]
    build(tmp_path, preallocate=True, segment_size=4096, batches=many)
    segs = segments(tmp_path)
    assert len(segs) >= 3
    mid = segs[1]
    fr = journal_frames(mid)
    start, aligned = fr[2].offset, fr[2].end
    flip(mid, start + 30)
    with pytest.raises(CorruptRecordError) as ei:
        open_journal(tmp_path)
    assert (ei.value.segment, ei.value.offset) == (str(mid), start)
    rec = open_journal(tmp_path, repair=True)
    lost = [m.id for m in replay([r for b in many for r in b]).messages["q"]]
    got = ids(rec)
    assert len(got) == len(lost) - 1 and set(got) < set(lost)  # exactly one batch moved aside
    assert (tmp_path / f"{mid.name}.damaged-{start}").stat().st_size == aligned - start


def test_unfinished_segment_creation_is_cleaned_up(tmp_path):
    build(tmp_path, preallocate=True)
    (tmp_path / "0000000000000002.seg.tmp").write_bytes(b"half a segment")
    rec = open_journal(tmp_path)
    assert recovered_equal(rec, expected(len(BATCHES)))
    assert any("0000000000000002.seg.tmp" in n for n in rec.notes)
    assert not (tmp_path / "0000000000000002.seg.tmp").exists()


def test_second_process_cannot_open_the_same_journal(tmp_path):
    from shoal.errors import StoreError

    a = JournalStore(tmp_path)
    a.open()
    b = JournalStore(tmp_path)
    with pytest.raises(StoreError, match="in use"):
        b.open()
    a.close()
    b.open()
    b.close()


def test_lazy_bodies_leave_queue_bodies_on_disk_for_load_body(tmp_path):
    """With lazy_bodies, open() returns queue messages without their bodies
    (body None, body_size their length) and load_body reads each back; log
    queue records still come with theirs. Everything else is as without."""
    log_msg = msg(9, "log", body=b"log body", bucket=1, offset=0)
    build(tmp_path, preallocate=False, batches=[*BATCHES, [log_msg]])
    eager = JournalStore(tmp_path)
    want = eager.open()
    eager.close()
    lazy = JournalStore(tmp_path, lazy_bodies=True)
    got = lazy.open()
    try:
        assert got.queues == want.queues and got.next_message_id == want.next_message_id
        assert got.log_commits == want.log_commits and got.parked == want.parked
        assert list(got.messages) == list(want.messages)
        for queue, records in want.messages.items():
            assert [m.id for m in got.messages[queue]] == [m.id for m in records]
            for w, g in zip(records, got.messages[queue]):
                if w.bucket >= 0:
                    assert g.body == w.body
                    continue
                assert g.body is None and g.body_size == len(w.body)
                assert lazy.load_body(g.id, queue) == w.body
                g.body = w.body
                assert g == w  # every other field as an eager open gives it
    finally:
        lazy.close()


# -- clean close, torn group-commit writes -------------------------------------


def test_damage_in_the_last_frame_after_a_clean_close_is_corruption(tmp_path):
    """A cleanly closed journal has no torn write: damage in its last frame
    is corruption (it used to be cut as a torn tail, dropping acknowledged
    messages with a warning). Repair drops the frame and names its messages."""
    build(tmp_path, preallocate=True, clean=True)
    [seg] = segments(tmp_path)
    start, end = (
        journal_frames(seg)[-1].offset,
        journal_frames(seg)[-1].payload_end,
    )  # [msg(6), msg(7), msg(8)]
    flip(seg, end - 1)
    with pytest.raises(CorruptRecordError) as ei:
        open_journal(tmp_path)
    assert ei.value.offset == start and "closed cleanly" in ei.value.reason
    rec = open_journal(tmp_path, repair=True)
    assert recovered_equal(rec, expected(len(BATCHES) - 1))
    assert rec.lost == [("q", 6, None), ("q", 7, None), ("q", 8, None)]
    assert "3 messages (queue 'q' id 6, queue 'q' id 7, queue 'q' id 8)" in rec.notes[0]
    assert open_journal(tmp_path).notes == []


def test_a_clean_close_marker_catches_missing_frames(tmp_path):
    build(tmp_path, preallocate=True, clean=True)
    [seg] = segments(tmp_path)
    last = journal_frames(seg)[-1]
    start, aligned = last.offset, last.end
    with open(seg, "r+b") as f:  # the last frame zeroed: looks like a clean end
        f.seek(start)
        f.write(bytes(aligned - start))
    with pytest.raises(CorruptRecordError) as ei:
        open_journal(tmp_path)
    assert "frames are missing" in ei.value.reason


def test_reopening_after_a_clean_close_forgets_the_marker(tmp_path):
    """Once reopened, a crash may tear a write again: the marker is gone."""
    build(tmp_path, preallocate=True, clean=True)
    s = JournalStore(tmp_path, segment_size=64 * 1024)
    s.open()
    s.append([msg(50), msg(51)])
    s.crash()
    [seg] = segments(tmp_path)
    end = journal_frames(seg)[-1].end
    with open(seg, "r+b") as f:
        f.seek(end + 600)
        f.write(b"\x55" * 300)  # a later sector of an unsynced write reached the disk
    rec = open_journal(tmp_path)
    assert recovered_equal(rec, expected(len(BATCHES)))
    assert "torn" in rec.notes[0]


SECTOR = 512


def _one_group_write(directory, n_batches):
    """BATCHES synced one by one, then ``n_batches`` appends synced by one
    fsync (group commit), then a crash. Returns the torn write's extent."""
    build(directory, preallocate=True)
    [seg] = segments(directory)
    start = journal_frames(seg)[-1].end
    s = JournalStore(directory, segment_size=64 * 1024)
    s.open()
    for i in range(n_batches):
        s.append([msg(100 + i, group=f"g{i % 3}", body=bytes([i + 1]) * 700)])
    s.sync()
    s.crash()
    return seg, start, journal_frames(seg)[-1].end


def _sectors(start, end):
    """The 512-byte sectors a write of ``[start, end)`` touches, as ranges."""
    first = start // SECTOR * SECTOR
    return [(max(a, start), min(a + SECTOR, end)) for a in range(first, end, SECTOR)]


@pytest.mark.parametrize("n_batches", [2, 8, 24])
@pytest.mark.parametrize(
    "lost", ["first", "all-but-last", "all-but-first", "middle", "every-other"]
)
def test_a_torn_group_commit_write_is_a_torn_tail_dropped_whole(tmp_path, n_batches, lost):
    """Power cut during one write holding several batches: some of its sectors
    never reached the disk (zeros, as preallocated). Nobody heard it was
    stored: recovery drops the whole write by itself, never part of it, and
    names what it dropped. (It used to refuse to start: "valid data follows".)"""
    seg, start, end = _one_group_write(tmp_path, n_batches)
    sectors = _sectors(start, end)
    assert len(sectors) >= 2
    pick = {
        "first": sectors[:1],
        "all-but-last": sectors[:-1],
        "all-but-first": sectors[1:],
        "middle": sectors[len(sectors) // 2 : len(sectors) // 2 + 1],
        "every-other": sectors[::2],
    }[lost]
    with open(seg, "r+b") as f:
        for a, b in pick:
            f.seek(a)
            f.write(bytes(b - a))
    for repair in (False, True):  # repair follows the same rule
        work = tmp_path / f"work-{repair}"
        shutil.copytree(tmp_path, work, ignore=shutil.ignore_patterns("work-*"))
        rec = open_journal(work, repair=repair)
        assert recovered_equal(rec, expected(len(BATCHES))), repair
        assert len(rec.notes) == 1 and "torn" in rec.notes[0]
        listed = [(q, i) for q, i, _g in rec.lost]
        # what the note names is what the surviving bytes still show
        assert set(listed) <= {("q", 100 + i) for i in range(n_batches)}
        if lost == "first":  # later sectors intact: their messages are named
            assert ("q", 100 + n_batches - 1) in listed
        assert f"{len(listed)} messages" in rec.notes[0]


@pytest.mark.parametrize("reopen", [False, True], ids=["running", "recovered"])
def test_load_body_without_a_queue_finds_a_copy_left_in_another_queue(tmp_path, reopen):
    # A topic's copies share a message id; load_body(id) reads any live one,
    # also after the copy its index named first was acked.
    s = JournalStore(tmp_path)
    s.open()
    s.append([msg(7, "a", body=b"same"), msg(7, "b", body=b"same")])
    s.sync()
    if reopen:
        s.close()
        s = JournalStore(tmp_path)
        s.open()
    try:
        for first in ("a", "b"):  # whichever copy the index names, ack it
            s.append([MessageRemoved(first, 7)])
            s.sync()
            other = "b" if first == "a" else "a"
            assert s.load_body(7) == b"same" == s.load_body(7, other)
            s.append([msg(7, first, body=b"same")])  # back, for the other order
            s.sync()
        s.append([MessageRemoved("a", 7), MessageRemoved("b", 7)])
        s.sync()
        with pytest.raises(KeyError):
            s.load_body(7)  # no copy is live
    finally:
        s.close()
