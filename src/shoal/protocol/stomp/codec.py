"""STOMP wire format: the incremental frame decoder (the encoders are in ``encoder.py``).

Frame grammar (STOMP 1.2; 1.0 and 1.1 are subsets)::

    frame   = command EOL *( header EOL ) EOL body NUL *( EOL )
    EOL     = [CR] LF
    header  = name ":" value

Decoding works on a buffer plus an offset. Frames are cut out with
``bytes.find`` (never byte by byte), so many frames in one read cost one pass,
and a frame split over many reads is scanned only once: searches resume where
the previous attempt stopped. The buffer is the read itself when nothing was
left over (no copy), and a growing ``bytearray`` while a big frame trickles
in, so no frame is copied quadratically.

Header escaping (``\\n``, ``\\c``, ``\\\\``; 1.2 adds ``\\r``) applies to every
frame of a 1.1/1.2 connection except CONNECT, STOMP and CONNECTED; 1.0 has no
escaping. Limits are checked as bytes arrive, so an oversized frame is refused
once it passes the limit, not after it has been buffered whole.

A NUL ends a frame, so it may appear only in a body: a NUL in a command line,
header name or header value is a protocol error on input, and the encoders
refuse to write one (:class:`LocalProtocolError`). Otherwise a header value
holding ``\\0MESSAGE...`` would be passed on as a second, forged frame.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from shoal.errors import LimitExceeded, LocalProtocolError, RemoteProtocolError

__all__ = [
    "ALL_COMMANDS",
    "DROPPED_HEADERS_HEADER",
    "MAX_COMMAND_LINE_BYTES",
    "MAX_FRAME_BYTES",
    "MAX_HEADERS",
    "MAX_HEADER_LINE_BYTES",
    "SUPPORTED_VERSIONS",
    "FrameDecoder",
    "Limits",
    "escape_header",
    "unescape_header",
]

MAX_FRAME_BYTES: Final = 10 * 1024 * 1024
MAX_HEADERS: Final = 1000
MAX_HEADER_LINE_BYTES: Final = 64 * 1024
MAX_COMMAND_LINE_BYTES: Final = 1024

SUPPORTED_VERSIONS: Final = ("1.0", "1.1", "1.2")

#: Names the headers :func:`encode_message_lossy` had to leave out.
DROPPED_HEADERS_HEADER: Final = "x-shoal-dropped-headers"

CLIENT_COMMANDS: Final = frozenset(
    {
        "CONNECT",
        "STOMP",
        "SEND",
        "SUBSCRIBE",
        "UNSUBSCRIBE",
        "ACK",
        "NACK",
        "BEGIN",
        "COMMIT",
        "ABORT",
        "DISCONNECT",
    }
)
SERVER_COMMANDS: Final = frozenset({"CONNECTED", "MESSAGE", "RECEIPT", "ERROR"})
ALL_COMMANDS: Final = CLIENT_COMMANDS | SERVER_COMMANDS
_ALL_COMMANDS_B: Final = frozenset(c.encode() for c in ALL_COMMANDS)
#: Every start of a command line ("", "S", ..., "SEND", "SEND\r"): input that
#: is none of these can never become a frame, so it is refused before its line ends.
_COMMAND_LINE_STARTS: Final = frozenset(
    line[:i] for c in _ALL_COMMANDS_B for line in (c, c + b"\r") for i in range(len(line) + 1)
)

#: Frames whose headers are never escaped (backward compatibility with 1.0).
UNESCAPED_COMMANDS: Final = frozenset({"CONNECT", "STOMP", "CONNECTED"})


@dataclass(frozen=True, slots=True)
class Limits:
    """Per-connection parser limits; passing one raises :class:`LimitExceeded`
    whose ``limit_name`` is the field name."""

    max_frame_bytes: int = MAX_FRAME_BYTES
    max_headers: int = MAX_HEADERS
    max_header_line_bytes: int = MAX_HEADER_LINE_BYTES
    max_command_line_bytes: int = MAX_COMMAND_LINE_BYTES


# --- escaping ---------------------------------------------------------------

_UNESCAPE_RE: Final = re.compile(r"\\(.?)", re.DOTALL)
_UNESCAPES: Final = {
    "1.1": {"n": "\n", "c": ":", "\\": "\\"},
    "1.2": {"n": "\n", "c": ":", "\\": "\\", "r": "\r"},
}
_ESCAPES: Final = {
    "1.1": str.maketrans({"\\": "\\\\", "\n": "\\n", ":": "\\c"}),
    "1.2": str.maketrans({"\\": "\\\\", "\n": "\\n", ":": "\\c", "\r": "\\r"}),
}


def unescape_header(text: str, version: str) -> str:
    """Undo STOMP header escaping for ``version`` (identity for 1.0)."""
    table = _UNESCAPES.get(version)
    if table is None or "\\" not in text:
        return text

    def repl(m: re.Match[str]) -> str:
        seq = m.group(1)
        try:
            return table[seq]
        except KeyError:
            shown = "\\" + seq if seq else "a trailing \\"
            raise RemoteProtocolError(
                f"invalid escape sequence {shown!r} in header text {text[:80]!r} (STOMP {version})"
            ) from None

    return _UNESCAPE_RE.sub(repl, text)


def escape_header(text: str, version: str | None) -> str:
    """Escape a header name or value for ``version`` (1.0/None: checked, not escaped)."""
    table = _ESCAPES.get(version) if version is not None else None
    if table is not None:
        return text.translate(table)
    if "\n" in text:
        raise LocalProtocolError(
            f"header text {text!r} contains a line feed, which STOMP {version or '1.0'} "
            "cannot carry"
        )
    return text


# --- decoding ---------------------------------------------------------------

_NOT_EOL: Final = re.compile(rb"[^\r\n]")

# STOMP 1.2's usual ACK: an ``id`` header alone, its value printable ASCII with
# nothing to unescape (no ``\\``) and no ``:``. A run of them, each maybe
# followed by EOLs, is read by one match (``take_plain_acks``): a consumer's
# acks are half the frames a broker reads, and one frame each through
# ``next_frame`` costs several times more than the ack itself.
_PLAIN_ACK_ID_BYTES: Final = 200
_PLAIN_ACK_ID: Final = rb"[!-9;-\[\]-~]{1,%d}" % _PLAIN_ACK_ID_BYTES
_PLAIN_ACK_RUN: Final = re.compile(rb"[\r\n]*(?:ACK\nid:" + _PLAIN_ACK_ID + rb"\n\n\x00[\r\n]*)+")

#: A decoded frame: (command, headers, body).
Frame = tuple[str, dict[str, str], bytes]


#: Up to this many left-over bytes, ``feed`` makes ``leftover + data`` one new
#: ``bytes``; past it, the buffer becomes a ``bytearray`` that grows in place.
_SMALL_LEFTOVER: Final = 4096


class FrameDecoder:
    """Incremental STOMP frame decoder.

    ``feed(data)`` appends bytes; ``next_frame()`` returns ``(command, headers,
    body)`` or ``None`` when the buffer holds no complete frame. EOLs between
    frames (heart-beats) are skipped. ``version`` selects header unescaping
    (``None``/``"1.0"``: none) and may change between frames.

    The buffer is the caller's ``bytes`` object itself when nothing was left
    over (no copy), ``leftover + data`` when a small partial frame was left, and
    a ``bytearray`` that grows in place while a big frame trickles in (so a
    frame arriving in many small reads is never copied quadratically).
    """

    __slots__ = (
        "_body_len",
        "_body_off",
        "_buf",
        "_command",
        "_counted",
        "_crlf",
        "_headers",
        "_line_start",
        "_lines",
        "_pos",
        "_scan",
        "eof",
        "error_headers",
        "limits",
        "version",
    )

    def __init__(self, limits: Limits | None = None) -> None:
        self.limits = limits if limits is not None else Limits()
        self.version: str | None = None
        self.eof = False
        #: The headers of the frame a RemoteProtocolError was raised for, when
        #: they were read before the error was found (for the ERROR's receipt-id).
        self.error_headers: dict[str, str] | None = None
        self._buf: bytes | bytearray = b""
        self._pos = 0  # start of the current (incomplete) frame or of unread bytes
        self._crlf = False  # the peer's last frame head ended in CRLF: look for that first
        # Progress on an incomplete frame; all offsets are relative to _pos.
        self._scan = 0  # where the next search resumes (0: command line not seen yet)
        self._lines = 0  # header lines counted in an incomplete head
        self._counted = 0  # how far line feeds have been counted
        self._line_start = 0  # start of the last, incomplete, head line
        self._command: str | None = None  # set once the head of the frame is parsed
        self._headers: dict[str, str] = {}
        self._body_off = 0
        self._body_len = -1  # content-length, or -1: body ends at the first NUL

    # -- input ---------------------------------------------------------------

    def feed(self, data: bytes) -> None:
        if not data:
            self.eof = True
            return
        buf = self._buf
        pos = self._pos
        left = len(buf) - pos
        if left <= 0:
            self._buf = data if type(data) is bytes else bytes(data)
        elif left <= _SMALL_LEFTOVER:
            self._buf = b"".join((memoryview(buf)[pos:], data))
        elif type(buf) is bytearray:
            if pos:
                del buf[:pos]  # O(1) in CPython: moves the start pointer
            buf += data
        else:
            grown = bytearray(memoryview(buf)[pos:])
            grown += data
            self._buf = grown
        self._pos = 0

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as frames."""
        return len(self._buf) - self._pos

    def at_frame_boundary(self) -> bool:
        """True if nothing but EOLs is buffered (no frame has started)."""
        if self._command is not None:
            return False
        return _NOT_EOL.search(self._buf, self._pos) is None

    # -- frames --------------------------------------------------------------

    def take_plain_acks(self) -> list[str]:
        """The ids of the plain ACK frames next in the buffer (see
        ``_PLAIN_ACK_RUN``), consumed, in order; ``[]`` if the next frame is any
        other (or incomplete). ``next_frame`` would return each of them as
        ``("ACK", {"id": id}, b"")`` under any version: the caller decides
        whether its version reads them so."""
        if self._command is not None:
            return []
        buf = self._buf
        pos = self._pos
        if pos >= len(buf) or buf[pos] not in b"A\n\r":
            return []
        limits = self.limits
        if (  # limits a plain ACK could break: next_frame reads and refuses it
            limits.max_header_line_bytes < _PLAIN_ACK_ID_BYTES + 3
            or limits.max_frame_bytes < _PLAIN_ACK_ID_BYTES + 10
            or limits.max_headers < 1
            or limits.max_command_line_bytes < 3
        ):
            return []
        run = _PLAIN_ACK_RUN.match(buf, pos)
        if run is None:
            return []
        end = run.end()
        self._pos = end
        self._scan = 0  # progress on an incomplete head was on the first of these
        self._crlf = False  # as next_frame leaves it after an LF head
        # The ids, in a few passes over the run rather than a few calls per
        # frame: strip the fixed text, leave one space after each id (an id
        # holds no space, CR or LF).
        ids = (
            bytes(buf[pos:end])
            .replace(b"ACK\nid:", b"")
            .replace(b"\n\n\x00", b" ")
            .translate(None, b"\r\n")
        )
        return ids.decode("ascii").split()

    def next_frame(self) -> Frame | None:
        if self._command is not None:
            return self._next_body()
        buf = self._buf
        pos = self._pos
        n = len(buf)
        if pos >= n:
            return None
        c = buf[pos]
        if c == 10 or c == 13:  # heart-beats / optional EOLs after a frame
            m = _NOT_EOL.search(buf, pos)
            if m is None:
                self._pos = n
                return None
            pos = self._pos = m.start()
        # End of the head: the first empty line, "\n\n" or "\n\r\n". Look for
        # the style the peer used last; _parse_head double-checks.
        frm = pos + self._scan
        if self._crlf:
            t = buf.find(b"\n\r\n", frm)
            skip = 3
            if t < 0:
                t = buf.find(b"\n\n", frm)
                skip = 2
            else:
                t2 = buf.find(b"\n\n", frm, t + 1)
                if t2 >= 0:
                    t, skip = t2, 2
        else:
            t = buf.find(b"\n\n", frm)
            skip = 2
            if t < 0:
                t = buf.find(b"\n\r\n", frm)
                skip = 3
        if t < 0:
            self._incomplete_head(pos)
            return None
        self._scan = 0
        # The head: _parse_head, inlined for the common case (UTF-8, LF line
        # ends, nothing to unescape); anything else takes _parse_head.
        head = buf[pos:t]
        try:
            # (compiled: a bytes head decodes without a method lookup)
            text = head.decode() if isinstance(head, bytes) else bytes(head).decode()
        except UnicodeDecodeError:
            text = "\r"  # -> _parse_head, which explains or retries
        if "\r" in text or "\x00" in text:
            command, headers, body_off = self._parse_head(pos, t, skip)
        else:
            if self._crlf:
                self._crlf = False
            lines = text.split("\n")
            command = lines[0]
            n_lines = len(lines)
            limits = self.limits
            if (
                len(command) > limits.max_command_line_bytes
                or n_lines - 1 > limits.max_headers
                or t - pos > limits.max_header_line_bytes
                or (
                    "\\" in text
                    and self.version is not None
                    and self.version != "1.0"
                    and command not in UNESCAPED_COMMANDS
                )
            ):
                command, headers, body_off = self._parse_head(pos, t, skip)
            else:
                headers = {}
                for i in range(1, n_lines):
                    line = lines[i]
                    colon = line.find(":")  # (compiled: find and slices are primitives)
                    if colon <= 0:
                        self._bad_header_line(line)
                    headers.setdefault(line[:colon], line[colon + 1 :])  # the first wins
                body_off = t + skip
        # Body.
        cl = headers.get("content-length")
        if cl is None:
            end = buf.find(b"\x00", body_off)
            if end < 0:
                self._incomplete_body(command, headers, body_off - pos, -1)
                return None
        else:
            if not (cl.isascii() and cl.isdigit()):
                self.error_headers = headers
                raise RemoteProtocolError(
                    f"content-length header {cl!r} is not a non-negative integer"
                )
            end = body_off + int(cl)
            if end >= n:
                self._incomplete_body(command, headers, body_off - pos, end - body_off)
                return None
            if buf[end] != 0:
                self.error_headers = headers
                raise RemoteProtocolError(
                    f"{command} frame body is not followed by NUL (content-length {cl})"
                )
        if end + 1 - pos > self.limits.max_frame_bytes:
            self.error_headers = headers
            self._frame_too_big()
        self._pos = end + 1
        body = buf[body_off:end]
        return command, headers, body if type(body) is bytes else bytes(body)

    def _next_body(self) -> Frame | None:
        buf = self._buf
        pos = self._pos
        body_off = pos + self._body_off
        if self._body_len >= 0:
            end = body_off + self._body_len
            if end >= len(buf):
                return None
            if buf[end] != 0:
                self.error_headers = self._headers
                raise RemoteProtocolError(
                    f"{self._command} frame body is not followed by NUL "
                    f"(content-length {self._body_len})"
                )
        else:
            end = buf.find(b"\x00", pos + self._scan)
            if end < 0:
                if len(buf) - pos > self.limits.max_frame_bytes:
                    self.error_headers = self._headers
                    self._frame_too_big()
                self._scan = len(buf) - pos
                return None
            if end + 1 - pos > self.limits.max_frame_bytes:
                self.error_headers = self._headers
                self._frame_too_big()
        command = self._command
        assert command is not None
        headers = self._headers
        self._command = None
        self._headers = {}
        self._scan = 0
        self._pos = end + 1
        return command, headers, bytes(buf[body_off:end])

    def _incomplete_body(
        self, command: str, headers: dict[str, str], body_off: int, body_len: int
    ) -> None:
        limits = self.limits
        if (
            body_off + body_len + 1 if body_len >= 0 else len(self._buf) - self._pos
        ) > limits.max_frame_bytes:
            self.error_headers = headers
            self._frame_too_big()
        self._command = command
        self._headers = headers
        self._body_off = body_off
        self._body_len = body_len
        self._scan = len(self._buf) - self._pos

    def _frame_too_big(self) -> None:
        lim = self.limits.max_frame_bytes
        raise LimitExceeded(
            "max_frame_bytes", lim, f"frame larger than max_frame_bytes ({lim} bytes)"
        )

    def _header_line_too_long(self) -> None:
        lim = self.limits.max_header_line_bytes
        raise LimitExceeded(
            "max_header_line_bytes",
            lim,
            f"header line longer than max_header_line_bytes ({lim} bytes)",
        )

    def _too_many_headers(self) -> None:
        lim = self.limits.max_headers
        raise LimitExceeded("max_headers", lim, f"more than max_headers ({lim}) headers")

    def _command_line_too_long(self) -> None:
        lim = self.limits.max_command_line_bytes
        raise LimitExceeded(
            "max_command_line_bytes",
            lim,
            f"command line longer than max_command_line_bytes ({lim} bytes)",
        )

    def _incomplete_head(self, pos: int) -> None:
        """No empty line yet: check the limits on what has arrived, and
        remember how far we looked, so no byte is scanned twice."""
        buf = self._buf
        n = len(buf)
        limits = self.limits
        if not self._scan:
            # First look at this frame: refuse a bad command line right away.
            max_cmd = limits.max_command_line_bytes
            nl = buf.find(b"\n", pos, pos + max_cmd + 2)
            if nl < 0:
                if n - pos > max_cmd + 1:
                    self._command_line_too_long()
                start = bytes(buf[pos:n])
                if start not in _COMMAND_LINE_STARTS:
                    raise RemoteProtocolError(f"unknown command {_show(start)}")
                return
            cmd = bytes(buf[pos:nl]).rstrip(b"\r")
            if cmd not in _ALL_COMMANDS_B:
                raise RemoteProtocolError(f"unknown command {_show(cmd)}")
            self._crlf = buf[nl - 1] == 13
            self._counted = self._line_start = nl + 1 - pos
            self._lines = 0
        if n - pos > limits.max_frame_bytes:
            self._frame_too_big()
        counted = pos + self._counted
        if buf.find(b"\x00", counted, n) >= 0:
            raise RemoteProtocolError(
                "NUL byte in a frame head: the headers must end with an empty line, "
                "and a NUL may appear only in a body"
            )
        new_lines = buf.count(b"\n", counted, n)
        if new_lines:
            self._lines += new_lines
            self._line_start = buf.rfind(b"\n", counted, n) + 1 - pos
        self._counted = n - pos
        partial = n - pos - self._line_start  # the line still arriving
        if self._lines + (partial > 0) > limits.max_headers:
            self._too_many_headers()
        # (+1: the line's CR may have arrived without its LF)
        if partial > limits.max_header_line_bytes + 1:
            self._header_line_too_long()
        # Resume before the last two bytes: a terminator may straddle reads.
        self._scan = max(n - 2 - pos, 1)

    def _parse_head(self, pos: int, t: int, skip: int) -> tuple[str, dict[str, str], int]:
        """Parse the head ``buf[pos:t]`` (command line and header lines, without
        the EOL of the last line). Returns the command, the headers and where
        the body starts."""
        buf = self._buf
        try:
            text = buf[pos:t].decode()
        except UnicodeDecodeError as exc:
            t3 = buf.find(b"\n\r\n", pos, t + 1) if skip == 2 else -1
            if t3 < 0:
                raise RemoteProtocolError(
                    f"frame head is not valid UTF-8 (byte {exc.start} of the frame)"
                ) from None
            return self._parse_head(pos, t3, 3)
        if "\r" in text:
            if skip == 2:
                # A CRLF head found through a later "\n\n"? Cut at its own end.
                t3 = buf.find(b"\n\r\n", pos, t + 1)
                if t3 >= 0:
                    return self._parse_head(pos, t3, 3)
            self._crlf = skip == 3
            text = text.replace("\r\n", "\n")
            if text[-1] == "\r":
                text = text[:-1]
        elif self._crlf:
            self._crlf = False
        lines = text.split("\n")
        command = lines[0]
        del lines[0]
        limits = self.limits
        if len(command) > limits.max_command_line_bytes:
            self._command_line_too_long()
        if len(lines) > limits.max_headers:
            self._too_many_headers()
        if t - pos > limits.max_header_line_bytes:
            longest = max(len(line.rstrip(b"\r")) for line in buf[pos:t].split(b"\n"))
            if longest > limits.max_header_line_bytes:
                self._header_line_too_long()
        headers: dict[str, str] = {}
        for line in lines:
            k, sep, v = line.partition(":")
            if not sep or not k:
                self._bad_header_line(line)
            if k not in headers:
                headers[k] = v
        version = self.version
        if (
            version is not None
            and version != "1.0"
            and "\\" in text
            and command not in UNESCAPED_COMMANDS
        ):
            headers = {}
            for line in lines:
                k, _, v = line.partition(":")
                k = unescape_header(k, version)
                if k not in headers:
                    headers[k] = unescape_header(v, version)
        if "\x00" in text:
            self._nul_in_head(command, lines, headers)
        return command, headers, t + skip

    def _nul_in_head(self, command: str, lines: list[str], headers: dict[str, str]) -> None:
        self.error_headers = headers
        if "\x00" in command:
            raise RemoteProtocolError(f"command line {command[:40]!r} contains a NUL byte")
        for line in lines:
            if "\x00" in line:
                name = line.partition(":")[0]
                part = "name" if "\x00" in name else "value"
                raise RemoteProtocolError(
                    f"{command} header {name[:80]!r} has a NUL byte in its {part}: "
                    "a NUL ends a STOMP frame and may appear only in a body"
                )

    @staticmethod
    def _bad_header_line(line: str) -> None:
        if not line:
            raise RemoteProtocolError("empty header line")
        if line.startswith(":"):
            raise RemoteProtocolError(f"header line {line[:80]!r} has an empty name")
        raise RemoteProtocolError(f"header line {line[:80]!r} has no ':'")


def _show(raw: bytes) -> str:
    return repr(raw[:40].decode("utf-8", "replace"))
