"""`shoal journal check|repair` on a damaged journal: the messages lost are named."""

from __future__ import annotations

import json
import subprocess
import sys

from store_helpers import flip, msg, segments

from shoal.store.journal import JournalStore
from support import journal_frames


def shoal(*args: str) -> tuple[int, str, str]:
    proc = subprocess.run(
        [sys.executable, "-m", "shoal.cli", *args], capture_output=True, timeout=60, check=False
    )
    out, err = proc.stdout.decode(), proc.stderr.decode()
    assert "Traceback" not in err, err
    return proc.returncode, out, err


def damaged_journal(directory):
    """Three batches, a clean close, then a byte flipped in the middle batch."""
    s = JournalStore(directory, segment_size=64 * 1024)
    s.open()
    s.append([msg(1)])
    s.sync()
    s.append([msg(2, group="g"), msg(3, "other")])
    s.sync()
    s.append([msg(4)])
    s.close()
    [seg] = segments(directory)
    flip(seg, journal_frames(seg)[2].offset + 40)


def test_check_reports_the_damage_and_repair_lists_the_dropped_messages(tmp_path):
    damaged_journal(tmp_path)
    code, out, _ = shoal("journal", "check", str(tmp_path))
    assert code == 1 and "CORRUPT" in out.splitlines()[0]
    assert "2 messages (queue 'q' id 2 group 'g', queue 'other' id 3)" in out
    assert "shoal journal repair" in out
    code, out, _ = shoal("journal", "repair", str(tmp_path))
    assert code == 0, out
    assert "messages dropped: 2" in out
    assert "queue 'q' id 2 group 'g', queue 'other' id 3" in out
    code, out, _ = shoal("journal", "check", str(tmp_path), "--json")
    report = json.loads(out)
    assert code == 0 and report["ok"] and report["live_messages"] == 2


def test_repair_json_and_a_directory_without_journal(tmp_path):
    damaged_journal(tmp_path / "j")
    code, out, _ = shoal("journal", "repair", str(tmp_path / "j"), "--json")
    report = json.loads(out)
    assert code == 0 and report["dropped"] == 2
    assert report["dropped_messages"][0] == {"queue": "q", "id": 2, "group": "g"}
    (tmp_path / "empty").mkdir()
    code, _out, err = shoal("journal", "repair", str(tmp_path / "empty"))
    assert code != 0 and "no journal segments" in err


def test_repair_refuses_a_journal_in_use(tmp_path):
    damaged_journal(tmp_path)
    s = JournalStore(tmp_path, repair=True)
    s.open()
    try:
        code, _out, err = shoal("journal", "repair", str(tmp_path))
    finally:
        s.close()
    assert code != 0 and "in use" in err
