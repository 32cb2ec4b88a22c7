"""Helpers shared by the test directories (tests/ is on sys.path: `from support import ...`).

- processes: `ShoalProcess` runs a real `shoal serve` (either build; strict: a broker
  that logged an unexpected exception or died by a signal fails the test); `wait_for`
  polls a condition
- HTTP: `http_request` / `http_json` / `get_json` for the management API
- STOMP: `cut_frame` / `parse_frame` read frames independently of Shoal's codec;
  `RawStomp` is a raw-socket peer built on them
- management: `PortServer` drives the management port over a real core, no sockets
- journal: `journal_frames` walks a segment file by the documented format
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
_LOG_SEQ = itertools.count()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parse_ready_line(line: str) -> dict[str, int]:
    """``shoal X ready: stomp 127.0.0.1:5, http 127.0.0.1:6`` -> {name: port}."""
    listeners = line.split(" ready: ", 1)[1].strip()
    out = {}
    for item in listeners.split(", "):
        name, _, hostport = item.partition(" ")
        out[name] = int(hostport.rpartition(":")[2])
    return out


def self_signed_cert(directory: Path) -> tuple[Path, Path]:
    """A throwaway certificate for 127.0.0.1 (openssl CLI): (cert.pem, key.pem)."""
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


def wait_for(
    predicate: Callable[[], object], timeout: float = 10.0, interval: float = 0.01
) -> object:
    """Poll until predicate() is truthy; fail with a clear message otherwise."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s: {predicate}")
        time.sleep(interval)


# --- HTTP ----------------------------------------------------------------------------


def http_request(
    url: str,
    method: str = "GET",
    body: Any = None,
    *,
    headers: dict[str, str] | None = None,
    timeout: float = 10.0,
) -> tuple[int, dict[str, str], bytes]:
    """Status, headers and body of one exchange; an error status is returned, not
    raised. ``body`` is sent as JSON unless it is already bytes."""
    if body is not None and not isinstance(body, bytes):
        body = json.dumps(body).encode()
        headers = {"Content-Type": "application/json", **(headers or {})}
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, dict(exc.headers), exc.read()


def http_json(url: str, method: str = "GET", body: Any = None, **kwargs: Any) -> tuple[int, Any]:
    """Status and body: decoded JSON when the answer is JSON, else text."""
    status, headers, data = http_request(url, method, body, **kwargs)
    if headers.get("Content-Type", "").startswith("application/json"):
        return status, json.loads(data)
    return status, data.decode(errors="replace")


def get_json(url: str, method: str = "GET", body: Any = None, **kwargs: Any) -> Any:
    """The JSON of a successful answer; any other status fails the test, naming it."""
    status, answer = http_json(url, method, body, **kwargs)
    assert 200 <= status < 300, f"{method} {url}: {status} {answer}"
    return answer


#: The builds a broker can run: the compiled modules, or the pure-Python ones.
BUILDS = ("compiled", "pure")

# In a broker's log, the signs of a bug: a logged exception (every "internal
# broker error" answer logs one) and faulthandler's dump of a fatal signal.
_BUG_SIGNS = ("Traceback (most recent call last)", "Fatal Python error")
_STALE_BUILD = "running the pure-Python modules"  # shoal/_native.py's warning


def compiled_build_problem() -> str | None:
    """Why a broker started with ``build="compiled"`` would not run compiled code."""
    from shoal import _native

    missing = [m for m in _native.COMPILED_MODULES if not _native._compiled_paths(m)]
    if missing:
        return f"compiled modules not built ({', '.join(missing[:3])}...): run `make compile`"
    stale = _native.stale_modules()
    if stale:
        return f"compiled modules stale ({', '.join(stale)}): run `make compile`"
    return None


