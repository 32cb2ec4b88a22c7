"""A fake transport and a socketless server for driving ``StompSession``.

As uvicorn tests its protocols: the session gets raw bytes through
``data_received`` and its output is read back from what it handed the
transport. Everything behind the session is real: ``BrokerServer`` (its
flush, the ServerState the session uses), the pure core and a SyncPipeline
over a MemoryStore. Only the listeners are missing, so no socket is opened;
the event loop is never run in the background, a test runs it (``settle``)
when it wants the flush and the syncs to happen.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from shoal.broker.core import Broker
from shoal.server.app import BrokerServer
from shoal.server.config import config_from_dict, core_limits
from shoal.server.persistence import SyncPipeline
from shoal.server.stomp import StompSession
from shoal.store.memory import MemoryStore

SYNC_WAIT = 10.0  # s: a bound on a test that waits for a sync, never reached when it passes


@dataclass(frozen=True)
class Frame:
    command: str
    headers: dict[str, str]
    body: bytes


HEARTBEAT = Frame("", {}, b"\n")  # how a heart-beat EOL buffer reads back


def parse_buffer(data: bytes) -> Frame:
    """One buffer the session handed ``writelines``: exactly one frame (or an EOL).

    Strict on purpose: two frames in one buffer, a missing NUL or bytes
    after it fail the test (the WebSocket adapter sends each buffer as one
    message, so the session promises one frame per buffer).
    """
    if data in (b"\n", b"\r\n"):
        return HEARTBEAT
    head, sep, rest = data.partition(b"\n\n")
    assert sep, f"no end of headers in {data!r}"
    lines = head.decode().split("\n")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        assert colon, f"header line without a colon: {line!r}"
        if lines[0] != "CONNECTED":  # STOMP 1.2 escapes every other frame's headers
            name, value = _unescape(name), _unescape(value)
        assert name not in headers, f"repeated header {name!r} in {data!r}"
        headers[name] = value
    length = headers.get("content-length")
    if length is not None:
        body, tail = rest[: int(length)], rest[int(length) :]
    else:
        nul = rest.find(b"\x00")
        assert nul >= 0, f"no NUL after the body in {data!r}"
        body, tail = rest[:nul], rest[nul:]
    assert tail == b"\x00", f"a buffer must hold exactly one frame, got {data!r}"
    return Frame(lines[0], headers, body)


_ESCAPES = {"\\\\": "\\", "\\c": ":", "\\n": "\n", "\\r": "\r"}


def _unescape(text: str) -> str:
    return re.sub(r"\\.", lambda m: _ESCAPES[m.group()], text)


class FakeTransport:
    """Records what an asyncio.Transport is asked to do."""

    def __init__(self, peer: tuple[str, int] | None = ("127.0.0.1", 50001)) -> None:
        self.peer = peer
        self.buffers: list[bytes] = []  # one per frame, in the order written
        self.read = 0  # buffers already returned by frames()
        self.closed = False
        self.reading = True
        self.pauses = 0
        self.write_buffer_limits: tuple[int | None, int | None] | None = None
        self.writes_after_close = 0
        self.unsent = 0  # what get_write_buffer_size answers (bytes the socket did not take)

    # --- the asyncio.Transport surface the session uses -----------------------

    def writelines(self, data: Any) -> None:
        if self.closed:
            self.writes_after_close += 1
        self.buffers.extend(bytes(b) for b in data)

    def write(self, data: bytes) -> None:
        self.writelines([data])

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def pause_reading(self) -> None:
        assert self.reading, "pause_reading on a paused transport"
        self.reading = False
        self.pauses += 1

    def resume_reading(self) -> None:
        assert not self.reading, "resume_reading on a transport that reads"
        self.reading = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self.peer if name == "peername" else default

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self.write_buffer_limits = (high, low)

    def get_write_buffer_size(self) -> int:
        return self.unsent

    # --- for the tests ----------------------------------------------------------

    def frames(self) -> list[Frame]:
        """The frames written since the last call."""
        new = self.buffers[self.read :]
        self.read = len(self.buffers)
        return [parse_buffer(b) for b in new]


class GatedStore(MemoryStore):
    """A MemoryStore whose sync waits until the test opens the gate."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.gate.set()
        self.syncs_started = 0
        self.in_sync = threading.Event()  # set once a sync waits at the gate
        self.fail_with: Exception | None = None  # raised by the syncs while set

    def sync(self, durable: Callable[[], None] | None = None) -> None:
        self.syncs_started += 1
        self.in_sync.set()
        if not self.gate.wait(SYNC_WAIT):
            raise TimeoutError("test never opened the sync gate")
        if self.fail_with is not None:
            raise self.fail_with
        super().sync(durable)


