"""Builds the compiled hot path (src/shoal/_native.py lists it) with mypyc,
and Proton's calls (protocol/amqp/_proton_calls.pyx) with Cython.

Metadata lives in pyproject.toml; this file only adds the extension modules:

* compiled when mypyc (it ships with mypy) can be imported and a C compiler
  works; otherwise the pure-Python modules are installed alone. The Cython
  module is built alongside when Cython can be imported (else
  protocol/amqp/proton_calls.py calls Proton through cffi). mypy is not a
  build requirement (it would add ~45 s to a cache-less `make run`): the
  compiled build comes from `make compile`, or from `pip install
  --no-build-isolation` where mypy and setuptools>=68 are installed;
* ``SHOAL_PURE=1`` skips compiling; ``SHOAL_COMPILE=1`` makes a missing
  mypyc or a failed compile an error instead of a silent fallback (CI).
"""

from __future__ import annotations

import hashlib
import json
import os
import runpy
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent
NATIVE = runpy.run_path(str(HERE / "src" / "shoal" / "_native.py"))
MODULES: tuple[str, ...] = NATIVE["COMPILED_MODULES"]
CYTHON_MODULE: str = NATIVE["CYTHON_MODULE"]
TRUE = {"1", "true", "yes", "on"}


def flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in TRUE


def source(module: str) -> Path:
    suffix = ".pyx" if module == CYTHON_MODULE else ".py"
    return HERE / "src" / Path(*module.split(".")).with_suffix(suffix)


class BuildExt(build_ext):
    """build_ext that records which sources the compiled modules came from,
    so ``import shoal`` can refuse a stale build (see _native.py)."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:
            if flag("SHOAL_COMPILE"):
                raise
            print(f"shoal: compiling failed ({exc}); installing pure Python", file=sys.stderr)
            return
        built = {ext.name for ext in self.extensions}
        hashed = [*MODULES, CYTHON_MODULE] if CYTHON_MODULE in built else list(MODULES)
        hashes = {m: hashlib.sha256(source(m).read_bytes()).hexdigest() for m in hashed}
        # Beside the compiled modules: the source tree (editable) or build/lib.
        pkg_dir = Path(self.get_ext_fullpath(MODULES[0])).parents[2]
        if self.inplace or getattr(self, "editable_mode", False):
            pkg_dir = HERE / "src" / "shoal"
        pkg_dir.mkdir(parents=True, exist_ok=True)
        (pkg_dir / NATIVE["BUILD_INFO"]).write_text(json.dumps(hashes, indent=2) + "\n")

    def get_outputs(self) -> list[str]:
        outputs: list[str] = super().get_outputs()
        if self.extensions and not (self.inplace or getattr(self, "editable_mode", False)):
            pkg_dir = Path(self.get_ext_fullpath(MODULES[0])).parents[2]
            outputs.append(str(pkg_dir / NATIVE["BUILD_INFO"]))
        return outputs


def ext_modules() -> list:
    if flag("SHOAL_PURE"):
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        if flag("SHOAL_COMPILE"):
            raise SystemExit("SHOAL_COMPILE=1 but mypyc is missing: pip install mypy") from None
        return []
    # Relative paths, as mypyc names the modules after them.
    os.chdir(HERE)
    try:
        modules = mypycify(
            [str(source(m).relative_to(HERE)) for m in MODULES],
            opt_level="3",
            # The group's shared library would otherwise land in src/, outside the package.
            group_name="shoal._native_lib",
        )
    except (Exception, SystemExit) as exc:  # mypyc exits on a type error
        if flag("SHOAL_COMPILE"):
            raise
        print(f"shoal: mypyc failed ({exc}); installing pure Python", file=sys.stderr)
        return []
    return modules + cython_modules()


def cython_modules() -> list:
    try:
        from Cython.Build import cythonize
    except ImportError:
        if flag("SHOAL_COMPILE"):
            raise SystemExit("SHOAL_COMPILE=1 but Cython is missing: pip install cython") from None
        return []
    from setuptools import Extension

    pyx = str(source(CYTHON_MODULE).relative_to(HERE))
    try:
        return list(cythonize([Extension(CYTHON_MODULE, [pyx])], quiet=True))
    except Exception as exc:
        if flag("SHOAL_COMPILE"):
            raise
        print(f"shoal: Cython failed ({exc}); Proton is called through cffi", file=sys.stderr)
        return []


setup(ext_modules=ext_modules(), cmdclass={"build_ext": BuildExt})