@dataclass
class ShoalProcess:
    data: Path | None
    config: Path | None = None
    extra_args: list[str] = field(default_factory=list)
    stomp_port: int = 0  # 0: the server binds a free port and reports it
    http_port: int = 0
    amqp_port: int = 0
    proc: subprocess.Popen | None = None
    log_path: Path | None = None
    # listener name -> port, as the server reported them on its "ready" line
    ports: dict[str, int] = field(default_factory=dict)
    # "compiled" or "pure" (BUILDS); None: whatever SHOAL_PURE in our environment says
    build: str | None = None
    # Strict: stop() fails when the broker logged an unexpected exception or
    # died by a signal. A test that provokes logged failures on purpose
    # (a broken disk) turns it off and checks the log itself.
    strict: bool = True
    env: dict[str, str] = field(default_factory=dict)  # added to the broker's environment

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def environment(self) -> dict[str, str]:
        """The broker's environment: faulthandler on (a fatal signal dumps
        every thread's Python stack into the log) and the build asked for."""
        env = {**os.environ, "PYTHONFAULTHANDLER": "1", **self.env}
        if self.build == "pure":
            env["SHOAL_PURE"] = "1"
        elif self.build == "compiled":
            env.pop("SHOAL_PURE", None)
            problem = compiled_build_problem()
            if problem is not None:
                raise RuntimeError(problem)
        elif self.build is not None:
            raise ValueError(f"build {self.build!r}: expected one of {BUILDS}")
        return env

    def start(self, timeout: float = 20.0) -> ShoalProcess:
        """Start and wait for the ready line. Ports left at 0 are bound by the
        server itself (no free-port race) and read back from that line; a
        restart keeps them."""
        args = [
            sys.executable,
            "-m",
            "shoal.cli",
            "serve",
            "--stomp",
            f"127.0.0.1:{self.stomp_port}",
            "--http",
            f"127.0.0.1:{self.http_port}",
            "--amqp",
            f"127.0.0.1:{self.amqp_port}",
            "--data",
            str(self.data) if self.data is not None else "",
            "--log-level",
            "warning",
            *self.extra_args,
        ]
        if self.config is not None:
            args += ["--config", str(self.config)]
        log_dir = self.data if self.data is not None else Path(os.environ.get("TMPDIR", "/tmp"))
        log_dir.mkdir(parents=True, exist_ok=True)
        if self.log_path is None:  # one log per process object, across restarts
            self.log_path = log_dir / f"shoal-{os.getpid()}-{next(_LOG_SEQ)}.log"
        self._log_start = self.log_path.stat().st_size if self.log_path.exists() else 0
        self._checked = self._killed = self._termed = False  # this run's, for check()
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            args,
            stdout=subprocess.PIPE,
            stderr=self._log,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env=self.environment(),
        )
        deadline = time.monotonic() + timeout
        assert self.proc.stdout is not None
        while True:
            line = self.proc.stdout.readline().decode()
            if " ready: " in line:
                self.ports = parse_ready_line(line)
                self.stomp_port = self.ports["stomp"]
                self.http_port = self.ports.get("http", self.http_port)
                self.amqp_port = self.ports.get("amqp", self.amqp_port)
                break
            if not line or time.monotonic() > deadline:
                self.stop(check=False)
                raise RuntimeError(f"shoal serve did not start: {self.log_text()}")
        if self.build == "compiled" and _STALE_BUILD in self.run_log():
            self.stop(check=False)
            raise RuntimeError(f"the broker did not run its compiled modules: {self.run_log()}")
        return self

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path else ""

    def run_log(self) -> str:
        """The log of the current (or last) run only: a restart starts a new one."""
        if self.log_path is None or not self.log_path.exists():
            return ""
        with open(self.log_path, "rb") as log:
            log.seek(getattr(self, "_log_start", 0))
            return log.read().decode(errors="replace")

    def died_by_signal(self) -> int | None:
        """The signal that ended the broker, unless we sent it (kill9)."""
        if self.proc is None or self.proc.poll() is None:
            return None
        code = self.proc.returncode
        if code >= 0 or getattr(self, "_killed", False):
            return None
        if code == -signal.SIGTERM and getattr(self, "_termed", False):
            return None  # ours, before the broker's handler was in place
        return -code

    def problems(self, since: int = 0) -> list[str]:
        """What went wrong in the current run, for strict mode: death by a
        signal (with faulthandler's dump in the log) and logged exceptions
        (in the run's log from character ``since`` on)."""
        found = []
        sig = self.died_by_signal()
        if sig is not None:
            found.append(f"the broker died by signal {signal.Signals(sig).name}")
        log = self.run_log()[since:]
        found += [f"the broker log shows {sign!r}" for sign in _BUG_SIGNS if sign in log]
        return found

    def check(self) -> None:
        """Fail (AssertionError, with the log) if strict and the run shows a bug."""
        found = self.problems() if self.strict else []
        if found:
            tail = self.run_log()[-6000:]
            raise AssertionError(f"{'; '.join(found)}; broker log ({self.log_path}):\n{tail}")

    def kill9(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self._killed = True
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        self._close_log()

    def stop(self, timeout: float = 10.0, *, check: bool = True) -> int | None:
        """SIGTERM, then SIGKILL after ``timeout``; returns the exit status.
        Strict, a broker that logged an unexpected exception or died by a
        signal fails the test here (``check=False``: only stop)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self._termed = True
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self._killed = True
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self._close_log()
        if check and not getattr(self, "_checked", False):
            self._checked = True  # once per run: a test's stop and the fixture's
            self.check()
        return self.proc.returncode

    def restart(self) -> ShoalProcess:
        self.stop()
        return self.start()

    def _close_log(self) -> None:
        log = getattr(self, "_log", None)
        if log is not None and not log.closed:
            log.close()
        if self.proc is not None and self.proc.stdout is not None:
            self.proc.stdout.close()


# --- STOMP ---------------------------------------------------------------------------

StompFrame = tuple[str, dict[str, str], bytes]  # command, headers (first one wins), body


def cut_frame(buf: bytes) -> tuple[StompFrame | None, bytes]:
    """The first whole frame in ``buf`` and the bytes after it, or (None, buf) when
    the frame is not complete yet. Heart-beat EOLs before it are skipped; the body
    ends at content-length when given, else at the first NUL."""
    buf = buf.lstrip(b"\r\n")
    end = buf.find(b"\n\n")
    if end < 0:
        return None, buf
    head = buf[:end].decode().split("\n")
    headers: dict[str, str] = {}
    for line in head[1:]:
        k, _, v = line.partition(":")
        headers.setdefault(k, v)
    start = end + 2
    if "content-length" in headers:
        stop = start + int(headers["content-length"])
        if len(buf) <= stop:  # the NUL after the body has not arrived
            return None, buf
    else:
        stop = buf.find(b"\x00", start)
        if stop < 0:
            return None, buf
    return (head[0], headers, buf[start:stop]), buf[stop + 1 :]


def parse_frame(data: bytes) -> StompFrame:
    """The one whole frame ``data`` holds (e.g. a WebSocket message)."""
    frame, rest = cut_frame(data)
    assert frame is not None, f"not a whole STOMP frame: {data[:200]!r}"
    assert not rest.strip(b"\r\n"), f"bytes after the frame: {rest[:200]!r}"
    return frame


class RawStomp:
    """A raw-socket STOMP peer for tests: send exact bytes, read whole frames."""

    def __init__(self, port: int, timeout: float = 5.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buf = b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def frame(self, command: str, headers: dict[str, str] | None = None, body: bytes = b"") -> None:
        head = command + "\n" + "".join(f"{k}:{v}\n" for k, v in (headers or {}).items())
        self.send(head.encode() + b"\n" + body + b"\x00")

    def connect(self, version: str = "1.2", **headers: str) -> tuple[str, dict[str, str], bytes]:
        self.frame("CONNECT", {"accept-version": version, "host": "localhost", **headers})
        return self.read_frame()

    def read_frame(self) -> tuple[str, dict[str, str], bytes]:
        """Next frame (skipping heart-beat EOLs); raises ConnectionError at EOF."""
        while True:
            frame, self.buf = cut_frame(self.buf)
            if frame is not None:
                return frame
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("connection closed by the broker")
            self.buf += chunk

    def closed_by_peer(self, timeout: float = 5.0) -> bool:
        self.sock.settimeout(timeout)
        try:
            while True:
                chunk = self.sock.recv(65536)
                if not chunk:
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False

    def close(self) -> None:
        self.sock.close()


# --- management --------------------------------------------------------------------


class PortServer:
    """What ``shoal.server.management_port.ServerPort`` reads of a server, over a real core
    and without sockets: management handler tests drive the real port with it.
    ``closed`` records the connections management asked the server to close."""

    def __init__(self, broker: object, info: dict[str, object] | None = None) -> None:
        self.broker = broker
        self.sessions: dict[int, object] = {}
        self.persistence = None
        self.metrics = None
        self.cluster = None  # a single node: /api/cluster answers 404
        self.closed: dict[int, str] = {}
        self._info = dict(info or {})

    def info(self) -> dict[str, object]:
        return dict(self._info)

    def close_connection(self, conn_id: int, reason: str) -> None:
        self.closed[conn_id] = reason


# --- journal -------------------------------------------------------------------------

# The journal format (docs/journal.md), parsed here independently of the store.
# Field order as the store writes it: CRC-32, payload length, batch sequence
# number (docs/journal.md's table puts the length first; see
# test_frame_header_layout_matches_the_format_reference).
SEGMENT_HEADER_SIZE = 32
FRAME_HEADER = struct.Struct("<IIQ")


def align8(n: int) -> int:
    return (n + 7) & ~7


@dataclass(frozen=True)
class JournalFrame:
    offset: int  # of the frame header in the segment file
    length: int  # payload bytes
    seq: int

    @property
    def payload_offset(self) -> int:
        return self.offset + FRAME_HEADER.size

    @property
    def payload_end(self) -> int:
        return self.payload_offset + self.length

    @property
    def end(self) -> int:
        """Where the next frame starts (frames are 8-byte aligned)."""
        return self.offset + align8(FRAME_HEADER.size + self.length)


def journal_frames(segment: Path) -> list[JournalFrame]:
    """The whole frames of a segment, walked by their length words up to the zero
    end marker (or the end of the file)."""
    raw = Path(segment).read_bytes()
    out: list[JournalFrame] = []
    pos = SEGMENT_HEADER_SIZE
    while pos + FRAME_HEADER.size <= len(raw):
        _crc, length, seq = FRAME_HEADER.unpack_from(raw, pos)
        if length == 0:
            break
        frame = JournalFrame(pos, length, seq)
        if frame.end > len(raw):
            break
        out.append(frame)
        pos = frame.end
    return out
