"""The journal's record encoder in process: a revision's against this tree's.

    python -m bench.journal_codec --base main

W2's encoding work per message without a broker: ``encode_batch`` of a batch
of 64 persistent 256-byte messages carrying the load generator's six headers
(persistent, JMSXGroupID, bench-group, bench-gseq, bench-seq, bench-ts), and
of a batch of 64 acks (``MessageRemoved``). Three encoders in one process:
BASE's ``codec.py`` source (pure Python), this tree's source (pure), and this
tree's module as ``import shoal`` loads it (compiled where `make compile`
built it). They run interleaved, batch after batch, and each keeps its
fastest round: on a shared machine the least disturbed one. Every encoder
must produce the same bytes, or nothing is recorded. Writes
bench/recorded/journal-codec-<date>.json.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from shoal import _native
from shoal.records import MessageRemoved, MessageStored
from shoal.store.journal import codec

REPO = Path(__file__).resolve().parent.parent
SOURCE = "src/shoal/store/journal/codec.py"
BATCH = 64
QUEUE = "BENCH.main.0"
BODY = bytes(range(256))


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def w2_message(i: int, ts_ns: int, timestamp: int) -> MessageStored:
    """Message ``i`` as W2 sends it: 256 bytes in group ``g{i % 100}``, with the
    load generator's six headers (``ts_ns`` its bench-ts)."""
    group = f"g{i % 100}"
    headers = {
        "persistent": "true",
        "JMSXGroupID": group,
        "bench-group": str(i % 100),
        "bench-gseq": str(i // 100),
        "bench-seq": str(i),
        "bench-ts": str(ts_ns),
    }
    return MessageStored(QUEUE, i, f"/queue/{QUEUE}", headers, BODY, group, 0, 0, 4, timestamp)


def write_record(summary: dict, prefix: str, out: Path | None) -> Path:
    """``summary`` as JSON to ``out`` or bench/recorded/<prefix>-<date>.json."""
    out = out or REPO / "bench" / "recorded" / (
        f"{prefix}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
    )
    out.write_text(json.dumps(summary, indent=2) + "\n")
    print(f"recorded in {out}", file=sys.stderr)
    return out


def batches() -> dict[str, list]:
    stored = [w2_message(i, 1_700_000_000_000_000_000 + i, 1) for i in range(1, BATCH + 1)]
    removed = [MessageRemoved(QUEUE, i) for i in range(1, BATCH + 1)]
    return {"MessageStored": stored, "MessageRemoved": removed}


def fastest(encoders: dict[str, Callable], records: list, rounds: int) -> dict[str, float]:
    """ns per record of each encoder: its fastest round of 10 batches."""
    best = dict.fromkeys(encoders, float("inf"))
    clock = time.perf_counter
    for _ in range(rounds):
        for name, encode in encoders.items():
            t0 = clock()
            for _ in range(10):
                encode(records)
            best[name] = min(best[name], clock() - t0)
    return {name: round(t / (10 * len(records)) * 1e9, 1) for name, t in best.items()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.journal_codec", description=__doc__)
    p.add_argument("--base", required=True, help="git revision whose codec.py to compare")
    p.add_argument("--rounds", type=int, default=300)
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)

    def git(*a: str) -> str:
        return subprocess.run(
            ["git", "-C", str(REPO), *a], capture_output=True, text=True, check=True
        ).stdout.strip()

    impl = _native.implementation("shoal.store.journal.codec")
    with tempfile.TemporaryDirectory(prefix="shoal-codec-") as tmp:
        base_src = Path(tmp) / "base_codec.py"
        base_src.write_text(git("show", f"{args.base}:{SOURCE}") + "\n")
        encoders = {
            f"base {args.base}, pure": _load("base_codec", base_src).encode_batch,
            "head, pure": _load("head_codec", REPO / SOURCE).encode_batch,
            f"head, {impl}": codec.encode_batch,
        }
    load_before = os.getloadavg()[0]
    results = {}
    for kind, records in batches().items():
        outputs = {name: encode(records) for name, encode in encoders.items()}
        if len({repr(o) for o in outputs.values()}) != 1:
            print(f"the encoders disagree on {kind}: nothing recorded", file=sys.stderr)
            return 1
        results[kind] = fastest(encoders, records, args.rounds)
    summary = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "revs": {
            "base": git("rev-parse", "--short", args.base),
            "head": git("rev-parse", "--short", "HEAD"),
        },
        "head_dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
        "command": "python -m bench.journal_codec " + " ".join(argv or sys.argv[1:]),
        "rounds": args.rounds,
        "batch": BATCH,
        "loadavg_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "ns_per_record": results,
    }
    for kind, row in results.items():
        print(kind + ": " + ", ".join(f"{name} {ns:,.0f} ns" for name, ns in row.items()))
    write_record(summary, "journal-codec", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
