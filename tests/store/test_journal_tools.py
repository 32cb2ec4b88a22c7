"""`check` and `dump`: offline verification and listing of a journal."""

from __future__ import annotations

import base64
import json

from store_helpers import flip, msg, segments

from shoal.records import GroupParked, MessageRemoved, QueueDeclared
from shoal.store.journal import JournalStore
from shoal.store.journal.tools import check, dump, repair
from support import journal_frames


def build(directory, clean=True):
    s = JournalStore(directory, segment_size=4096)
    s.open()
    s.append([QueueDeclared("q", "q", "anycast")])
    for i in range(1, 21):
        s.append([msg(i, body=bytes([i]) * 200)])
        s.sync()  # one frame per write: a sync each, for frames to damage
    s.append([MessageRemoved("q", i) for i in range(1, 6)] + [GroupParked("q", "g")])
    if clean:
        s.close()
    else:  # a crash: the last write may be torn
        s.sync()
        s.crash()


def test_check_reports_statistics(tmp_path):
    build(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    r = check(tmp_path)
    json.dumps(r)
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # read-only
    assert r["ok"] is True
    assert r["torn_tail"] == [] and r["corruption"] == []
    assert len(r["segments"]) == len(segments(tmp_path)) >= 2
    assert r["records_by_type"]["MessageStored"] == 20
    assert r["records_by_type"]["MessageRemoved"] == 5
    assert r["records_by_type"]["Snapshot"] == len(r["segments"])
    assert r["live_messages"] == 15 and r["live_messages_by_queue"] == {"q": 15}
    assert r["queues"] == 1 and r["parked_groups"] == 1
    assert r["next_message_id"] == 21
    assert r["bytes"] == sum(p.stat().st_size for p in segments(tmp_path))
    assert r["body_bytes"] == 20 * 200


def test_check_finds_corruption_and_torn_tails(tmp_path):
    build(tmp_path, clean=False)
    first, *_rest, last = segments(tmp_path)
    start = journal_frames(first)[2].offset
    flip(first, start + 40)
    end = journal_frames(last)[-1].end
    with open(last, "r+b") as f:
        f.seek(end)
        f.write(b"\x01\x02\x03")
    r = check(tmp_path)
    assert r["ok"] is False
    assert r["corruption"][0]["segment"] == first.name
    assert r["corruption"][0]["offset"] == start
    assert r["torn_tail"][0]["segment"] == last.name
    assert r["torn_tail"][0]["offset"] == end


def test_check_of_an_empty_directory(tmp_path):
    r = check(tmp_path)
    assert r["ok"] and r["segments"] == [] and r["live_messages"] == 0


def test_dump_lists_every_record_in_order(tmp_path):
    build(tmp_path)
    out = list(dump(tmp_path))
    json.dumps(out)
    types = [d["type"] for d in out]
    assert types[0] == "Snapshot" and types[1] == "QueueDeclared"
    stored = [d for d in out if d["type"] == "MessageStored"]
    assert [d["id"] for d in stored] == list(range(1, 21))
    d = stored[0]
    assert d["body_len"] == 200 and d["body_truncated"] is True
    assert base64.b64decode(d["body_b64"]) == b"\x01" * 64
    assert d["headers"] == {"k": "v1"} and d["segment"].endswith(".seg")
    batches = [d["batch"] for d in out]
    assert batches == sorted(batches)
    full = list(dump(tmp_path, body_bytes=None))
    first = next(d for d in full if d["type"] == "MessageStored")
    assert base64.b64decode(first["body_b64"]) == b"\x01" * 200


def test_dump_shows_damage_in_place(tmp_path):
    build(tmp_path)
    first = segments(tmp_path)[0]
    start = journal_frames(first)[3].offset
    flip(first, start + 20)
    out = list(dump(tmp_path))
    i = next(i for i, d in enumerate(out) if d["type"] == "damage")
    assert out[i]["kind"] == "corrupt" and out[i]["offset"] == start
    assert out[i - 1]["frame_offset"] < start < out[i + 1]["frame_offset"]


def test_check_calls_damage_in_the_last_frame_after_a_clean_close_corruption(tmp_path):
    """No write can be torn after a clean close: damage in the last frame is
    corruption, and check names the messages it held."""
    s = JournalStore(tmp_path, segment_size=64 * 1024)
    s.open()
    s.append([msg(i, group="g", body=b"x" * 100) for i in range(1, 20)])
    s.close()
    [seg] = segments(tmp_path)
    start, end = journal_frames(seg)[-1].offset, journal_frames(seg)[-1].payload_end
    flip(seg, end - 10)  # inside the last message's body
    r = check(tmp_path)
    assert r["ok"] is False and r["closed_cleanly"] is True and r["torn_tail"] == []
    [c] = r["corruption"]
    assert c["offset"] == start and "closed cleanly" in c["reason"]
    assert [(m["queue"], m["id"], m["group"]) for m in c["messages"]] == [
        ("q", i, "g") for i in range(1, 20)
    ]
    damage = [d for d in dump(tmp_path) if d["type"] == "damage"]
    assert [d["kind"] for d in damage] == ["corrupt"]


def test_repair_tool_lists_what_it_dropped(tmp_path):
    s = JournalStore(tmp_path, segment_size=64 * 1024)
    s.open()
    s.append([msg(1)])
    s.sync()
    s.append([msg(2, group="g"), msg(3, "other")])
    s.sync()
    s.append([msg(4)])
    s.close()
    [seg] = segments(tmp_path)
    start = journal_frames(seg)[2].offset
    flip(seg, start + 40)
    r = repair(tmp_path)
    assert r["dropped"] == 2
    assert r["dropped_messages"] == [
        {"queue": "q", "id": 2, "group": "g"},
        {"queue": "other", "id": 3, "group": None},
    ]
    assert any("'q' id 2 group 'g'" in n for n in r["notes"])
    assert check(tmp_path)["ok"] is True
    again = JournalStore(tmp_path)
    rec = again.open()
    again.close()
    assert [m.id for m in rec.messages["q"]] == [1, 4] and rec.notes == []
