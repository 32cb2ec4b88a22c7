"""The SASL layer in front of Proton's AMQP engine (server side).

Proton's built-in SASL (without Cyrus, as the PyPI wheel is built) can only
accept ANONYMOUS and EXTERNAL on the server side, so PLAIN could not be
checked against the broker's users. This layer runs the three-frame
exchange itself (AMQP 1.0 part 5.3): the SASL header, ``sasl-mechanisms``,
``sasl-init``, ``sasl-outcome``. The frame bodies are encoded and decoded
by Proton's own type codec (``proton.Data``); only the 8-byte frame header
is framed here. Once SASL succeeds, every later byte goes to Proton.

PLAIN credentials are not checked here: the layer stops in ``VERIFYING``
with ``credentials`` set, and the owner answers with :meth:`SaslServer.complete`
(the broker checks passwords off its event loop). Bytes that arrive
meanwhile wait in the buffer.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import Enum

from proton import UNDESCRIBED, Array, Data, Described, symbol, ubyte, ulong

SASL_HEADER = b"AMQP\x03\x01\x00\x00"
AMQP_HEADER = b"AMQP\x00\x01\x00\x00"
SASL_FRAME_TYPE = 1
# Part 5.3.1: SASL frames are at most 512 bytes unless both sides say more;
# a little room for long PLAIN credentials, and no more.
MAX_SASL_FRAME_BYTES = 4096

SASL_MECHANISMS = 0x40
SASL_INIT = 0x41
SASL_OUTCOME = 0x44
OUTCOME_OK = 0
OUTCOME_AUTH = 1
OUTCOME_SYS_PERM = 3


class SaslState(Enum):
    HEADER = "header"  # waiting for the 8-byte protocol header
    INIT = "init"  # mechanisms sent, waiting for sasl-init
    VERIFYING = "verifying"  # PLAIN credentials received: the owner decides (complete)
    DONE = "done"  # authenticated: the rest is AMQP
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class SaslResult:
    ok: bool
    mechanism: str = ""
    user: str | None = None
    reason: str = ""
    protocol_error: bool = False  # not a SASL refusal: the bytes were not AMQP


class SaslServer:
    """Feed bytes; ``output`` collects the bytes to send; ``result`` once decided."""

    def __init__(self, mechanisms: tuple[str, ...]) -> None:
        self.mechanisms = mechanisms
        self.credentials: tuple[str, str] | None = None  # (user, password) while VERIFYING
        self.state = SaslState.HEADER
        self.buffer = bytearray()
        self.output = bytearray()
        self.result: SaslResult | None = None

    def receive_data(self, data: bytes | bytearray) -> bytes:
        """Consume what SASL needs; return the bytes left over for AMQP."""
        self.buffer += data
        if len(self.buffer) > MAX_SASL_FRAME_BYTES + 8 and self.state is SaslState.VERIFYING:
            self.state = SaslState.FAILED  # nothing may be pipelined past sasl-init but a header
            self.result = SaslResult(
                False, reason="data sent before the SASL outcome", protocol_error=True
            )
            return b""
        while self.state in (SaslState.HEADER, SaslState.INIT):
            if self.state is SaslState.HEADER:
                if not self._header():
                    return b""
            elif not self._init():
                return b""
        if self.state is SaslState.DONE:
            rest = bytes(self.buffer)
            self.buffer.clear()
            return rest
        return b""

    def _header(self) -> bool:
        if len(self.buffer) < 8:
            head = bytes(self.buffer)
            if not (SASL_HEADER.startswith(head) or AMQP_HEADER.startswith(head)):
                return self._bad_header()
            return False
        header = bytes(self.buffer[:8])
        if header == SASL_HEADER:
            del self.buffer[:8]
            self.output += SASL_HEADER + _frame(
                SASL_MECHANISMS, [Array(UNDESCRIBED, Data.SYMBOL, *map(symbol, self.mechanisms))]
            )
            self.state = SaslState.INIT
            return True
        if header == AMQP_HEADER:
            # No SASL: only where ANONYMOUS would be accepted (part 5.3: a
            # server that needs SASL answers with its SASL header and closes).
            if "ANONYMOUS" in self.mechanisms:
                self.state = SaslState.DONE
                self.result = SaslResult(True, "", None)
                return True
            self.output += SASL_HEADER
            self._fail("", None, "authentication required: use SASL PLAIN")
            return False
        return self._bad_header()

    def _bad_header(self) -> bool:
        self.output += SASL_HEADER  # part 2.2: answer with the header we speak, then close
        self.state = SaslState.FAILED
        self.result = SaslResult(
            False,
            reason=f"not an AMQP 1.0 protocol header: {bytes(self.buffer[:8])!r}",
            protocol_error=True,
        )
        return False

    def _init(self) -> bool:
        if len(self.buffer) < 8:
            return False
        size, doff, ftype = struct.unpack_from(">IBB", self.buffer)
        if ftype != SASL_FRAME_TYPE or doff < 2 or size < doff * 4 or size > MAX_SASL_FRAME_BYTES:
            self.state = SaslState.FAILED
            self.result = SaslResult(
                False,
                reason=f"malformed SASL frame (size {size}, type {ftype})",
                protocol_error=True,
            )
            return False
        if len(self.buffer) < size:
            return False
        body = bytes(self.buffer[doff * 4 : size])
        del self.buffer[:size]
        try:
            d = Data()
            d.decode(body)
            init = d.get_object()
            if not isinstance(init, Described) or init.descriptor != SASL_INIT:
                raise ValueError(f"expected sasl-init, got {init!r}")
            fields = list(init.value) + [None, None, None]
            mechanism = str(fields[0])
            response = bytes(fields[1]) if fields[1] is not None else b""
        except Exception as exc:
            self.state = SaslState.FAILED
            self.result = SaslResult(
                False, reason=f"malformed sasl-init: {exc}", protocol_error=True
            )
            return False
        if mechanism not in self.mechanisms:
            self._fail(mechanism, None, f"SASL mechanism {mechanism!r} is not offered")
            return False
        if mechanism == "PLAIN":
            parts = response.split(b"\x00")
            if len(parts) != 3 or not parts[1]:
                self._fail(mechanism, None, "malformed PLAIN response")
                return False
            user = parts[1].decode("utf-8", "replace")
            self.credentials = (user, parts[2].decode("utf-8", "replace"))
            self.state = SaslState.VERIFYING
            return False
        self._succeed(mechanism, None)  # ANONYMOUS
        return True

    def complete(self, ok: bool, user: str | None, reason: str = "") -> bytes:
        """The owner's verdict on PLAIN credentials; the bytes that were waiting (for AMQP)."""
        mechanism = "PLAIN" if self.credentials is not None else "ANONYMOUS"
        self.credentials = None
        if not ok:
            self._fail(mechanism, user, reason)
            return b""
        self._succeed(mechanism, user)
        rest = bytes(self.buffer)
        self.buffer.clear()
        return rest

    def _succeed(self, mechanism: str, user: str | None) -> None:
        self.output += _frame(SASL_OUTCOME, [ubyte(OUTCOME_OK)])
        self.state = SaslState.DONE
        self.result = SaslResult(True, mechanism, user)

    def _fail(self, mechanism: str, user: str | None, reason: str) -> None:
        if self.state in (SaslState.INIT, SaslState.VERIFYING):
            self.output += _frame(SASL_OUTCOME, [ubyte(OUTCOME_AUTH)])
        self.state = SaslState.FAILED
        self.result = SaslResult(False, mechanism, user, reason)


def _frame(descriptor: int, fields: list[object]) -> bytes:
    d = Data()
    d.put_object(Described(ulong(descriptor), fields))
    body: bytes = d.encode()
    return struct.pack(">IBBH", 8 + len(body), 2, SASL_FRAME_TYPE, 0) + body
