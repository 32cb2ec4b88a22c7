"""Helpers for tests/e2e/test_durability.py: threaded raw STOMP peers, test file systems.

The peers speak STOMP 1.2 over plain sockets (tests/support.py's RawStomp) with
a reader thread, so a test can pipeline SENDs with receipts and learn exactly
which frames the broker confirmed before it was killed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from skips import skip_kernel, skip_missing
from support import RawStomp, http_json, wait_for


def segments(data: Path) -> list[Path]:
    return sorted((data / "journal").glob("*.seg"))


# --- HTTP -------------------------------------------------------------------


def queue_info(http_url: str, name: str) -> dict | None:
    """GET /api/queues/NAME; None when absent (or the broker is too busy to answer in time)."""
    try:
        status, body = http_json(f"{http_url}/api/queues/{urllib.parse.quote(name, safe='')}")
    except (OSError, urllib.error.URLError):  # TimeoutError is an OSError
        return None
    return body if status == 200 else None


# --- STOMP peers ------------------------------------------------------------


@dataclass
class Received:
    key: tuple[str, int]  # (group, seq) from the message's own headers
    headers: dict[str, str]
    body: bytes


@dataclass
class Peer:
    """A raw STOMP 1.2 connection with a reader thread.

    Every frame from the broker is recorded: RECEIPT ids in ``receipts``,
    ERROR frames in ``errors``, MESSAGE frames in ``messages``. ``on_message``
    (called in the reader thread) may answer, e.g. ACK with a receipt.
    """

    port: int
    connect_headers: dict[str, str] = field(default_factory=dict)
    on_message: object = None
    receipts: set[str] = field(default_factory=set)
    receipt_order: list[str] = field(default_factory=list)
    errors: list[tuple[dict[str, str], bytes]] = field(default_factory=list)
    messages: list[Received] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.lock = threading.Lock()
        self.write_lock = threading.Lock()
        self.closed = threading.Event()
        self.raw = RawStomp(self.port, timeout=10)
        cmd, headers, body = self.raw.connect(**self.connect_headers)
        if cmd != "CONNECTED":
            raise AssertionError(f"CONNECT refused: {cmd} {headers} {body!r}")
        self.raw.sock.settimeout(0.5)
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        try:
            while True:
                try:
                    cmd, headers, body = self.raw.read_frame()
                except TimeoutError:
                    if self.closed.is_set():
                        return
                    continue
                if cmd == "RECEIPT":
                    with self.lock:
                        self.receipts.add(headers["receipt-id"])
                        self.receipt_order.append(headers["receipt-id"])
                elif cmd == "ERROR":
                    with self.lock:
                        self.errors.append((headers, body))
                elif cmd == "MESSAGE":
                    key = (headers.get("JMSXGroupID", ""), int(headers.get("x-seq", "-1")))
                    msg = Received(key, headers, body)
                    with self.lock:
                        self.messages.append(msg)
                    if self.on_message is not None:
                        self.on_message(self, msg)
        except (OSError, ConnectionError, ValueError):
            pass
        finally:
            self.closed.set()

    def frame(self, command: str, headers: dict[str, str], body: bytes = b"") -> bool:
        """Write one frame; False when the connection is gone."""
        try:
            with self.write_lock:
                self.raw.frame(command, headers, body)
            return True
        except OSError:
            return False

    def has_receipt(self, rid: str) -> bool:
        with self.lock:
            return rid in self.receipts

    def wait_receipt(self, rid: str, timeout: float = 20.0) -> None:
        wait_for(lambda: self.has_receipt(rid) or self.errors, timeout)
        if not self.has_receipt(rid):
            raise AssertionError(f"no RECEIPT {rid}; ERROR frames: {self.errors}")

    def sync(self, tag: str = "sync", timeout: float = 20.0) -> None:
        """A frame with a receipt: its RECEIPT means every record appended so far is fsynced."""
        rid = f"{tag}-{id(self)}-{len(self.receipt_order)}"
        self.frame("BEGIN", {"transaction": rid, "receipt": rid})
        self.wait_receipt(rid, timeout)
        self.frame("ABORT", {"transaction": rid})

    def snapshot(self) -> list[Received]:
        with self.lock:
            return list(self.messages)

    def close(self) -> None:
        self.closed.set()
        try:
            self.raw.close()
        except OSError:
            pass
        self.thread.join(5)

    def disconnect(self) -> None:
        if self.frame("DISCONNECT", {"receipt": "bye"}):
            wait_for(lambda: self.has_receipt("bye") or self.closed.is_set(), 10)
        self.close()


@dataclass
class AckLog:
    """What an acking consumer sent: ACK receipt id -> (index in peer.messages, key)."""

    peer: Peer
    sent: dict[str, tuple[int, tuple[str, int]]] = field(default_factory=dict)

    def acked(self) -> set[tuple[str, int]]:
        """Keys whose ACK got a RECEIPT."""
        with self.peer.lock:
            got = list(self.peer.receipts)
        return {self.sent[r][1] for r in got if r in self.sent}

    def last_durable_index(self) -> int:
        """Index of the last message whose ACK got a RECEIPT (-1: none).

        Every message received before that ACK was written had its delivery
        recorded by the broker before that ACK's records, so those records
        were fsynced by the time the RECEIPT came.
        """
        with self.peer.lock:
            got = list(self.peer.receipts)
        return max((self.sent[r][0] for r in got if r in self.sent), default=-1)


def acking_consumer(
    port: int, destination: str, *, sub_headers: dict[str, str] | None = None, delay: float = 0.0
) -> AckLog:
    """A client-individual consumer that ACKs every MESSAGE, in order, with a receipt."""
    log: AckLog

    def on_message(peer: Peer, msg: Received) -> None:
        if delay:
            time.sleep(delay)  # a slow consumer, so a backlog builds up
        with peer.lock:
            index = len(peer.messages) - 1
        rid = f"ack-{msg.headers['ack']}-{index}"
        log.sent[rid] = (index, msg.key)
        peer.frame("ACK", {"id": msg.headers["ack"], "receipt": rid})

    peer = Peer(port, on_message=on_message)
    log = AckLog(peer)
    peer.frame(
        "SUBSCRIBE",
        {"destination": destination, "id": "s", "ack": "client-individual", **(sub_headers or {})},
    )
    return log


# --- file systems (root only) -------------------------------------------------


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, timeout=60)


def need_mount(*tools: str) -> None:
    """Skip unless this process may mount file systems with ``tools``: root
    (a kernel permission) and the commands (in CI a missing one fails)."""
    if os.geteuid() != 0:
        skip_kernel("mounting a file system needs root")
    for tool in ("mount", "umount", *tools):
        if shutil.which(tool) is None:
            skip_missing(tool)


def unmount(mountpoint: Path) -> None:
    for _ in range(50):
        if _run("umount", str(mountpoint)).returncode == 0 or not os.path.ismount(mountpoint):
            return
        time.sleep(0.1)
    _run("umount", "-l", str(mountpoint))


@contextlib.contextmanager
def tmpfs(mountpoint: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` (e.g. "2m") at mountpoint; pytest.skip when mounting is impossible."""
    need_mount()
    mountpoint.mkdir(parents=True, exist_ok=True)
    res = _run("mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mountpoint))
    if res.returncode != 0:
        skip_kernel(f"cannot mount a tmpfs here: {res.stderr.strip()}")
    try:
        yield mountpoint
    finally:
        unmount(mountpoint)


@contextlib.contextmanager
def loop_ext4(image: Path, mountpoint: Path, size_mb: int = 64) -> Iterator[Path]:
    """An ext4 file system in a loop-mounted image file (fsfreeze needs a real one)."""
    need_mount("mkfs.ext4", "fsfreeze")
    with open(image, "wb") as f:
        f.truncate(size_mb * 2**20)
    res = _run("mkfs.ext4", "-q", "-F", str(image))
    assert res.returncode == 0, f"mkfs.ext4 failed: {res.stderr.strip()}"
    mountpoint.mkdir(parents=True, exist_ok=True)
    res = _run("mount", "-o", "loop", str(image), str(mountpoint))
    if res.returncode != 0:
        skip_kernel(f"cannot loop-mount an ext4 image here: {res.stderr.strip()}")
    try:
        yield mountpoint
    finally:
        _run("fsfreeze", "-u", str(mountpoint))
        unmount(mountpoint)
        image.unlink(missing_ok=True)


@contextlib.contextmanager
def frozen(mountpoint: Path) -> Iterator[None]:
    """fsfreeze: every write to the file system blocks (uninterruptibly) until thawed."""
    res = _run("fsfreeze", "-f", str(mountpoint))
    if res.returncode != 0:
        skip_kernel(f"fsfreeze is not possible here: {res.stderr.strip()}")
    try:
        yield
    finally:
        _run("fsfreeze", "-u", str(mountpoint))


def blocked_writers(pid: int) -> list[int]:
    """Thread ids of ``pid`` stuck in a write: uninterruptible sleep (state D) in pwrite.

    On a frozen file system the journal's fsync thread, or the kernel's
    io_uring worker writing for the loop, waits there until thawed. Where the kernel stack is not readable, state D alone counts.
    """
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except OSError:
            continue
        if stat.rpartition(")")[2].split()[0] != "D":
            continue
        try:
            stack = (task / "stack").read_text()
        except OSError:
            stack = None
        # pwrite: the fsync thread; io_write: an io_uring worker (server/uring.py).
        if stack is None or "pwrite" in stack or "sys_write" in stack or "io_write" in stack:
            out.append(int(task.name))
    return out
