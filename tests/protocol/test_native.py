"""Which implementation runs: the mypyc-compiled hot path or its pure-Python sources.

`make test` runs the suite twice and says what each run must load through
SHOAL_EXPECT_IMPL, so a run that silently tests the other one fails here.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import shoal
from shoal import _native
from shoal.protocol.amqp import proton_calls
from skips import missing

PROBE = (
    "import shoal._native as n\n"
    "print(' '.join(n.implementation(m) for m in n.COMPILED_MODULES))\n"
    "print(n.pure_reason)\n"
)


def probe(package_parent: Path, **env: str) -> tuple[list[str], str, str]:
    """(implementation of each compiled module, pure_reason, stderr) in a fresh interpreter."""
    full_env = {k: v for k, v in os.environ.items() if k != "SHOAL_PURE"}
    full_env.update(env, PYTHONPATH=str(package_parent))
    out = subprocess.run(
        [sys.executable, "-c", PROBE], env=full_env, capture_output=True, text=True, check=True
    )
    impls, reason = out.stdout.split("\n")[:2]
    return impls.split(), reason, out.stderr


def has_build(package_dir: Path) -> bool:
    return all(
        any(package_dir.parent.joinpath(*m.split(".")).parent.glob(m.rpartition(".")[2] + ".*.so"))
        for m in _native.COMPILED_MODULES
    )


PACKAGE_DIR = Path(shoal.__file__).resolve().parent
needs_build = pytest.mark.skipif(
    not has_build(PACKAGE_DIR), reason=missing("the compiled build", "make compile")
)


def test_the_expected_implementation_is_loaded() -> None:
    expected = os.environ.get("SHOAL_EXPECT_IMPL")
    if expected is None:
        pytest.skip("SHOAL_EXPECT_IMPL is not set (make test sets it)")
    assert expected in ("compiled", "pure")
    loaded = {m: _native.implementation(m) for m in _native.COMPILED_MODULES}
    assert loaded == dict.fromkeys(_native.COMPILED_MODULES, expected), _native.pure_reason
    # The Cython module calling Proton, or its pure twin.
    assert expected == proton_calls.IMPLEMENTATION


def test_shoal_pure_runs_the_sources_even_beside_a_build() -> None:
    impls, reason, _ = probe(PACKAGE_DIR.parent, SHOAL_PURE="1")
    assert impls == ["pure"] * len(_native.COMPILED_MODULES)
    assert reason == "SHOAL_PURE is set"


def test_every_compiled_module_records_its_source() -> None:
    assert all(_native.source_path(m).is_file() for m in _native.COMPILED_MODULES)


@needs_build
def test_a_build_runs_until_its_source_changes(tmp_path: Path) -> None:
    copy = tmp_path / "shoal"
    shutil.copytree(PACKAGE_DIR, copy, ignore=shutil.ignore_patterns("__pycache__"))
    impls, reason, err = probe(tmp_path)
    assert impls == ["compiled"] * len(_native.COMPILED_MODULES)
    assert reason == ""
    edited = copy / "protocol" / "stomp" / "codec.py"
    edited.write_text(edited.read_text() + "\n# edited after the build\n")
    impls, reason, err = probe(tmp_path)
    assert impls == ["pure"] * len(_native.COMPILED_MODULES)  # never old code, never a mix
    assert "shoal.protocol.stomp.codec" in reason
    assert "make compile" in err


@needs_build
def test_a_build_without_its_record_is_not_trusted(tmp_path: Path) -> None:
    copy = tmp_path / "shoal"
    shutil.copytree(PACKAGE_DIR, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / _native.BUILD_INFO).unlink()
    impls, _, err = probe(tmp_path)
    assert impls == ["pure"] * len(_native.COMPILED_MODULES)
    assert "RuntimeWarning" in err
