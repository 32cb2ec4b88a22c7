"""docs/tour.md runs as written: every ``sh`` and ``python`` block, in order, on one broker;
and so does the README's first send and receive."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
TOUR = REPO / "docs" / "tour.md"
BLOCK = re.compile(r"^```(sh|python)\n(.*?)^```", re.S | re.M)


def blocks(text: str | None = None) -> list[tuple[str, str]]:
    text = TOUR.read_text() if text is None else text
    return [(m.group(1), m.group(2)) for m in BLOCK.finditer(text)]


def readme_section(title: str) -> str:
    """The README's section under ``## title``, up to the next section."""
    text = (REPO / "README.md").read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else None]


def test_the_tour_has_runnable_blocks():
    kinds = [k for k, _ in blocks()]
    assert kinds.count("sh") >= 4 and kinds.count("python") >= 5


def run_blocks(srv, tmp_path: Path, snippets: list[tuple[str, str]]) -> str:
    """Run each block in order against ``srv`` (its ports in place of the defaults) with
    this environment's ``shoal`` and ``python`` first on PATH; their output, joined."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["SHOAL_URL"] = f"stomp://127.0.0.1:{srv.stomp_port}"
    env["SHOAL_HTTP"] = srv.http_url
    outputs = []
    for i, (kind, code) in enumerate(snippets):
        code = code.replace("61613", str(srv.stomp_port)).replace("8161", str(srv.http_port))
        if kind == "sh":
            cmd = ["bash", "-e", "-o", "pipefail", "-c", code]
        else:
            script = tmp_path / f"snippet{i}.py"
            script.write_text(code)
            cmd = [sys.executable, str(script)]
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path
        )
        assert proc.returncode == 0, f"block {i} ({kind}) failed:\n{code}\n{proc.stderr}"
        assert "Traceback" not in proc.stderr
        outputs.append(proc.stdout)
    return "\n".join(outputs)


def test_every_tour_snippet_runs(shoal_server, tmp_path):
    text = run_blocks(shoal_server(), tmp_path, blocks())
    # Spot checks that the tour's comments tell the truth.
    assert "buy 10 AAPL\nsell 5 IBM\n" in text
    assert "1\n2\n3\n" in text and "4\n5\n6\n" in text
    assert "[('clock', 'tick 0'), ('clock', 'tick 1'), ('clock', 'tick 2')]" in text
    assert "True 1\n" in text and "b'RAW'" in text
    assert "bad-header - header 'JMSXGroupSeq'" in text
    assert "True hello" in text


def test_the_readmes_first_send_and_receive_runs(shoal_server, tmp_path):
    snippets = blocks(readme_section("First send and receive"))
    assert [kind for kind, _ in snippets] == ["sh", "python"]
    text = run_blocks(shoal_server(), tmp_path, snippets)
    assert "buy 10 AAPL\nsell 5 IBM\n" in text
    assert "AAPL buy 10 AAPL\n" in text
