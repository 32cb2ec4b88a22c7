"""Journal measurements (not collected by pytest: the name has no test_ prefix).

    .venv/bin/python tests/store/bench_journal.py [--dir DIR] [--messages 1000000]

Prints append+sync throughput for 256-byte MessageStored records with 1, 8
and 64 records per sync, and the time ``open()`` takes to recover a journal
of N persistent 256-byte messages (the issue's goal: 1M in at most 10 s).
"""

from __future__ import annotations

import argparse
import gc
import shutil
import tempfile
import time
from pathlib import Path

from shoal.records import MessageStored
from shoal.store.journal import JournalStore

BODY = bytes(range(256))
HEADERS = {"content-type": "application/octet-stream", "JMSXGroupID": "g", "receipt": "r"}


def message(i: int) -> MessageStored:
    return MessageStored(
        queue="orders",
        id=i,
        destination="/queue/orders",
        headers=HEADERS,
        body=BODY,
        group=f"g{i % 100}",
        group_seq=0,
        expires=0,
        priority=4,
        timestamp=1_700_000_000_000 + i,
    )


def throughput(base: Path, per_sync: int, seconds: float = 2.0) -> tuple[float, float]:
    d = base / f"tp-{per_sync}"
    store = JournalStore(d)
    store.open()
    msgs = [message(i) for i in range(1, 200_001)]
    n = 0
    syncs = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(per_sync):  # one append per message, one sync per group
            store.append([msgs[n % len(msgs)]])
            n += 1
        store.sync()
        syncs += 1
    took = time.perf_counter() - t0
    store.close()
    shutil.rmtree(d)
    return n / took, syncs / took


def recovery(base: Path, count: int, batch: int = 64) -> tuple[float, float, float, int]:
    d = base / "recovery"
    store = JournalStore(d)
    store.open()
    t0 = time.perf_counter()
    for start in range(1, count + 1, batch):
        store.append([message(i) for i in range(start, min(start + batch, count + 1))])
        if (start // batch) % 256 == 0:
            store.sync()
    store.close()
    write_s = time.perf_counter() - t0
    size = sum(p.stat().st_size for p in d.glob("*.seg"))
    gc.collect()
    t0 = time.perf_counter()
    c0 = time.process_time()
    store = JournalStore(d)
    rec = store.open()
    open_s = time.perf_counter() - t0
    open_cpu = time.process_time() - c0
    assert sum(len(v) for v in rec.messages.values()) == count
    store.close()
    del rec
    shutil.rmtree(d)
    return write_s, open_s, open_cpu, size


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument(
        "--batch", type=int, default=64, help="messages per append in the recovery journal"
    )
    ap.add_argument("--skip-throughput", action="store_true")
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="shoal-bench-", dir=args.dir))
    try:
        for per_sync in () if args.skip_throughput else (1, 8, 64):
            mps, sps = throughput(base, per_sync, args.seconds)
            print(
                f"append+sync, {per_sync:2d} x 256 B records per sync: "
                f"{mps:10.0f} msg/s  {sps:8.0f} syncs/s"
            )
        write_s, open_s, open_cpu, size = recovery(base, args.messages, args.batch)
        print(
            f"recovery: {args.messages} x 256 B messages, {args.batch} per batch, "
            f"{size / 2**20:.0f} MiB of segments (written in {write_s:.1f} s): "
            f"open() took {open_s:.2f} s ({open_cpu:.2f} s CPU)"
        )
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
