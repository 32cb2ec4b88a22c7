"""Per-connection glue between a sans-I/O STOMP connection and the core.

Only I/O, timers and flow control live here: bytes in -> protocol events ->
core commands; the core's effects come back through the server's ``flush``
(``BrokerServer`` in app.py; what a session may use of it is ``state.ServerState``).
Every client-visible error becomes an ERROR frame; only that connection
closes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from shoal.errors import (
    BrokerError,
    Forbidden,
    GroupDecisionTimeout,
    LimitExceeded,
    ProtocolError,
    StoreError,
)
from shoal.protocol.stomp import (
    NEED_DATA,
    SUPPORTED_VERSIONS,
    ConnectionState,
    Role,
    StompConnection,
)
from shoal.protocol.stomp import frames as f

if TYPE_CHECKING:
    from shoal.server.state import ServerState

log = logging.getLogger("shoal.stomp")

_HIGH_WATER = 1024 * 1024


class StompSession(asyncio.Protocol):
    """One STOMP client connection.

    Output goes to the transport with ``writelines``, one STOMP frame (or
    heart-beat EOL) per buffer: a TCP transport writes them back to back, the
    WebSocket adapter (server/ws.py) sends each as one WebSocket message.
    """

    # frame type -> handler (filled in below the class); a subclass with
    # other rules (the cluster link's LinkSession) installs its own table
    handlers: ClassVar[dict[type, Callable[[Any, Any], None]]]

    def __init__(
        self, server: ServerState, versions: tuple[str, ...] = SUPPORTED_VERSIONS
    ) -> None:
        self.server = server
        self.conn_id = server.next_conn_id()
        self.conn = StompConnection(Role.SERVER, limits=server.protocol_limits, versions=versions)
        self.transport: asyncio.Transport | None = None
        self.peer = ""
        self.user: str | None = None
        self.connected = False
        self.closing = False
        self.out: list[bytes] = []
        self.waiting: deque[tuple[int, bytes]] = deque()  # receipts held until fsync
        # Output (frames) held until its deliveries' counts are synced; later
        # output queues behind it so MESSAGE frames keep their order.
        self.held: deque[tuple[int, list[bytes]]] = deque()
        self.subscriptions: set[str] = set()
        # Cluster: the SEND or COMMIT just handled waits for group bindings
        # (hold ids from the core); its receipt waits for all of them:
        # hold id -> [holds still undecided, receipt id or None].
        self.hold_ids: list[int] = []
        self.held_receipts: dict[int, list] = {}
        self._timer: asyncio.TimerHandle | None = None
        self.connected_at = time.time()
        self.frames_in = 0
        self.messages_out = 0
        # Wall clock for the frames of one data_received call (read once:
        # time.time() costs ~0.2 us here, and a burst is handled in far less
        # than a millisecond).
        self.now = self.connected_at

    # --- asyncio.Protocol ---------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        transport.set_write_buffer_limits(high=_HIGH_WATER)
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        server = self.server
        if len(server.sessions) >= server.config.limits["max-connections"]:
            limit = server.config.limits["max-connections"]
            self._fail(LimitExceeded("max-connections", limit), None)
            return
        server.sessions[self.conn_id] = self

    def data_received(self, data: bytes) -> None:
        if self.closing:
            return
        conn = self.conn
        server = self.server
        conn.receive_data(data, server.loop.time())
        self.now = time.time()
        handlers = self.handlers
        next_event = conn.next_event
        receipt_id = None
        frames = 0
        broker = server.broker
        ack = broker.ack
        conn_id = self.conn_id
        now = self.now
        broker.batch_begin()  # one dispatch pass for this read's frames
        try:
            while True:
                event = next_event()
                if event is NEED_DATA:
                    break
                frames += 1
                kind = type(event)
                if kind is _ACK and event.transaction is None:  # the commonest frame
                    receipt_id = event.receipt
                    ack(conn_id, event.id, now)
                else:
                    handler = handlers.get(kind)
                    if handler is None:
                        break  # ConnectionClosed: the peer is gone
                    receipt_id = event.headers.get("receipt") if event.headers else None
                    handler(self, event)
                if self.hold_ids:
                    self._hold_receipt(receipt_id)
                elif receipt_id is not None and kind is not f.Disconnect:
                    self._receipt(receipt_id, producer=kind in _PRODUCER_FRAMES)
                if self.closing:
                    break
        except BrokerError as exc:
            if conn.state is ConnectionState.ERROR:  # the frame itself broke the rules
                receipt_id = conn.error_receipt_id
            self._fail(exc, receipt_id)
        except Exception:  # a bug must not take the broker down
            log.exception("unexpected error handling a frame from %s", self.peer)
            self._fail(BrokerError("internal broker error; see the broker log"), receipt_id)
        finally:
            try:
                broker.batch_end()
            except Exception:  # a bug must not take the broker down
                log.exception("unexpected error dispatching after frames from %s", self.peer)
                self._fail(BrokerError("internal broker error; see the broker log"), None)
        self.frames_in += frames
        if self.out:
            server.dirty.add(self)
        server.schedule_flush()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        if self._timer is not None:
            self._timer.cancel()
        server = self.server
        if server.sessions.pop(self.conn_id, None) is not None and self.connected:
            server.broker.disconnect(self.conn_id, time.time())
            server.schedule_flush()

    def pause_writing(self) -> None:
        self.server.broker.set_writable(self.conn_id, False, time.time())

    def resume_writing(self) -> None:
        self.server.broker.set_writable(self.conn_id, True, time.time())
        self.server.schedule_flush()

    # --- output -------------------------------------------------------------

    def write_now(self) -> None:
        if self.held and self.out and not self.closing:
            # Earlier deliveries wait for an fsync: keep the order behind them.
            self.held.append((self.held[-1][0], self.out.copy()))
            self.out.clear()
            return
        if self.out and self.transport is not None and not self.transport.is_closing():
            self.transport.writelines(self.out)
        self.out.clear()

    def hold_output(self, seq: int) -> None:
        """Write this round's output only once ``seq`` is synced (delivery counts first)."""
        if not self.out:
            return
        self.held.append((seq, self.out.copy()))
        self.out.clear()
        self.server.persistence.when_synced(seq, self._synced, fail_fast=False)

    def _receipt(self, receipt_id: str, *, producer: bool = False) -> None:
        """Answer once everything journaled so far is synced.

        A producer's receipt (SEND, COMMIT) fails fast when the sync fails, so
        it hears its message was not stored; other receipts (ACK, SUBSCRIBE...)
        wait through the retries, and the consumer keeps being served.
        """
        data = self.conn.send(f.Receipt(receipt_id=receipt_id))
        pipeline = self.server.persistence
        seq = pipeline.append(self.server.take_records())
        if not self.waiting and seq <= pipeline.synced_seq:
            self.out.append(data)
            return
        self.waiting.append((seq, data))
        pipeline.when_synced(seq, self._synced, fail_fast=producer)

    def _synced(self, error: StoreError | None) -> None:
        if self.closing:
            return
        if error is not None:
            self.waiting.clear()
            self._fail(error, None, hint=f"persistent message not stored: {error}")
            return
        synced = self.server.persistence.synced_seq
        while self.held and self.held[0][0] <= synced:
            self.out.extend(self.held.popleft()[1])
        while self.waiting and self.waiting[0][0] <= synced:
            self.out.append(self.waiting.popleft()[1])
        # Released output goes out now, ahead of anything still held.
        if self.out and self.transport is not None and not self.transport.is_closing():
            self.transport.writelines(self.out)
        self.out.clear()

    def send_decided(self, hold_id: int, error: str | None) -> None:
        """Cluster: a held SEND was routed (its receipt may go once synced) or
        refused (C3: an ERROR naming the group, as STOMP closes after it)."""
        waiter = self.held_receipts.pop(hold_id, None)
        if self.closing or waiter is None:
            return
        if error is not None:
            self._fail(GroupDecisionTimeout(error), waiter[1])
        else:
            waiter[0] -= 1
            if waiter[0] == 0 and waiter[1] is not None:
                self._receipt(waiter[1], producer=True)
        self.server.dirty.add(self)

    def _hold_receipt(self, receipt_id: str | None) -> None:
        waiter = [len(self.hold_ids), receipt_id]
        for hold in self.hold_ids:
            self.held_receipts[hold] = waiter
        self.hold_ids = []

    def _fail(self, exc: BrokerError, receipt_id: str | None, hint: str | None = None) -> None:
        """Send an ERROR frame naming the problem and close this connection only."""
        message = hint or getattr(exc, "error_frame_hint", None) or str(exc)
        if isinstance(exc, LimitExceeded):  # name the limit as the config file does
            message = message.replace(exc.limit_name, exc.limit_name.replace("_", "-"))
        headers = {"code": exc.code}
        if receipt_id is not None:
            headers["receipt-id"] = receipt_id
        if isinstance(exc, ProtocolError) and "version" in message:
            headers["version"] = ",".join(self.conn.versions)
        try:
            data = self.conn.send(f.Error(message=message.splitlines()[0][:1000], body=(message + "\n").encode(), receipt_id=receipt_id, headers=headers))
        except Exception:  # the protocol object may refuse in its ERROR state
            data = _raw_error(message, receipt_id)
        self.out.append(data)
        self.close_after_write()

    def close_after_write(self) -> None:
        self.closing = True
        self.write_now()
        if self.transport is not None:
            self.transport.close()

    # --- heart-beats --------------------------------------------------------

    def _arm_timer(self) -> None:
        deadline = self.conn.get_timer()
        if deadline is None or self.closing:
            return
        loop = self.server.loop
        self._timer = loop.call_at(deadline, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        if self.closing:
            return
        try:
            data = self.conn.handle_timer(self.server.loop.time())
        except ProtocolError as exc:
            log.info("closing %s: %s", self.peer, exc)
            self._fail(exc, None)
            self.server.schedule_flush()
            return
        if data:
            self.out.append(data)
            self.write_now()
        self._arm_timer()

    # --- frame handlers -----------------------------------------------------

    def on_connect(self, event: f.Connect) -> None:
        server = self.server
        self.user = server.config.security.authenticate(event.login, event.passcode)
        client_id = event.headers.get("client-id")
        server.broker.connect(self.conn_id, time.time(), user=self.user, client_id=client_id)
        self.connected = True
        sx, sy = server.config.heartbeat_ms
        self.out.append(
            self.conn.send(
                f.Connected(
                    server=f"shoal/{server.version}",
                    session=str(self.conn_id),
                    heart_beat=(sx, sy),
                )
            )
        )
        self._arm_timer()

    def on_send(self, event: f.Send) -> None:
        server = self.server
        # The frame's own dict (decoded for this frame only) becomes the
        # message's headers: drop the transport headers in place.
        headers = event.headers
        pop = headers.pop
        pop("content-length", None)
        pop("destination", None)
        pop("receipt", None)
        transaction = pop("transaction", None)
        if transaction is None:
            transaction = event.transaction
        destination = event.destination
        if destination.startswith(_CLUSTER_QUEUES):
            raise Forbidden(f"{destination!r}: the $cluster. queues belong to the cluster links")
        if server.security_on:
            server.authorize(self.user, "send", destination)
        if transaction is None:
            hold = server.broker.send(self.conn_id, destination, headers, event.body, self.now)
            if hold is not None:
                self.hold_ids.append(hold)
        else:
            server.broker.send(
                self.conn_id, destination, headers, event.body, self.now, transaction=transaction
            )

    def on_subscribe(self, event: f.Subscribe) -> None:
        server = self.server
        if event.destination.startswith(_CLUSTER_QUEUES):
            raise Forbidden(f"{event.destination!r}: the $cluster. queues belong to the "
                            "cluster links")
        if server.security_on:
            server.authorize(self.user, "consume", event.destination)
        server.broker.subscribe(
            self.conn_id, event.id, event.destination, event.ack, event.headers, time.time()
        )
        self.subscriptions.add(event.id)

    def on_unsubscribe(self, event: f.Unsubscribe) -> None:
        durable = "durable-subscription-name" in event.headers or (
            "activemq.subscriptionName" in event.headers
        )
        self.server.broker.unsubscribe(self.conn_id, event.id, time.time(), durable=durable)
        self.subscriptions.discard(event.id)

    def on_ack(self, event: f.Ack) -> None:
        tx = event.transaction
        if tx is None:
            self.server.broker.ack(self.conn_id, event.id, self.now)
        else:
            self.server.broker.ack(self.conn_id, event.id, self.now, transaction=tx)

    def on_nack(self, event: f.Nack) -> None:
        self.server.broker.nack(self.conn_id, event.id, time.time(), transaction=event.transaction)

    def on_begin(self, event: f.Begin) -> None:
        self.server.broker.begin(self.conn_id, event.transaction, time.time())

    def on_commit(self, event: f.Commit) -> None:
        holds = self.server.broker.commit(self.conn_id, event.transaction, time.time())
        if holds:
            self.hold_ids.extend(holds)

    def on_abort(self, event: f.Abort) -> None:
        self.server.broker.abort(self.conn_id, event.transaction, time.time())

    def on_disconnect(self, event: f.Disconnect) -> None:
        self.server.broker.disconnect(self.conn_id, time.time())
        self.connected = False
        if event.receipt is None:
            self.close_after_write()
            return
        self._receipt(event.receipt)
        self.closing = True
        if not self.waiting:
            self.close_after_write()
        else:
            self.server.persistence.when_synced(
                self.waiting[-1][0], lambda _e: self._drain_and_close()
            )

    def _drain_and_close(self) -> None:
        while self.held:
            self.out.extend(self.held.popleft()[1])
        while self.waiting:
            self.out.append(self.waiting.popleft()[1])
        self.close_after_write()

    def on_heartbeat(self, event: object) -> None:
        pass

    def shutdown(self, reason: str) -> None:
        """Graceful stop: tell the client why, then close."""
        if self.closing:
            return
        try:
            self.out.append(
                self.conn.send(f.Error(message=reason, body=b"", receipt_id=None, headers={}))
            )
        except Exception:
            self.out.append(_raw_error(reason, None))
        self.close_after_write()


def _raw_error(message: str, receipt_id: str | None) -> bytes:
    head = f"ERROR\nmessage:{_raw_value(message)[:1000]}\n"
    if receipt_id is not None:
        head += f"receipt-id:{_raw_value(receipt_id)}\n"
    return (head + "\n").encode() + b"\x00"


def _raw_value(text: str) -> str:
    """``text`` as a header value any STOMP version reads back: one line, no NUL."""
    return text.replace("\r", " ").replace("\n", " ").replace(":", " -").replace("\x00", " ")


_ACK = f.Ack
_CLUSTER_QUEUES = "/queue/$cluster."  # forward queues: only the links consume them
# Frames whose receipt promises a stored message.
_PRODUCER_FRAMES = (f.Send, f.Commit)

StompSession.handlers = {
    f.Connect: StompSession.on_connect,
    f.Send: StompSession.on_send,
    f.Subscribe: StompSession.on_subscribe,
    f.Unsubscribe: StompSession.on_unsubscribe,
    f.Ack: StompSession.on_ack,
    f.Nack: StompSession.on_nack,
    f.Begin: StompSession.on_begin,
    f.Commit: StompSession.on_commit,
    f.Abort: StompSession.on_abort,
    f.Disconnect: StompSession.on_disconnect,
    f.Heartbeat: StompSession.on_heartbeat,
}
