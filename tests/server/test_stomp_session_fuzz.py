"""Session fuzzer: random frames of every STOMP version, each header present or
not, through a real StompSession and core (fakes.py, no sockets).

Whatever a client sends, the session answers with frames or a clear ERROR;
an unexpected exception (the "internal broker error" answer, or anything
logged at ERROR by the broker) is a bug. The Makefile runs tests/server on
the compiled build and again with SHOAL_PURE=1, so this fuzzes both: the
compiled one checks every annotation at run time, where a header left out
(None) meets a field typed str.
"""

from __future__ import annotations

import asyncio
import logging
import os

from fakes import SessionHarness, frame
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shoal.protocol.stomp.codec import CLIENT_COMMANDS

# SHOAL_FUZZ_EXAMPLES: a longer hunt than the suite's
EXAMPLES = int(os.environ.get("SHOAL_FUZZ_EXAMPLES", "150"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])

COMMANDS = sorted(CLIENT_COMMANDS)  # sorted: hypothesis replays by index
# Headers a frame may carry, with values good, odd and bad for them.
HEADER_VALUES = {
    "destination": ("/queue/a", "/queue/b", "/topic/t", "/temp-queue/x", "/bogus", "", "/queue/"),
    "id": ("1", "2", "s", ""),
    "ack": ("auto", "client", "client-individual", "bogus"),
    "receipt": ("r1", "r:2", ""),
    "transaction": ("tx", "tx2", ""),
    "message-id": ("1", "2", "3", "x", ""),
    "subscription": ("1", "2", "/queue/a", ""),
    "selector": ("colour = 'blue'", "priority > 3", "((", ""),
    "prefetch-count": ("1", "0", "-1", "x"),
    "activemq.prefetchSize": ("5", "x"),
    "activemq.exclusive": ("true", "false"),
    "durable-subscription-name": ("d1", ""),
    "activemq.subscriptionName": ("d2",),
    "client-id": ("c1", ""),
    "persistent": ("true", "false", "x"),
    "priority": ("0", "9", "12", "-1", "x"),
    "expires": ("0", "1", "99999999999999", "x"),
    "JMSXGroupID": ("g1", "g2", ""),
    "JMSXGroupSeq": ("1", "-1", "x"),
    "content-type": ("text/plain", ""),
    "content-length": ("0", "3", "x"),
    "colour": ("blue", "red"),
    "accept-version": ("1.0", "1.1", "1.2", "1.0,1.2", "2.0", ""),
    "host": ("localhost",),
    "heart-beat": ("0,0", "10,10", "x"),
    "reply-to": ("/queue/replies",),
}
NAMES = sorted(HEADER_VALUES)


@st.composite
def frames(draw: st.DrawFn) -> bytes:
    command = draw(st.sampled_from(COMMANDS))
    names = draw(st.lists(st.sampled_from(NAMES), max_size=6, unique=True))
    headers = {n: draw(st.sampled_from(HEADER_VALUES[n])) for n in names}
    body = draw(st.sampled_from((b"", b"abc", b"\xe2\x82\xac")))
    if "content-length" in headers and headers["content-length"] != "x":
        headers["content-length"] = str(len(body))  # a wrong length is the codec fuzzer's
    return frame(command, headers, body)


def standard_opening(version: str) -> list[bytes]:
    """Frames that put deliveries in flight, so random ACKs can meet them."""
    sub = {"destination": "/queue/a", "ack": "client-individual"}
    if version != "1.0":
        sub["id"] = "1"
    return [
        frame("SUBSCRIBE", sub),
        frame("SEND", {"destination": "/queue/a", "JMSXGroupID": "g1"}, b"m1"),
        frame("SEND", {"destination": "/queue/a", "persistent": "true"}, b"m2"),
    ]


class Errors(logging.Handler):
    """Records the broker logged at ERROR or above (an unexpected exception)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@FUZZ
@given(
    version=st.sampled_from(("1.0", "1.1", "1.2")),
    opening=st.booleans(),
    sent=st.lists(frames(), max_size=12),
    split=st.booleans(),
)
def test_random_frames_never_meet_an_internal_error(version, opening, sent, split):
    errors = Errors()
    logger = logging.getLogger("shoal")
    logger.addHandler(errors)
    loop = asyncio.new_event_loop()
    h = SessionHarness(loop)
    try:
        session, transport = h.connect(version)
        stream = (standard_opening(version) if opening else []) + sent
        if split:  # one read per frame, a flush between
            for data in stream:
                if session.closing:
                    break
                session.data_received(data)
                h.settle()
        else:
            session.data_received(b"".join(stream))
            h.settle()
        session.connection_lost(None)
        h.settle()
        written = transport.frames()
    finally:
        h.close()
        loop.close()
        logger.removeHandler(errors)
    internal = [f for f in written if f.command == "ERROR" and f.headers.get("code") == "internal"]
    assert not internal, internal
    assert not errors.records, [r.getMessage() for r in errors.records]
