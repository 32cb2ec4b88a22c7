"""STOMP wire format, the other way: events' fields to frame bytes.

The frame grammar, escaping and the NUL rule are in ``codec.py``'s docstring.
The encoders escape header text for the connection's version and refuse what
cannot be written (:class:`LocalProtocolError`): a NUL anywhere in a head, and
in 1.0 a name or value that would need escaping.
"""

from __future__ import annotations

from typing import Any, Final

from shoal.errors import LocalProtocolError

from .codec import DROPPED_HEADERS_HEADER, UNESCAPED_COMMANDS, escape_header

__all__ = ["encode_frame", "encode_message", "encode_message_lossy", "encode_send"]

#: Frames that always carry a content-length header when we encode them.
_BODY_COMMANDS: Final = frozenset({"SEND", "MESSAGE", "ERROR"})


def encode_frame(
    command: str, headers: dict[str, str], body: bytes = b"", version: str | None = "1.2"
) -> bytes:
    """Encode any frame. ``content-length`` is set from ``body`` (always for
    SEND, MESSAGE and ERROR, otherwise only if ``body`` is non-empty).
    ``version=None`` means "not negotiated": no escaping, as for 1.0."""
    if body or command in _BODY_COMMANDS:
        headers = {**headers, "content-length": str(len(body))}
    if command in UNESCAPED_COMMANDS:
        version = None
    text = _header_text(headers, version)
    return b"".join((command.encode(), b"\n", text.encode(), b"\n", body, b"\x00"))


def _header_text(headers: dict[str, str], version: str | None) -> str:
    """``name:value\\n`` for each header, escaped for ``version``."""
    if not headers:
        return ""
    try:
        text = "\n".join(map(":".join, headers.items())) + "\n"
    except TypeError:
        loose: dict[Any, Any] = headers  # not dict[str, str]: compiled code would unbox
        for k, v in loose.items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise LocalProtocolError(
                    f"header {k!r}: names and values must be str, got {type(v).__name__}"
                ) from None
        raise
    n = len(headers)
    if (
        text.count("\n") == n
        and text.count(":") == n
        and "\\" not in text
        and "\r" not in text
        and "\x00" not in text
    ):
        return text
    return _header_text_slow(headers, version)


def _unsendable(name: str, value: str, version: str | None) -> str | None:
    """Why header ``name:value`` cannot be written in ``version``, or None."""
    if "\x00" in name or "\x00" in value:
        return f"header {name!r}: a NUL byte cannot be sent in any header (it ends the frame)"
    if version in ("1.1", "1.2"):
        if version == "1.1" and value.endswith("\r"):
            return f"header {name!r}: a value ending in CR cannot be sent in STOMP 1.1"
        return None
    if ":" in name or "\n" in name or "\r" in name:
        return f"header name {name!r} cannot be sent without escaping (STOMP 1.0)"
    if "\n" in value or value.endswith("\r"):
        return f"header {name!r}: value {value!r} cannot be sent without escaping (STOMP 1.0)"
    return None


def _header_text_slow(headers: dict[str, str], version: str | None) -> str:
    parts = []
    escaped = version in ("1.1", "1.2")
    for k, v in headers.items():
        reason = _unsendable(k, v, version)
        if reason is not None:
            raise LocalProtocolError(reason)
        if escaped:
            k = escape_header(k, version)
            v = escape_header(v, version)
        parts.append(f"{k}:{v}\n")
    return "".join(parts)


_MESSAGE_OWN: Final = frozenset(
    {"destination", "message-id", "subscription", "ack", "content-length"}
)


