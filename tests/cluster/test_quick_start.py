"""docs/cluster.md's quick start, run as a user runs it: the doc's own shell
block, verbatim, from a directory laid out like a clone.

The block uses the fixed ports the doc shows (2181, 61611...), so it runs in
a network namespace of its own (``unshare``: a fresh loopback, nothing else
listening there) and a PID namespace, so every process it leaves running
(ZooKeeper, the three nodes) ends with it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.cluster]
ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "cluster.md"
ISOLATE = ["unshare", "--user", "--map-root-user", "--net", "--pid", "--fork", "--kill-child"]


def quick_start_block(doc: str) -> str:
    section = doc.split("## Quick start", 1)[1]
    return section.split("```sh\n", 1)[1].split("\n```", 1)[0] + "\n"


def isolation_works() -> bool:
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return False
    probe = subprocess.run([*ISOLATE, "ip", "link", "set", "lo", "up"], capture_output=True)
    return probe.returncode == 0


@pytest.mark.parametrize("pure", [False, True], ids=["as-installed", "SHOAL_PURE"])
def test_the_quick_start_run_verbatim_gives_three_member_nodes(tmp_path, pure):
    if not isolation_works():
        pytest.skip("needs unshare and ip (util-linux, iproute2) and user namespaces")
    stamps = list((ROOT / ".venv").glob(".run-*"))
    if not stamps:
        pytest.fail("no .venv here: run `make install` first")
    clone = tmp_path / "clone"  # what the block needs of a clone; it writes only here
    clone.mkdir()
    for name in ("Makefile", "pyproject.toml", ".venv"):
        (clone / name).symlink_to(ROOT / name)
    block = quick_start_block(DOC.read_text())
    (clone / "quick-start.sh").write_text(block)
    env = dict(os.environ)
    env.pop("SHOAL_PURE", None)
    if pure:
        env["SHOAL_PURE"] = "1"
    proc = subprocess.run(
        [*ISOLATE, "bash", "-c", "ip link set lo up && . ./quick-start.sh"],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    logs = {n: clone / f"node{n}.log" for n in (1, 2, 3)}
    logs = {n: path.read_text() if path.exists() else "" for n, path in logs.items()}
    assert proc.returncode == 0, (proc.stdout, proc.stderr, logs)
    rows = [line.split() for line in proc.stdout.splitlines() if line.startswith("n")]
    members = {row[0] for row in rows if "yes" in row}
    assert members == {"n1", "n2", "n3"}, proc.stdout
    assert "JOINING" not in proc.stdout and "FENCED" not in proc.stdout
    for log in logs.values():
        assert "Traceback" not in log
        ready = [line for line in log.splitlines() if " ready: " in line]
        assert len(ready) == 1 and ("(pure: SHOAL_PURE is set)" in ready[0]) == pure
