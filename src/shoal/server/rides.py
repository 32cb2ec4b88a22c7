"""A STOMP connection's output around receipts the kernel sends for it.

A producer's RECEIPT can ride behind the journal write that makes its SEND
durable (server/persistence.py, ``offer_ride``; docs/journal.md, "Writing"):
the kernel sends it through a dup of the connection's socket, so it never
sends on an fd number the loop closed and reused meanwhile. While a ride is
in flight nothing else may reach the socket ahead of it: the connection's
output, and its close, wait behind it.
"""

from __future__ import annotations

import asyncio
import os
from collections import deque
from typing import TYPE_CHECKING

from mypy_extensions import mypyc_attr

from shoal.server.pacing import PacedProtocol

if TYPE_CHECKING:
    from shoal.records import Record
    from shoal.server.session_api import ServerState


# A PacedProtocol itself: mypyc compiles classes with one base, so StompSession
# takes both from here. The cluster's LinkSession subclasses it, interpreted.
@mypyc_attr(allow_interpreted_subclasses=True)
class RidingOutput(PacedProtocol):
    transport: asyncio.Transport | None
    server: ServerState
    closing: bool
    out: list[bytes]
    # (seq, bytes, a producer's): receipts held until fsync
    receipts_awaiting_sync: deque[tuple[int, bytes, bool]]
    output_awaiting_sync: deque[tuple[int, list[bytes]]]
    # auto-ack removals of deliveries in the output: the store gets them once
    # that output is handed to the transport (BrokerServer.removals_written)
    removals_after_write: list[Record]

    def init_rides(self, ring_receipts: bool) -> None:
        self.ring_receipts = ring_receipts  # only plain TCP listeners ask for it
        self._socket_fd = -1  # the transport's socket, once connected
        self._ride_fd = -1  # its dup, made at the first boarding
        self.ride: bytes | None = None  # boarded: the kernel sends it after the write
        self._ride_entries: list[tuple[int, bytes, bool]] = []  # the receipts it carries
        self._behind_ride: list[bytes] = []  # output held until the ride is done
        self._close_after_ride = False

    def _write_out(self) -> None:
        """Write ``out`` now, or behind a receipt the kernel is yet to send."""
        if self.out:
            if self.ride is not None:
                self._behind_ride.extend(self.out)
            elif self.transport is not None and not self.transport.is_closing():
                self.transport.writelines(self.out)
        self.out.clear()
        if self.removals_after_write and self.ride is None and not self.output_awaiting_sync:
            self.release_removals()

    def release_removals(self) -> None:
        """Hand the removals of this connection's written (or dropped) auto-ack
        deliveries to the store, on the next loop pass."""
        removals, self.removals_after_write = self.removals_after_write, []
        self.server.removals_written(removals)

    def board(self, target: int) -> tuple[int, bytes] | None:
        """The producers' receipts at the head that ``target`` covers, for the
        kernel to send after the write (persistence.Rider). Only when nothing
        is written ahead of them: no output of this round, none held for a
        sync, nothing in the transport's buffer, no ride still in flight.
        Other receipts wait through sync retries, so they never ride."""
        if (
            self.ride is not None
            or self._socket_fd < 0
            or self.closing
            or self.out
            or self.output_awaiting_sync
            or self.transport is None
            or self.transport.get_write_buffer_size()
        ):
            return None
        waiting = self.receipts_awaiting_sync
        if not (waiting and waiting[0][0] <= target and waiting[0][2]):
            return None
        if self._ride_fd < 0:
            try:  # kept for the connection's life; see __init__
                self._ride_fd = os.dup(self._socket_fd)
            except OSError:  # out of fds: the loop writes the receipt
                return None
        entries = self._ride_entries
        while waiting and waiting[0][0] <= target and waiting[0][2]:
            entries.append(waiting.popleft())
        data = entries[0][1] if len(entries) == 1 else b"".join(e[1] for e in entries)
        self.ride = data
        return self._ride_fd, data

    def ride_done(self, result: int) -> None:
        """The kernel sent ``result`` bytes of the ride, or failed with -errno.

        Bytes it sent prove the write durable: the rest goes through the
        transport. When it sent nothing (the write failed, which cancels the
        send, or the socket was full or broken), the sync's waiter decides: the
        receipts go back to the head of the queue unless their sync is already
        reported, and a failed sync clears them and sends the ERROR instead.
        Either way the output held behind the ride follows."""
        data, self.ride = self.ride, None
        entries, self._ride_entries = self._ride_entries, []
        held, self._behind_ride = self._behind_ride, []
        if data is not None and result < len(data):
            if result > 0:
                held.insert(0, data[result:])
            elif entries[-1][0] <= self.server.persistence.synced_seq:
                held.insert(0, data)
            else:
                self.receipts_awaiting_sync.extendleft(reversed(entries))
        self.out[:0] = held
        self._write_out()
        if self._close_after_ride:
            self._close_after_ride = False
            if self.transport is not None:
                self.transport.close()
        if self.closing:
            self._close_ride_fd()

    def _close_ride_fd(self) -> None:
        self._socket_fd = -1
        if self._ride_fd >= 0:
            os.close(self._ride_fd)
            self._ride_fd = -1
