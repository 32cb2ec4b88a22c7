"""tests/skips.py in a real pytest run: a missing tool fails with CI set, a
kernel skip is named in the summary, a plain skip stays a skip."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent

CONFTEST = """
from skips import SkipReport

def pytest_configure(config):
    config.pluginmanager.register(SkipReport(), "shoal-skip-report")
"""

SKIPS = """
import pytest
from skips import needs_tools, skip_kernel, skip_missing

def test_tool():
    skip_missing("openssl")

@needs_tools("no-such-tool-shoal")
def test_marked():
    pass

def test_ring():
    skip_kernel("io_uring is unavailable")

def test_plain():
    pytest.skip("SHOAL_EXPECT_IMPL is not set")

@pytest.mark.xfail(reason="known", strict=True)
def test_xfail():
    raise AssertionError
"""

IMPORT_SKIP = """
import pytest
pytest.importorskip("no_such_module_shoal")

def test_never():
    pass
"""


def run(tmp_path: Path, files: dict[str, str], ci: str) -> subprocess.CompletedProcess[str]:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["PYTHONPATH"] = str(TESTS)
    if ci:
        env["CI"] = ci
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rfEs", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("ci", ["", "false", "true"], ids=["local", "ci-false", "ci"])
def test_missing_tools_fail_only_in_ci_and_kernel_skips_are_named(tmp_path, ci):
    res = run(tmp_path, {"conftest.py": CONFTEST, "test_x.py": SKIPS}, ci)
    out = res.stdout
    assert "skipped for the kernel" in out
    assert "1 test: io_uring is unavailable" in out
    if ci == "true":
        assert res.returncode == 1, out
        assert "1 failed, 2 skipped, 1 xfailed, 1 error" in out  # the mark skips at setup
        assert "CI is set, so a missing prerequisite fails: missing: openssl (make sysdeps)" in out
        assert "missing: no-such-tool-shoal (make sysdeps)" in out
    else:
        assert res.returncode == 0, out
        assert "4 skipped, 1 xfailed" in out


@pytest.mark.parametrize("ci", ["", "true"], ids=["local", "ci"])
def test_a_module_that_cannot_import_fails_the_run_in_ci(tmp_path, ci):
    files = {"conftest.py": CONFTEST, "test_y.py": IMPORT_SKIP, "test_z.py": "def test_z(): pass\n"}
    res = run(tmp_path, files, ci)
    out = res.stdout
    assert "1 passed, 1 skipped" in out
    if ci:
        assert res.returncode == 1, out
        assert "modules skipped with CI set (the run fails)" in out
        assert "test_y.py: could not import 'no_such_module_shoal'" in out
    else:
        assert res.returncode == 0, out
        assert "modules skipped" not in out
