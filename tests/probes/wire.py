"""Raw AMQP 1.0 frames and a bystander STOMP client for the probes.

AMQP frames are written by hand (an 8-byte frame header, then a
performative, a described list, encoded by Proton's ``Data``), so a probe
can send what no client library would: wrong field types, unknown
performatives, transfers that ignore a detach. ``Bystander`` is the other
client every probe checks: a STOMP connection that still sends and receives.
"""

from __future__ import annotations

import socket
import struct
import uuid
from pathlib import Path
from typing import Any

import stomp
from proton import Data, Described, ubyte, uint, ulong
from stomp.listener import TestListener as Received

from support import wait_for

AMQP_HEADER = b"AMQP\x00\x01\x00\x00"
OPEN, BEGIN, ATTACH, FLOW, TRANSFER, DISPOSITION, DETACH, END, CLOSE = range(0x10, 0x19)
SOURCE, TARGET = 0x28, 0x29
RECEIVER = True  # attach's role: the peer (this probe) receives


def encode(value: Any) -> bytes:
    data = Data()
    data.put_object(value)
    return bytes(data.encode())


def frame(channel: int, code: int, fields: list[Any], payload: bytes = b"") -> bytes:
    """One AMQP frame on ``channel``: the performative ``code`` with ``fields``."""
    body = encode(Described(ulong(code), fields)) + payload
    return struct.pack(">IBBH", 8 + len(body), 2, 0, channel) + body


def open_frame() -> bytes:
    return frame(0, OPEN, ["probe"])


def begin(channel: int) -> bytes:
    return frame(channel, BEGIN, [None, uint(0), uint(2**31 - 1), uint(2**31 - 1)])


def attach_sender(channel: int, handle: int, address: str | None, name: str | None = None) -> bytes:
    """Attach a link on which this probe sends to ``address`` (None: the anonymous relay)."""
    return frame(
        channel,
        ATTACH,
        [
            name or f"send-{handle}",
            uint(handle),
            False,
            ubyte(0),
            ubyte(0),
            Described(ulong(SOURCE), ["probe"]),
            Described(ulong(TARGET), [address]),
            None,
            None,
            uint(0),
        ],
    )


def transfer(channel: int, handle: int, delivery_id: int, payload: bytes, *, more: bool) -> bytes:
    return frame(
        channel,
        TRANSFER,
        [uint(handle), uint(delivery_id), struct.pack(">Q", delivery_id), uint(0), False, more],
        payload,
    )


class RawAmqp:
    """A socket speaking AMQP without SASL (a broker with no users allows it)."""

    def __init__(self, port: int, timeout: float = 10.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buffer = b""
        self.sock.sendall(AMQP_HEADER)
        assert self._read_exactly(8) == AMQP_HEADER

    def open(self, channels: int = 1) -> None:
        self.send(open_frame() + b"".join(begin(c) for c in range(channels)))

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _read_exactly(self, n: int) -> bytes | None:
        while len(self.buffer) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                return None
            self.buffer += chunk
        out, self.buffer = self.buffer[:n], self.buffer[n:]
        return out

    def next_performative(self) -> tuple[int, Any] | None:
        """The broker's next performative (code, fields); None once it hung up
        (or said nothing within the timeout)."""
        while True:
            try:
                head = self._read_exactly(8)
                if head is None:
                    return None
                size, doff = struct.unpack(">IB", head[:5])
                body = self._read_exactly(size - 8)
            except (TimeoutError, ConnectionResetError):
                return None
            if body is None:
                return None
            body = body[doff * 4 - 8 :]
            if body:  # not an empty (heart-beat) frame
                data = Data()
                data.decode(body)
                described = data.get_object()
                return int(described.descriptor), described.value

    def until(self, code: int, count: int = 1) -> list[tuple[int, Any]]:
        """Performatives up to the ``count``-th of kind ``code`` (fewer if the broker hangs up)."""
        seen: list[tuple[int, Any]] = []
        while count > 0 and (item := self.next_performative()) is not None:
            seen.append(item)
            count -= item[0] == code
        return seen

    def close_condition(self) -> str | None:
        """The error condition of the broker's close frame; it must hang up after it."""
        seen = self.until(CLOSE)
        assert self.next_performative() is None
        conditions = error_conditions(seen, CLOSE)
        return conditions[0] if conditions else None

    def close(self) -> None:
        self.sock.close()


def error_conditions(performatives: list[tuple[int, Any]], code: int) -> list[str]:
    """The error conditions the broker sent in performatives of one kind."""
    index = {DISPOSITION: 4, DETACH: 2, CLOSE: 0, END: 0}[code]
    found = []
    for kind, fields in performatives:
        if kind != code:
            continue
        value = fields[index] if len(fields) > index else None
        if code == DISPOSITION and value is not None:  # the rejected outcome's error
            value = value.value[0] if value.value else None
        if value is not None:
            found.append(str(value.value[0]))
    return found


def rss_kib(pid: int) -> int:
    """The process's resident set (VmRSS) in KiB, from /proc."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


class Bystander:
    """A STOMP client on its own connection: the one a probe must not disturb."""

    def __init__(self, port: int) -> None:
        self.queue = f"/queue/bystander-{uuid.uuid4().hex[:8]}"
        self.conn = stomp.Connection12([("127.0.0.1", port)])
        self.got = Received()
        self.conn.set_listener("b", self.got)
        self.conn.connect(wait=True)
        self.conn.subscribe(self.queue, id="b1", ack="auto")
        self.sent = 0

    def round_trip(self) -> None:
        """Send one message and receive it: the broker still serves others."""
        self.sent += 1
        self.conn.send(self.queue, f"m{self.sent}", headers={"receipt": f"r{self.sent}"})
        wait_for(lambda: len(self.got.message_list) >= self.sent, timeout=15)
        assert self.got.message_list[-1][1] == f"m{self.sent}"
        assert not self.got.errors

    def close(self) -> None:
        self.conn.disconnect()
