"""bench/report.py renders the benchmark pages from bench/recorded/ alone: the committed
pages are what the records give, and every record's note reaches a page."""

from __future__ import annotations

import fnmatch
import json
from pathlib import Path

import pytest
from bench import report

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    """Both pages rendered into a temp dir from the recorded runs only (no raw results,
    nothing written back into bench/recorded/)."""
    out = tmp_path_factory.mktemp("docs")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(report, "RESULTS", out / "no-results")
        mp.setattr(report, "DOCS", out)
        mp.setattr(report, "DOC", out / "benchmarks.md")
        mp.setattr(report, "HISTORY", out / "benchmark-history.md")
        mp.setattr(report, "record", lambda summary: None)
        report.write_docs()
    return out


def test_the_committed_pages_are_what_the_records_render(rendered):
    for name in ("benchmarks.md", "benchmark-history.md"):
        assert (rendered / name).read_text() == (REPO / "docs" / name).read_text(), name


def test_the_benchmarks_page_stays_short_and_speaks_to_users(rendered):
    text = (rendered / "benchmarks.md").read_text()
    assert len(text.splitlines()) < 450
    for heading in ("## How to reproduce", "## Method", "## Results: standard matrix"):
        assert heading in text
    assert "## History" in text and "benchmark-history.md" in text
    assert "#17" not in text and "issue" not in text.lower()


def test_every_recorded_note_reaches_a_page(rendered):
    pages = "".join((rendered / n).read_text() for n in ("benchmarks.md", "benchmark-history.md"))
    notes = {
        path.name: data["note"]
        for path in sorted((REPO / "bench" / "recorded").glob("*.json"))
        if isinstance(data := json.loads(path.read_text()), dict) and data.get("note")
    }
    assert len(notes) > 40
    missing = [name for name, note in notes.items() if note.split("\n\n")[0] not in pages]
    assert missing == []


def test_profiling_findings_name_their_recorded_files():
    findings = json.loads((REPO / "bench/recorded/profiling-findings.json").read_text())
    recorded = {p.name for p in (REPO / "bench" / "recorded").glob("*.json")}
    for finding in findings["findings"]:
        for word in finding["text"].replace("`", " ").split():
            name = word.strip(".,;:()")
            if name.endswith(".json"):
                assert fnmatch.filter(recorded, name), (finding["title"], name)
