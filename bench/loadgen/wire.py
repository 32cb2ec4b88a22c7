"""The benchmark's own STOMP wire code: plain sockets, no client library.

Kept deliberately small and fast (the reference client's design): frames are built
with bytes %-formatting, many SEND frames go out in one write, and incoming frames are
cut out of large recv() chunks. The same code talks to every broker.
"""

from __future__ import annotations

import socket
import time

NUL = b"\x00"


class StompError(RuntimeError):
    """The broker sent an ERROR frame or closed the connection."""


def frame(command: str, headers: dict[str, str] | None = None, body: bytes = b"") -> bytes:
    head = command + "\n" + "".join(f"{k}:{v}\n" for k, v in (headers or {}).items())
    return head.encode() + b"\n" + body + NUL


class Conn:
    """One STOMP connection: connect, write bytes, read whole frames."""

    def __init__(self, port: int, host: str = "127.0.0.1", timeout: float = 30.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for opt in (socket.SO_RCVBUF, socket.SO_SNDBUF):
            try:
                self.sock.setsockopt(socket.SOL_SOCKET, opt, 1 << 20)
            except OSError:
                pass
        self.buf = b""
        self.version = "1.0"
        self.server = ""

    # --- handshake -----------------------------------------------------------

    def connect(
        self, headers: dict[str, str] | None = None, accept_version: str = "1.0,1.1,1.2"
    ) -> dict[bytes, bytes]:
        hdrs = {"accept-version": accept_version, "host": "/", "heart-beat": "0,0"}
        hdrs.update(headers or {})
        self.sock.sendall(frame("CONNECT", hdrs))
        cmd, h, body = self.read_frame()
        if cmd != b"CONNECTED":
            raise StompError(f"CONNECT refused: {cmd.decode()} {h} {body[:200]!r}")
        self.version = h.get(b"version", b"1.0").decode()
        self.server = h.get(b"server", b"").decode()
        return h

    def disconnect(self, timeout: float = 30.0) -> None:
        """DISCONNECT with a receipt, so every frame sent before it has been processed."""
        try:
            self.sock.sendall(frame("DISCONNECT", {"receipt": "bye"}))
            self.sock.settimeout(timeout)
            while True:
                cmd, h, body = self.read_frame()
                if cmd == b"RECEIPT":
                    break
                if cmd == b"ERROR":
                    raise StompError(f"ERROR on DISCONNECT: {h} {body[:200]!r}")
        except (OSError, StompError, ConnectionError):
            raise
        finally:
            self.close()

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    # --- reading ---------------------------------------------------------------

    def fill(self, n: int = 1 << 18) -> bytes:
        data = self.sock.recv(n)
        if not data:
            raise ConnectionError("connection closed by the broker")
        return data

    def read_frame(self) -> tuple[bytes, dict[bytes, bytes], bytes]:
        """Next whole frame (heart-beat EOLs skipped). Headers: first occurrence wins."""
        while True:
            got = cut_frame(self.buf, 0)
            if got is not None:
                cmd, hdrs, body, pos = got
                self.buf = self.buf[pos:]
                return cmd, hdrs, body
            self.buf += self.fill()

    def wait_receipt(self, receipt_id: bytes, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        self.sock.settimeout(timeout)
        while True:
            cmd, h, body = self.read_frame()
            if cmd == b"RECEIPT" and h.get(b"receipt-id") == receipt_id:
                return
            if cmd == b"ERROR":
                raise StompError(f"ERROR: {h.get(b'message', b'')!r} {body[:300]!r}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"no RECEIPT {receipt_id!r}")


def parse_headers(block: bytes) -> tuple[bytes, dict[bytes, bytes]]:
    lines = block.split(b"\n")
    cmd = lines[0].rstrip(b"\r")
    hdrs: dict[bytes, bytes] = {}
    for line in lines[1:]:
        k, _, v = line.rstrip(b"\r").partition(b":")
        if k not in hdrs:
            hdrs[k] = v
    return cmd, hdrs


def cut_frame(buf: bytes, pos: int):
    """(command, headers, body, next_pos) of the frame at `pos`, or None if incomplete."""
    n = len(buf)
    while pos < n and buf[pos] in (10, 13):
        pos += 1
    hend = buf.find(b"\n\n", pos)
    if hend < 0:
        crlf = buf.find(b"\r\n\r\n", pos)
        if crlf < 0:
            return None
        hend, skip = crlf, 4
    else:
        crlf = buf.find(b"\r\n\r\n", pos, hend + 2)
        if crlf >= 0 and crlf < hend:
            hend, skip = crlf, 4
        else:
            skip = 2
    cmd, hdrs = parse_headers(buf[pos:hend])
    start = hend + skip
    cl = hdrs.get(b"content-length")
    if cl is not None:
        end = start + int(cl)
        if end >= n:
            return None
    else:
        end = buf.find(NUL, start)
        if end < 0:
            return None
    return cmd, hdrs, buf[start:end], end + 1
