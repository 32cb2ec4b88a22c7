"""WebSocket probes against a real `shoal serve`: a client that sends and never
reads what comes back. Each ends with a STOMP client on another connection
still sending and receiving, and the broker's memory in bounds."""

from __future__ import annotations

import base64
import os
import socket

import pytest

from probes.wire import Bystander, rss_kib
from support import free_port

pytestmark = pytest.mark.e2e

SENT_BYTES = 150 * 1024 * 1024  # what the client tries to send, unread answers and all


def ws_frame(opcode: int, payload: bytes) -> bytes:
    """A client frame (masked, with a zero key: the payload as is)."""
    assert len(payload) < 126
    return bytes([0x80 | opcode, 0x80 | len(payload)]) + b"\x00\x00\x00\x00" + payload


def upgraded(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall(
        f"GET /ws HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
        f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
        "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: v12.stomp\r\n\r\n".encode()
    )
    reply = b""
    while b"\r\n\r\n" not in reply:
        reply += sock.recv(4096)
    assert reply.startswith(b"HTTP/1.1 101")
    return sock


def flood(sock: socket.socket, block: bytes) -> int:
    """Send ``block`` until SENT_BYTES went or the broker stops reading; bytes sent."""
    sock.settimeout(3)
    sent = 0
    try:
        while sent < SENT_BYTES:
            sock.sendall(block)
            sent += len(block)
    except TimeoutError:
        pass  # the broker stopped reading: what we expect of it
    return sent


def stomp_text(frame: bytes) -> bytes:
    return ws_frame(0x1, frame)


PINGS = ws_frame(0x9, b"p" * 125) * 8000  # about 1 MB of pings
RECEIPT = "r" * 40  # each answer about as long as what asks for it; nothing is stored
RECEIPTS = (
    stomp_text(f"BEGIN\ntransaction:t\nreceipt:{RECEIPT}\n\n\x00".encode())
    + stomp_text(f"ABORT\ntransaction:t\nreceipt:{RECEIPT}\n\n\x00".encode())
) * 8000


@pytest.mark.parametrize("case", ["pings", "pings-before-connect", "receipts"])
def test_a_client_that_never_reads_is_not_read_either(shoal_server, case):
    port = free_port()
    srv = shoal_server(data=None, args=["--ws", f"127.0.0.1:{port}"])
    bystander = Bystander(srv.stomp_port)
    before = rss_kib(srv.proc.pid)
    sock = upgraded(port)
    if case != "pings-before-connect":
        sock.sendall(stomp_text(b"CONNECT\naccept-version:1.2\nhost:127.0.0.1\n\n\x00"))
    block = PINGS if case.startswith("pings") else RECEIPTS
    flood(sock, block)
    bystander.round_trip()
    grown = (rss_kib(srv.proc.pid) - before) / 1024
    assert grown < 40, f"broker grew {grown:.0f} MiB"
    sock.close()
    bystander.round_trip()
    bystander.close()