class SessionHarness:
    """A BrokerServer without listeners, and sessions on fake transports."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, config: dict[str, Any] | None = None
    ) -> None:
        raw = dict(config or {})
        # Defaults that keep timers quiet: no heart-beats unless a test asks.
        broker = {"data": "", "heartbeat": [0, 0], **raw.pop("broker", {})}
        self.config = config_from_dict({"broker": broker, **raw})
        self.loop = loop
        server = self.server = BrokerServer(self.config)
        self.store = server.store = GatedStore()
        # What BrokerServer.start builds before it listens.
        server.loop = loop
        recovered = server.store.open()
        server.broker = Broker(
            self.config.address_settings,
            time.time(),
            queues_config=self.config.queues,
            topics=self.config.topics,
            global_max_size=self.config.limits["global-max-size"],
            limits=core_limits(self.config.limits),
            paging=False,
        )
        server.broker.restore(recovered, time.time())
        server.persistence = SyncPipeline(server.store, loop)
        server.persistence.append(server.broker.take_records())  # the configured queues
        self.settle()

    def close(self) -> None:
        self.store.gate.set()
        self.server.persistence.close()

    def open(
        self, peer: tuple[str, int] | None = ("127.0.0.1", 50001)
    ) -> tuple[StompSession, FakeTransport]:
        session = StompSession(self.server)
        transport = FakeTransport(peer)
        session.connection_made(transport)  # type: ignore[arg-type]
        return session, transport

    def connect(self, version: str = "1.2", **headers: str) -> tuple[StompSession, FakeTransport]:
        """A session past CONNECTED (its CONNECTED frame already read)."""
        session, transport = self.open()
        session.data_received(frame("CONNECT", {"accept-version": version, "host": "h", **headers}))
        self.settle()
        [connected] = transport.frames()
        assert connected.command == "CONNECTED", connected
        return session, transport

    def settle(self) -> None:
        """Run the loop until the flush ran and everything waited for is synced."""
        loop = self.loop
        loop.run_until_complete(asyncio.sleep(0))  # call_soon'd flush, release_blocked
        pipeline = self.server.persistence
        while not pipeline.idle:
            self.wait_synced(pipeline.appended_seq)
            loop.run_until_complete(asyncio.sleep(0))

    def wait_synced(self, seq: int) -> None:
        done = self.loop.create_future()
        self.server.persistence.when_synced(
            seq, lambda error: done.done() or done.set_result(error), fail_fast=False
        )
        self.loop.run_until_complete(asyncio.wait_for(done, SYNC_WAIT))

    def run_once(self) -> None:
        """One pass of the loop's ready callbacks (the flush, a sync start)."""
        self.loop.run_until_complete(asyncio.sleep(0))


class PassLog:
    """What happened on which pass of the loop: writes to ``transport`` and
    appends to the store, as (pass, what)."""

    def __init__(self, h, transport, label: Callable[[bytes], str] | None = None) -> None:
        self.events: list[tuple[int, str]] = []
        label = label or (lambda data: data.split(b"\n", 1)[0].decode())  # a STOMP command
        self.passes = 0
        self.loop = h.loop
        self._tick = self.loop.call_soon(self._pass)
        store = h.server.persistence.store  # the pipeline may be compiled: wrap its store
        append, writelines = store.append, transport.writelines

        def logged_append(records):
            self.events += [(self.passes, type(r).__name__) for r in records]
            append(records)

        def logged_writelines(data):
            data = list(data)
            self.events += [(self.passes, label(bytes(b))) for b in data]
            writelines(data)

        store.append = logged_append
        transport.writelines = logged_writelines

    def _pass(self) -> None:  # one call per pass: each pass runs what was ready at its start
        self.passes += 1
        self._tick = self.loop.call_soon(self._pass)

    def close(self) -> None:
        self._tick.cancel()

    def first(self, what: str) -> int:
        return next(n for n, w in self.events if w == what)


def frame(command: str, headers: dict[str, str] | None = None, body: bytes = b"") -> bytes:
    head = command + "\n" + "".join(f"{k}:{v}\n" for k, v in (headers or {}).items())
    return head.encode() + b"\n" + body + b"\x00"
