"""How a client connection's reading is paced, for STOMP and AMQP alike.

Three reasons to stop reading a socket, kept apart so that ending one never
ends another:

- one read per flush: uvloop (libuv) reads a socket up to 32 times a loop
  iteration, so a producer's burst would outrun the flush and the
  consumers' acks, and its messages would queue instead of going straight
  out. A second read before the flush pauses reading until the flush, as
  the stdlib loop does by itself (one read per socket per iteration);
- a bounded backlog: SENDs (transfers) blocked behind a full address past
  ``max-held-send-bytes`` stop reading until they are taken;
- a peer that does not read (AMQP): past the write buffer's high-water mark
  the connection is not read until the peer takes what it was sent, so a
  client that sends requests and never reads the answers cannot grow the
  broker's memory.

A session holds one :class:`ReadPacer` (``session.pacer``), as uvicorn's
protocol holds its ``FlowControl``.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from shoal.server.session_api import ServerState


class PacedSession(Protocol):
    """What a pacer reads of its session: the transport, once connected, and
    whether the session is closing (a closing session is never read again)."""

    transport: asyncio.Transport | None
    closing: bool


class ReadPacer:
    """Pauses and resumes one session's reading (see the module's docstring)."""

    def __init__(self, session: PacedSession, server: ServerState) -> None:
        self.session = session
        self.server = server  # its flush calls ``flushed`` on read_since_flush
        self.reading_paused = False  # the blocked backlog is past its limit
        self.write_blocked = False  # the peer does not take what we write
        self.read_since_flush = False
        self.paused_until_flush = False

    def note_read(self) -> None:
        """Called first in the session's ``data_received``."""
        if not self.read_since_flush:
            self.read_since_flush = True
            self.server.read_since_flush.append(self)
        elif not (self.paused_until_flush or self.reading_paused or self.write_blocked):
            transport = self.session.transport
            if transport is not None:
                self.paused_until_flush = True
                transport.pause_reading()

    def flushed(self) -> None:
        """The server's flush ran: reading may go on."""
        self.read_since_flush = False
        if self.paused_until_flush:
            self.paused_until_flush = False
            session = self.session
            if (
                not (self.reading_paused or self.write_blocked or session.closing)
                and session.transport is not None
            ):
                session.transport.resume_reading()

    def pause_for_backlog(self) -> None:
        transport = self.session.transport
        if not self.reading_paused and transport is not None:
            self.reading_paused = True
            if not (self.paused_until_flush or self.write_blocked):
                transport.pause_reading()

    def resume_after_backlog(self) -> None:
        session = self.session
        if self.reading_paused and not session.closing:
            self.reading_paused = False
            if session.transport is not None and not (
                self.paused_until_flush or self.write_blocked
            ):
                session.transport.resume_reading()

    def pause_for_writes(self) -> None:
        """The transport's write buffer passed its high-water mark."""
        transport = self.session.transport
        if not self.write_blocked and transport is not None:
            self.write_blocked = True
            if not (self.paused_until_flush or self.reading_paused):
                transport.pause_reading()

    def resume_after_writes(self) -> None:
        """The peer took enough of what was written: reading may go on."""
        session = self.session
        if self.write_blocked and not session.closing:
            self.write_blocked = False
            if session.transport is not None and not (
                self.paused_until_flush or self.reading_paused
            ):
                session.transport.resume_reading()
