"""How a client connection's reading is paced, for STOMP and AMQP alike.

Two reasons to stop reading a socket, kept apart so that ending one never
ends the other:

- one read per flush: uvloop (libuv) reads a socket up to 32 times a loop
  iteration, so a producer's burst would outrun the flush and the
  consumers' acks, and its messages would queue instead of going straight
  out. A second read before the flush pauses reading until the flush, as
  the stdlib loop does by itself (one read per socket per iteration);
- a bounded backlog: SENDs (transfers) held behind a full address past
  ``max-held-send-bytes`` stop reading until they are taken.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from mypy_extensions import mypyc_attr

if TYPE_CHECKING:
    from shoal.server.session_api import ServerState


@mypyc_attr(allow_interpreted_subclasses=True)  # AmqpSession
class PacedProtocol(asyncio.Protocol):
    transport: asyncio.Transport | None
    server: ServerState  # its flush calls ``flushed`` on read_since_flush
    closing: bool
    reading_paused = False  # the held backlog is past its limit
    read_since_flush = False
    paused_until_flush = False

    def note_read(self) -> None:
        """Called first in ``data_received``."""
        if not self.read_since_flush:
            self.read_since_flush = True
            self.server.read_since_flush.append(self)
        elif not (self.paused_until_flush or self.reading_paused) and self.transport is not None:
            self.paused_until_flush = True
            self.transport.pause_reading()

    def flushed(self) -> None:
        """The server's flush ran: reading may go on."""
        self.read_since_flush = False
        if self.paused_until_flush:
            self.paused_until_flush = False
            if not (self.reading_paused or self.closing) and self.transport is not None:
                self.transport.resume_reading()

    def pause_for_backlog(self) -> None:
        if not self.reading_paused and self.transport is not None:
            self.reading_paused = True
            if not self.paused_until_flush:
                self.transport.pause_reading()

    def resume_after_backlog(self) -> None:
        if self.reading_paused and not self.closing:
            self.reading_paused = False
            if self.transport is not None and not self.paused_until_flush:
                self.transport.resume_reading()
