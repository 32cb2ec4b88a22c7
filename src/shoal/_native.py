"""The compiled hot path: which modules mypyc builds, and which ones run.

``pip install`` compiles :data:`COMPILED_MODULES` with mypyc when it can
(setup.py); the ``.py`` sources stay the fallback. Python's importer prefers a
``.so`` over the ``.py`` beside it, so two traps are closed here, on
``import shoal``, before any compiled module loads:

* ``SHOAL_PURE=1`` in the environment runs the pure-Python modules even where
  compiled ones are installed (tests run both ways; see the Makefile).
* A compiled module built from other sources than the ``.py`` beside it (an
  editable install whose source was edited since) would silently run old
  code. setup.py records each source's hash in ``_native_build.json``; if one
  no longer matches, every compiled module is skipped, with a warning naming
  the file and how to rebuild.

This module is never compiled itself and imports nothing from shoal.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import json
import os
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

#: Modules mypyc compiles, one compilation group (they call each other directly).
#: A module is here only for a gain on record: each group names the recorded
#: run under bench/recorded/ that measured it (docs/benchmark-history.md says
#: more), and a module kept for another reason says why. Left out: the
#: selector (a lark Transformer), settings (reads dataclass field types as
#: strings), destination parsing and log queues (tests stand one in), app.py
#: (its annotations name StompSession where AMQP sessions pass too), and the
#: rest of the server (no run measured them compiled). Interpreted code
#: subclasses StompSession (the cluster's LinkSession): it says so with
#: ``mypyc_attr(allow_interpreted_subclasses=True)``.
COMPILED_MODULES: tuple[str, ...] = (
    # The STOMP codec and connection: native-20261125T1201Z-pure-vs-compiled.json
    # (W1 0.91x, W2 0.95x the broker CPU per message). encoder.py and readers.py
    # are code split out of codec.py and connection.py since, the same hot path.
    "shoal.protocol.stomp.codec",
    "shoal.protocol.stomp.encoder",
    "shoal.protocol.stomp.readers",
    "shoal.protocol.stomp.connection",
    # The AMQP connection, its message codec and the mapping to the core's
    # headers: amqp-builds-20261125T161708Z.json (0.89x the broker CPU per AMQP
    # message, with the calls into cffi the same head made directly).
    "shoal.protocol.amqp.message_io",
    "shoal.protocol.amqp.connection",
    "shoal.server.amqp_mapping",
    # The STOMP session, its read pacing and the journal's sync pipeline:
    # instructions-20261128T102134Z.json (W6 32p 0.89x, 1p 0.87x, W1 0.97x
    # the instructions per message). The session calls its pacer and the
    # pipeline once a read and once a receipt, native to native.
    "shoal.server.pacing",
    "shoal.server.stomp",
    "shoal.server.persistence",
    # The flush's loop over the core's effects and the io_uring ring code:
    # instructions-20261128T125921Z.json (W6 32p 0.83x, W1 0.85x, with
    # records.py's own __init__s below).
    "shoal.server.carry_out",
    "shoal.server.uring",
    # The journal's writer and index state: instructions-20261128T104533Z.json
    # (W6 32p 0.80x against 0.89x without them in instructions-20261128T102134Z).
    "shoal.store.replay_fold",
    "shoal.store.journal.writer",
    # The journal's record codec: journal-codec-20261127T035032Z.json
    # (MessageStored 1,695 -> 1,263 ns pure -> compiled).
    "shoal.store.journal.codec",
    # The broker core, compiled whole (``Broker`` and ``Queue`` are native
    # classes over their mixins, mypyc traits):
    # instructions-20261127T171356Z.json (W1 0.80x, W2 0.89x, AW1 0.87x).
    "shoal.broker.addresses",
    "shoal.broker.admin",
    "shoal.broker.cluster_routing",
    "shoal.broker.consumers",
    "shoal.broker.core",
    "shoal.broker.dispatch",
    "shoal.broker.effects",
    "shoal.broker.groups",
    "shoal.broker.hashing",
    "shoal.broker.memory",
    "shoal.broker.model",
    "shoal.broker.queue",
    "shoal.broker.queue_context",
    "shoal.broker.restore",
    "shoal.broker.routing",
    "shoal.broker.settlement",
    "shoal.broker.sink",
    "shoal.broker.subscriptions",
    "shoal.broker.transactions",
    "shoal.broker.views",
    # Last (running_build() reads it): the message records, compiled with their
    # own __init__s, instructions-20261128T125921Z.json (above); the core's
    # native classes read their fields directly.
    "shoal.records",
)

#: Built with Cython beside them (when Cython is installed): Proton's C
#: functions called from compiled code (protocol/amqp/proton_calls.py is its
#: pure-Python twin and chooses between them).
CYTHON_MODULE = "shoal.protocol.amqp._proton_calls"

#: Written by setup.py beside this file: {module: sha256 of its source}.
BUILD_INFO = "_native_build.json"

_PACKAGE_DIR = Path(__file__).resolve().parent
_PURE_VALUES = frozenset({"1", "true", "yes", "on"})

#: Why the pure modules run although compiled ones may exist ("" if they do not).
pure_reason = ""


def source_path(module: str) -> Path:
    suffix = ".pyx" if module == CYTHON_MODULE else ".py"
    return _PACKAGE_DIR.joinpath(*module.split(".")[1:]).with_suffix(suffix)


def source_hash(module: str) -> str:
    return hashlib.sha256(source_path(module).read_bytes()).hexdigest()


def _compiled_paths(module: str) -> list[Path]:
    src = source_path(module)
    return [
        src.with_name(src.stem + suffix)
        for suffix in importlib.machinery.EXTENSION_SUFFIXES
        if src.with_name(src.stem + suffix).exists()
    ]


def stale_modules() -> list[str]:
    """Compiled modules whose recorded source hash differs from the ``.py`` now there."""
    present = [m for m in (*COMPILED_MODULES, CYTHON_MODULE) if _compiled_paths(m)]
    if not present:
        return []
    try:
        recorded = json.loads((_PACKAGE_DIR / BUILD_INFO).read_text())
    except (OSError, ValueError):
        recorded = {}
    return [m for m in present if recorded.get(m) != source_hash(m)]


class _SourceOnlyFinder(importlib.abc.MetaPathFinder):
    """Finds the compiled modules' ``.py`` files, never their ``.so``."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in COMPILED_MODULES or not path:
            return None
        loader = (importlib.machinery.SourceFileLoader, importlib.machinery.SOURCE_SUFFIXES)
        for entry in path:
            spec = importlib.machinery.FileFinder(entry, loader).find_spec(fullname)
            if spec is not None:
                return spec
        return None


