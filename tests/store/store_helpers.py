"""Helpers shared by the store tests (imported by name: tests/store is on sys.path).

The journal format reader is tests/support.py's `journal_frames`.
"""

from __future__ import annotations

import os
from pathlib import Path

from shoal.records import MessageStored, Recovered


def msg(
    i: int,
    queue: str = "q",
    *,
    body: bytes | None = None,
    group: str | None = None,
    headers: dict[str, str] | None = None,
    bucket: int = -1,
    offset: int = -1,
    delivery_count: int = 0,
) -> MessageStored:
    return MessageStored(
        queue=queue,
        id=i,
        destination=f"/queue/{queue}",
        headers={"k": f"v{i}"} if headers is None else headers,
        body=b"body-%d" % i if body is None else body,
        group=group,
        group_seq=0,
        expires=0,
        priority=4,
        timestamp=1_700_000_000_000 + i,
        delivery_count=delivery_count,
        bucket=bucket,
        offset=offset,
    )


def ids(rec: Recovered, queue: str = "q") -> list[int]:
    return [m.id for m in rec.messages.get(queue, [])]


def segments(directory: Path) -> list[Path]:
    return sorted(p for p in Path(directory).iterdir() if p.name.endswith(".seg"))


def recovered_equal(a: Recovered, b: Recovered) -> bool:
    return (
        a.queues == b.queues
        and a.messages == b.messages
        and a.parked == b.parked
        and a.log_commits == b.log_commits
        and a.sink_batches == b.sink_batches
        and a.next_message_id == b.next_message_id
    )


def flip(path: Path, pos: int, mask: int = 0xFF) -> None:
    with open(path, "r+b") as f:
        f.seek(pos)
        b = f.read(1)[0]
        f.seek(pos)
        f.write(bytes([b ^ mask]))


def side_files(directory: Path) -> list[str]:
    return sorted(n for n in os.listdir(directory) if ".seg." in n)
