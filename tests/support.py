"""Shared helpers for tests that run a real `shoal serve` process."""

from __future__ import annotations

import itertools
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

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


def wait_for(predicate: Callable[[], object], timeout: float = 10.0, interval: float = 0.01) -> object:
    """Poll until predicate() is truthy; fail with a clear message otherwise."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s: {predicate}")
        time.sleep(interval)


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

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def start(self, timeout: float = 20.0) -> ShoalProcess:
        """Start and wait for the ready line. Ports left at 0 are bound by the
        server itself (no free-port race) and read back from that line; a
        restart keeps them."""
        args = [
            sys.executable, "-m", "shoal.cli", "serve",
            "--stomp", f"127.0.0.1:{self.stomp_port}",
            "--http", f"127.0.0.1:{self.http_port}",
            "--amqp", f"127.0.0.1:{self.amqp_port}",
            "--data", str(self.data) if self.data is not None else "",
            "--log-level", "warning",
            *self.extra_args,
        ]
        if self.config is not None:
            args += ["--config", str(self.config)]
        log_dir = self.data if self.data is not None else Path(os.environ.get("TMPDIR", "/tmp"))
        log_dir.mkdir(parents=True, exist_ok=True)
        if self.log_path is None:  # one log per process object, across restarts
            self.log_path = log_dir / f"shoal-{os.getpid()}-{next(_LOG_SEQ)}.log"
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=self._log, stdin=subprocess.DEVNULL,
            start_new_session=True,
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
                self.stop()
                raise RuntimeError(f"shoal serve did not start: {self.log_text()}")
        return self

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path else ""

    def kill9(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        self._close_log()

    def stop(self, timeout: float = 10.0) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self._close_log()
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
            self.buf = self.buf.lstrip(b"\r\n")
            end = self.buf.find(b"\n\n")
            if end >= 0:
                head = self.buf[:end].decode().split("\n")
                headers: dict[str, str] = {}
                for line in head[1:]:
                    k, _, v = line.partition(":")
                    headers.setdefault(k, v)
                start = end + 2
                if "content-length" in headers:
                    stop = start + int(headers["content-length"])
                    if len(self.buf) > stop:
                        body = self.buf[start:stop]
                        self.buf = self.buf[stop + 1:]
                        return head[0], headers, body
                else:
                    nul = self.buf.find(b"\x00", start)
                    if nul >= 0:
                        body = self.buf[start:nul]
                        self.buf = self.buf[nul + 1:]
                        return head[0], headers, body
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