def encode_message(
    destination: str,
    message_id: str,
    subscription: str | None,
    ack: str | None,
    headers: dict[str, str],
    body: bytes,
    version: str | None,
) -> bytes:
    """MESSAGE frame bytes, fast. ``destination``, ``message-id``,
    ``subscription`` and ``ack`` (each when not ``None``) come first and win
    over the same names in ``headers``; ``content-length`` is ``len(body)``
    and comes last. Headers are escaped for ``version``."""
    if subscription is not None and ack is not None:  # the broker's case: one f-string
        head = (
            f"MESSAGE\ndestination:{destination}\nmessage-id:{message_id}\n"
            f"subscription:{subscription}\nack:{ack}\n"
        )
        n = 5  # header lines, content-length included
    else:
        n = 3
        head = f"MESSAGE\ndestination:{destination}\nmessage-id:{message_id}\n"
        if subscription is not None:
            head = f"{head}subscription:{subscription}\n"
            n += 1
        if ack is not None:
            head = f"{head}ack:{ack}\n"
            n += 1
    rest = headers
    if rest and not _MESSAGE_OWN.isdisjoint(rest):  # no set built in the usual case
        rest = {k: v for k, v in rest.items() if k not in _MESSAGE_OWN}
    try:
        if rest:
            n += len(rest)
            # One join over every piece (compiled, appends are cheap): a join
            # per header and a map cost more than the headers themselves.
            parts = [head]
            for name, value in rest.items():  # (not k, v: typed str, the slow path reuses them)
                parts.append(name)
                parts.append(":")
                parts.append(value)
                parts.append("\n")
            parts.append(f"content-length:{len(body)}\n\n")
            text = "".join(parts)
        else:
            text = f"{head}content-length:{len(body)}\n\n"
    except TypeError:
        text = ""  # a non-str name or value: the slow path explains
    # Fast path: nothing to escape, nothing unsendable.
    if (
        text.count(":") != n
        or text.count("\n") != n + 2
        or "\\" in text
        or "\r" in text
        or "\x00" in text
    ):
        fixed = {"destination": destination, "message-id": message_id}
        if subscription is not None:
            fixed["subscription"] = subscription
        if ack is not None:
            fixed["ack"] = ack
        merged: dict[Any, Any] = {**fixed, **rest}  # may hold non-str: checked next
        merged["content-length"] = str(len(body))
        for k, v in merged.items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise LocalProtocolError(
                    f"header {k!r}: names and values must be str, got {type(v).__name__}"
                )
        text = f"MESSAGE\n{_header_text_slow(merged, version)}\n"
    return b"".join((text.encode(), body, b"\x00"))


_SEND_OWN: Final = frozenset({"destination", "content-length"})


def encode_send(
    destination: str, headers: dict[str, str], body: bytes, version: str | None
) -> bytes:
    """SEND frame bytes, fast (the cluster link forwards every message as
    one): ``destination`` first, then ``headers``, ``content-length`` last.
    A frame with anything to escape takes :func:`encode_frame`'s path."""
    if headers and not _SEND_OWN.isdisjoint(headers):
        headers = {k: v for k, v in headers.items() if k not in _SEND_OWN}
    n = len(headers) + 2
    try:
        lines = "\n".join(map(":".join, headers.items())) + "\n" if headers else ""
    except TypeError:
        lines = ""
        n = -1  # a non-str name or value: encode_frame explains
    text = f"SEND\ndestination:{destination}\n{lines}content-length:{len(body)}\n\n"
    if (
        text.count(":") == n
        and text.count("\n") == n + 2
        and "\\" not in text
        and "\r" not in text
        and "\x00" not in text
    ):
        return b"".join((text.encode(), body, b"\x00"))
    return encode_frame("SEND", {"destination": destination, **headers}, body, version)


def encode_message_lossy(
    destination: str,
    message_id: str,
    subscription: str | None,
    ack: str | None,
    headers: dict[str, str],
    body: bytes,
    version: str | None,
) -> tuple[bytes, list[str]]:
    """MESSAGE frame bytes for a message :func:`encode_message` refuses, with
    what ``version`` cannot carry left out rather than the whole frame lost.

    A header that cannot be written (a NUL anywhere; in 1.0 a name holding
    ``:``, CR or LF or a value holding LF or ending in CR; in 1.1 a value
    ending in CR) is dropped, and :data:`DROPPED_HEADERS_HEADER` lists the
    dropped names, comma-separated, in STOMP 1.2 escaped form. In the frame's
    own fields (destination, message-id, subscription, ack), which cannot be
    dropped, each character that cannot be written becomes U+FFFD. Returns
    the bytes and the names dropped."""
    kept: dict[str, str] = {}
    dropped: list[str] = []
    loose: dict[Any, Any] = headers  # may hold non-str at run time: checked below
    for k, v in loose.items():
        if k in _MESSAGE_OWN:
            continue
        if isinstance(k, str) and isinstance(v, str) and _unsendable(k, v, version) is None:
            kept[k] = v
        else:
            dropped.append(str(k))
    if dropped:
        kept[DROPPED_HEADERS_HEADER] = ",".join(
            escape_header(k, "1.2").replace("\x00", _REPLACEMENT) for k in dropped
        )
    data = encode_message(
        _sendable_value(destination, version),
        _sendable_value(message_id, version),
        _sendable_value(subscription, version),
        _sendable_value(ack, version),
        kept,
        body,
        version,
    )
    return data, dropped


_REPLACEMENT: Final = "\ufffd"


def _sendable_value(value: Any, version: str | None) -> Any:
    if value is None or _unsendable("x", value, version) is None:
        return value
    value = value.replace("\x00", _REPLACEMENT)
    if version in ("1.1", "1.2"):
        return value[:-1] + _REPLACEMENT if value.endswith("\r") else value
    return value.replace("\n", _REPLACEMENT).replace("\r", _REPLACEMENT)