def implementation(module: str) -> str:
    """``"compiled"`` or ``"pure"``: what runs for ``module`` (imports it)."""
    mod = sys.modules.get(module) or importlib.import_module(module)
    origin = getattr(mod, "__file__", "") or ""
    return "pure" if origin.endswith(".py") else "compiled"


def running_build() -> tuple[str, str]:
    """What runs: ``("compiled", "")``, or ``("pure", why)`` for the ready line and /health."""
    if pure_reason.startswith("stale"):
        stale = pure_reason.partition(": ")[2].split(", ")
        return "pure", (
            f"the compiled build is stale ({len(stale)} modules edited since it was built; "
            "`make compile` rebuilds it)"
        )
    if pure_reason:
        return "pure", pure_reason
    if implementation(COMPILED_MODULES[-1]) == "compiled":
        return "compiled", ""
    return "pure", "not compiled (`make compile` builds it)"


def install() -> None:
    """Choose the implementation; called once from ``shoal/__init__.py``."""
    global pure_reason
    if os.environ.get("SHOAL_PURE", "").strip().lower() in _PURE_VALUES:
        pure_reason = "SHOAL_PURE is set"
    else:
        stale = stale_modules()
        if not stale:
            return
        pure_reason = f"stale compiled modules: {', '.join(stale)}"
        warnings.warn(
            f"shoal: the compiled {', '.join(stale)} do not match the sources beside them "
            "(edited since the build?); running the pure-Python modules. Rebuild with "
            "`make compile` (or `pip install -e .`), or delete the .so files.",
            RuntimeWarning,
            stacklevel=2,
        )
    if not any(isinstance(f, _SourceOnlyFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _SourceOnlyFinder())
