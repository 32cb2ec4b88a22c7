"""Per-connection glue between a sans-I/O STOMP connection and the core.

Only I/O, timers and flow control live here: bytes in -> protocol events ->
core commands; the core's effects come back through the server's ``flush``
(``BrokerServer`` in app.py; what a session may use of it is
``session_api.ServerState``).
Every client-visible error becomes an ERROR frame; only that connection
closes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, cast

from mypy_extensions import mypyc_attr

from shoal.errors import (
    BrokerError,
    Forbidden,
    GroupDecisionTimeout,
    LimitExceeded,
    ProtocolError,
    StoreError,
    Unauthenticated,
)
from shoal.protocol.stomp import (
    NEED_DATA,
    SUPPORTED_VERSIONS,
    ConnectionState,
    Role,
    StompConnection,
)
from shoal.protocol.stomp import frames as f
from shoal.security import wrong_credentials
from shoal.server.pacing import ReadPacer

if TYPE_CHECKING:
    from shoal.records import Record
    from shoal.server.session_api import ServerState

log = logging.getLogger("shoal.stomp")

_HIGH_WATER = 1024 * 1024


@mypyc_attr(allow_interpreted_subclasses=True)  # the cluster's LinkSession
class StompSession(asyncio.Protocol):
    """One STOMP client connection.

    Output goes to the transport with ``writelines``, one STOMP frame (or
    heart-beat EOL) per buffer: a TCP transport writes them back to back, the
    WebSocket adapter (server/ws.py) sends each as one WebSocket message.
    """

    # frame type -> handler (filled in below the class); a subclass with
    # other rules (the cluster link's LinkSession) installs its own table
    handlers: ClassVar[dict[type, Callable[[Any, Any], None]]]
    protocol = "stomp"  # the server's flush encodes our deliveries (app.py)
    offered_heartbeat_ms: tuple[int, int] | None = None  # None: [broker] heartbeat

    def __init__(
        self,
        server: ServerState,
        versions: tuple[str, ...] = SUPPORTED_VERSIONS,
    ) -> None:
        self.server = server
        self.conn_id = server.next_conn_id()
        # Until CONNECTED a peer is a stranger: small frames (see _connected).
        self.conn = StompConnection(Role.SERVER, limits=server.handshake_limits, versions=versions)
        self.transport: asyncio.Transport | None = None
        self.peer = ""
        self.user: str | None = None
        self.connected = False
        self.closing = False
        self.pacer = ReadPacer(self, server)
        self.out: list[bytes] = []
        # receipts held until fsync: (seq, bytes, a producer's)
        self.receipts_awaiting_sync: deque[tuple[int, bytes, bool]] = deque()
        # Output (frames) held until its deliveries' counts are synced; later
        # output queues behind it so MESSAGE frames keep their order.
        self.output_awaiting_sync: deque[tuple[int, list[bytes]]] = deque()
        self.removals_after_write: list[Record] = []
        self.subscriptions: dict[str, str] = {}  # id -> destination
        # Cluster: the SENDs of the SEND or COMMIT just handled that wait for
        # their groups' bindings (the core's hold ids); its receipt waits for
        # all of them: hold id -> [sends still undecided, receipt id or None].
        self.undecided_sends: list[int] = []
        self.receipts_awaiting_decision: dict[int, list[Any]] = {}
        self._timer: asyncio.TimerHandle | None = None
        # Frames blocked while an address this connection filled is full
        # (address-full-policy "block"): its SENDs there, and after the first
        # blocked frame everything that must stay in order with it.
        self.blocked_frames: deque[f.Event] = deque()
        self.blocked_bytes = 0
        self.authenticating = False  # a password check runs off the loop
        self._handshake_timer: asyncio.TimerHandle | None = None
        self._idle_timer: asyncio.TimerHandle | None = None
        self.last_read = 0.0  # loop time of the last bytes from the peer
        self._receipt_in_hand: str | None = None  # of the frame being handled, for its ERROR
        self.connected_at = time.time()
        self.frames_in = 0
        self.messages_out = 0
        # Wall clock for the frames of one data_received call (read once:
        # time.time() costs ~0.2 us here, and a burst is handled in far less
        # than a millisecond).
        self.now = self.connected_at

    # --- asyncio.Protocol ---------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = tcp = cast("asyncio.Transport", transport)  # a stream transport
        tcp.set_write_buffer_limits(high=_HIGH_WATER)
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.peer_host = str(peer[0]) if peer else "?"
        server = self.server
        # Strangers have their own, lower cap: they cannot lock clients out.
        limit = server.config.limits["max-unauthenticated-connections"]
        if not server.handshaking.admit(self.conn_id, transport, limit):  # per listener
            self._fail(LimitExceeded("max-unauthenticated-connections", limit), None)
            return
        server.sessions[self.conn_id] = self
        self.last_read = server.loop.time()
        timeout = server.config.handshake_timeout
        if timeout > 0:
            self._handshake_timer = server.loop.call_later(timeout, self._handshake_expired)

    def data_received(self, data: bytes) -> None:
        if self.closing:
            return
        self.pacer.note_read()  # one read per flush (server/pacing.py)
        self.last_read = now = self.server.loop.time()
        self.conn.receive_data(data, now)
        self._handle_frames()

    def _handle_frames(self) -> None:
        conn = self.conn
        server = self.server
        self.now = time.time()
        handlers = self.handlers
        next_event = conn.next_event
        frames = 0
        broker = server.broker
        ack = broker.ack
        conn_id = self.conn_id
        now = self.now
        self._receipt_in_hand = None
        take_acks = conn.take_acks
        broker.batch_begin()  # one dispatch pass for this read's frames
        try:
            while True:
                acks = take_acks()  # plain ACKs: no event each (they carry nothing else)
                if acks:
                    frames += len(acks)
                    self._receipt_in_hand = None
                    for ack_id in acks:
                        ack(conn_id, ack_id, now)
                    if self.closing:
                        break
                    continue
                event = next_event()
                if event is NEED_DATA:
                    break
                frames += 1
                kind = type(event)
                # ``kind is _ACK`` makes ``event`` an f.Ack, which mypy cannot follow
                if kind is _ACK and event.transaction is None:  # type: ignore[attr-defined]  # the commonest frame
                    receipt_id = self._receipt_in_hand = event.receipt  # type: ignore[attr-defined]
                    ack(conn_id, event.id, now)  # type: ignore[attr-defined]
                elif (self.blocked_frames or kind in _BLOCKABLE) and self._must_wait(kind, event):
                    self._block(event)
                    continue
                else:
                    handler = handlers.get(kind)
                    if handler is None:
                        break  # ConnectionClosed: the peer is gone
                    receipt_id = self._receipt_in_hand = (  # every event with a handler is a frame
                        event.headers.get("receipt") if event.headers else None  # type: ignore[attr-defined]
                    )
                    handler(self, event)
                if self.undecided_sends:
                    self._receipt_after_decision(receipt_id)
                elif receipt_id is not None and kind not in _OWN_RECEIPT:
                    self._receipt(receipt_id, producer=kind in _PRODUCER_FRAMES)
                if self.closing:
                    break
        except Exception as exc:
            self._frame_failed(exc)
        finally:
            self._batch_end()
        self.frames_in += frames
        if self.out:
            server.dirty.add(self)
        server.schedule_flush()

    def _frame_failed(self, exc: Exception) -> None:
        receipt_id = self._receipt_in_hand
        if isinstance(exc, BrokerError):
            if self.conn.state is ConnectionState.ERROR:  # the frame itself broke the rules
                receipt_id = self.conn.error_receipt_id
            if (
                isinstance(exc, LimitExceeded)
                and exc.limit_name == "max_frame_bytes"
                and not self.connected
            ):
                limit = self.server.config.limits["max-unauthenticated-frame-bytes"]
                exc = LimitExceeded(
                    "max-unauthenticated-frame-bytes",
                    limit,
                    f"frame larger than max-unauthenticated-frame-bytes ({limit} bytes) before CONNECTED",
                )
            self._fail(exc, receipt_id)
        else:  # a bug must not take the broker down
            log.error("unexpected error handling a frame from %s", self.peer, exc_info=exc)
            self._fail(BrokerError("internal broker error; see the broker log"), receipt_id)

    def _batch_end(self) -> None:
        try:
            self.server.broker.batch_end()
        except Exception:  # a bug must not take the broker down
            log.exception("unexpected error dispatching after frames from %s", self.peer)
            self._fail(BrokerError("internal broker error; see the broker log"), None)

    # --- producer flow control (address-full-policy "block") ----------------

    def _must_wait(self, kind: type, event: f.Event) -> bool:
        """Whether this frame waits behind a full address.

        A SEND (or a COMMIT of SENDs) to an address this connection filled
        waits until it has room; once one frame waits, every later frame
        that produces or touches a transaction waits behind it, in order.
        ACK, NACK, SUBSCRIBE, UNSUBSCRIBE go on, so a consumer that also
        produces can still drain the full address.
        """
        if self.blocked_frames:
            return kind in _ORDERED_WITH_SENDS or getattr(event, "transaction", None) is not None
        return self._blocked(kind, event)

    def _blocked(self, kind: type, event: f.Event) -> bool:
        broker = self.server.broker
        if kind is f.Send:
            send = cast("f.Send", event)
            return send.transaction is None and broker.send_blocked(self.conn_id, send.destination)
        if kind is f.Commit:
            return broker.commit_blocked(self.conn_id, event.transaction)  # type: ignore[attr-defined]
        return False

    def _block(self, event: f.Event) -> None:
        self.blocked_frames.append(event)
        self.blocked_bytes += len(getattr(event, "body", b""))
        limit = self.server.config.limits["max-held-send-bytes"]
        if 0 <= limit < self.blocked_bytes:
            self.pacer.pause_for_backlog()  # the backlog itself is bounded

    def release_blocked(self) -> None:
        """Handle blocked frames in order, up to the first still blocked."""
        if self.closing or not self.blocked_frames:
            return
        self.now = time.time()
        blocked = self.blocked_frames
        broker = self.server.broker
        broker.batch_begin()
        try:
            while blocked and not self.closing:
                event = blocked[0]
                kind = type(event)
                if self._blocked(kind, event):
                    break
                blocked.popleft()
                self.blocked_bytes -= len(getattr(event, "body", b""))
                receipt_id = self._receipt_in_hand = (  # blocked events are frames
                    event.headers.get("receipt") if event.headers else None  # type: ignore[attr-defined]
                )
                self.handlers[kind](self, event)
                if self.undecided_sends:  # as in _handle_frames
                    self._receipt_after_decision(receipt_id)
                elif receipt_id is not None and kind not in _OWN_RECEIPT:
                    self._receipt(receipt_id, producer=kind in _PRODUCER_FRAMES)
        except Exception as exc:
            self._frame_failed(exc)
        finally:
            self._batch_end()
        limit = self.server.config.limits["max-held-send-bytes"]
        if limit < 0 or self.blocked_bytes <= limit:
            self.pacer.resume_after_backlog()
        if self.out:
            self.server.dirty.add(self)
        self.server.schedule_flush()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        for timer in (self._timer, self._handshake_timer, self._idle_timer):
            if timer is not None:
                timer.cancel()
        self.blocked_frames.clear()  # never receipted: their producers know they were not taken
        if self.removals_after_write:  # delivered as far as this connection goes
            self.release_removals()
        server = self.server
        server.handshaking.discard(self.conn_id)
        if server.sessions.pop(self.conn_id, None) is not None and self.connected:
            server.broker.disconnect(self.conn_id, time.time())
            server.schedule_flush()

    def pause_writing(self) -> None:
        if self.connected:  # before CONNECT the core has no connection to pause
            self.server.broker.set_writable(self.conn_id, False, time.time())

    def resume_writing(self) -> None:
        if self.connected:
            self.server.broker.set_writable(self.conn_id, True, time.time())
            self.server.schedule_flush()

    # --- output -------------------------------------------------------------

    def write_now(self) -> None:
        if self.output_awaiting_sync and self.out and not self.closing:
            # Earlier deliveries wait for an fsync: keep the order behind them.
            self.output_awaiting_sync.append((self.output_awaiting_sync[-1][0], self.out.copy()))
            self.out.clear()
            return
        self._write_out()

    def _write_out(self) -> None:
        if self.out:
            if self.transport is not None and not self.transport.is_closing():
                self.transport.writelines(self.out)
            self.out.clear()
        if self.removals_after_write and not self.output_awaiting_sync:
            self.release_removals()

    def release_removals(self) -> None:
        """Hand the removals of this connection's written (or dropped) auto-ack
        deliveries to the store, on the next loop pass."""
        removals, self.removals_after_write = self.removals_after_write, []
        self.server.removals_written(removals)

    def write_after_sync(self, seq: int) -> None:
        """Write this round's output only once ``seq`` is synced (delivery counts first)."""
        if not self.out:
            return
        self.output_awaiting_sync.append((seq, self.out.copy()))
        self.out.clear()
        self.server.persistence.when_synced(seq, self._synced, fail_fast=False)

    def _receipt(self, receipt_id: str, *, producer: bool = False) -> None:
        """Answer once everything journaled so far is synced.

        A producer's receipt (SEND, COMMIT) fails fast when the sync fails, so
        it hears its message was not stored; other receipts (ACK, SUBSCRIBE...)
        wait through the retries, and the consumer keeps being served.
        """
        data = self.conn.send_receipt(receipt_id)
        pipeline = self.server.persistence
        seq = pipeline.append(self.server.take_records())
        if not self.receipts_awaiting_sync and seq <= pipeline.synced_seq:
            self.out.append(data)
            return
        self.receipts_awaiting_sync.append((seq, data, producer))
        pipeline.when_synced(seq, self._synced, fail_fast=producer)

    def _synced(self, error: StoreError | None) -> None:
        if self.closing:
            return
        if error is not None:
            self.receipts_awaiting_sync.clear()
            self._fail(error, None, hint=f"persistent message not stored: {error}")
            return
        synced = self.server.persistence.synced_seq
        while self.output_awaiting_sync and self.output_awaiting_sync[0][0] <= synced:
            self.out.extend(self.output_awaiting_sync.popleft()[1])
        while self.receipts_awaiting_sync and self.receipts_awaiting_sync[0][0] <= synced:
            self.out.append(self.receipts_awaiting_sync.popleft()[1])
        # Released output goes out now, ahead of anything still held.
        self._write_out()

    def send_decided(self, hold_id: int, error: str | None) -> None:
        """Cluster: an undecided SEND was routed (its receipt may go once synced) or
        refused (C3: an ERROR naming the group, as STOMP closes after it)."""
        waiter = self.receipts_awaiting_decision.pop(hold_id, None)
        if self.closing or waiter is None:
            return
        if error is not None:
            self._fail(GroupDecisionTimeout(error), waiter[1])
        else:
            waiter[0] -= 1
            if waiter[0] == 0 and waiter[1] is not None:
                self._receipt(waiter[1], producer=True)
        self.server.dirty.add(self)

    def _receipt_after_decision(self, receipt_id: str | None) -> None:
        waiter = [len(self.undecided_sends), receipt_id]
        for hold in self.undecided_sends:
            self.receipts_awaiting_decision[hold] = waiter
        self.undecided_sends = []

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
            data = self.conn.send(
                f.Error(
                    message=message.splitlines()[0][:1000],
                    body=(message + "\n").encode(),
                    receipt_id=receipt_id,
                    headers=headers,
                )
            )
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
        security = server.config.security
        if not security.enabled:
            self._connected(event, event.login)
            return
        login, passcode = security.require_credentials(event.login, event.passcode)
        throttle = server.login_throttle
        if not throttle.allows(self.peer_host, time.time()):
            raise Unauthenticated(
                f"too many failed logins from {self.peer_host} "
                f"(max-auth-failures-per-minute {throttle.per_minute}); retry later"
            )
        ok = security.cached(login, passcode)
        if ok is not None:
            if not ok:
                throttle.failed(self.peer_host, time.time())
                raise wrong_credentials(login)
            self._connected(event, login)
            return
        # scrypt takes tens of ms: run it off the loop. Frames pipelined
        # behind CONNECT stay in the parser until CONNECTED (in order). The
        # failure is counted up front (given back on success), so parallel
        # guesses from one address cannot all start before one fails.
        throttle.failed(self.peer_host, time.time())
        self.authenticating = True
        server.verify_password_async(login, passcode, lambda: not self.closing).add_done_callback(
            lambda fut: self._verified(event, login, fut)
        )

    def _verified(self, event: f.Connect, login: str, fut: asyncio.Future[bool | None]) -> None:
        self.authenticating = False
        if self.closing or fut.cancelled():
            return
        try:
            if not fut.result():
                raise wrong_credentials(login)
            self.server.login_throttle.succeeded(self.peer_host, time.time())
            self._connected(event, login)
        except Exception as exc:
            self._frame_failed(exc)
        if self.closing:
            self.server.schedule_flush()
            return
        self._handle_frames()  # those pipelined behind CONNECT

    def _connected(self, event: f.Connect, user: str | None) -> None:
        server = self.server
        self._admit(event, user)
        self.out.append(self._connected_frame({}))
        self._arm_timer()
        self._arm_idle_timer(server.config.idle_timeout)
        receipt = event.headers.get("receipt")
        if receipt is not None:  # answered after CONNECTED, also when checked off the loop
            self._receipt(receipt)

    def _admit(self, event: f.Connect, user: str | None) -> None:
        """The peer is known: a connection of the core, no longer a stranger."""
        server = self.server
        limit = server.config.limits["max-connections"]
        if 0 <= limit <= len(server.sessions) - len(server.handshaking):
            raise LimitExceeded("max-connections", limit)
        self.user = user
        client_id = event.headers.get("client-id")
        server.broker.connect(self.conn_id, time.time(), user=self.user, client_id=client_id)
        self.connected = True
        server.handshaking.discard(self.conn_id)
        if self._handshake_timer is not None:
            self._handshake_timer.cancel()
            self._handshake_timer = None
        self.conn.set_limits(server.protocol_limits)

    def _connected_frame(self, headers: dict[str, str]) -> bytes:
        sx, sy = self.offered_heartbeat_ms or self.server.config.heartbeat_ms
        return self.conn.send(
            f.Connected(
                server=f"shoal/{self.server.version}",
                session=str(self.conn_id),
                heart_beat=(sx, sy),
                headers=headers,
            )
        )

    # --- timeouts -------------------------------------------------------------

    def _handshake_expired(self) -> None:
        self._handshake_timer = None
        if self.connected or self.closing:
            return
        timeout = self.server.config.handshake_timeout
        self._fail(ProtocolError(f"no CONNECT within handshake-timeout ({timeout:g} s)"), None)

    def _arm_idle_timer(self, delay: float) -> None:
        if delay > 0 and not self.closing:
            self._idle_timer = self.server.loop.call_later(delay, self._idle_check)

    def _idle_check(self) -> None:
        """Close a connection with no subscription that sent nothing for idle-timeout.

        Heart-beats count as traffic, so only clients without them (or with
        longer ones) and without a subscription can be idle.
        """
        self._idle_timer = None
        if self.closing:
            return
        timeout = self.server.config.idle_timeout
        quiet = self.server.loop.time() - self.last_read
        if self.subscriptions or self.blocked_frames or self.receipts_awaiting_sync:
            self._arm_idle_timer(timeout)
            return
        if quiet < timeout:
            self._arm_idle_timer(timeout - quiet)
            return
        log.info("closing %s: idle for %.0f s", self.peer, quiet)
        self._fail(
            ProtocolError(f"connection idle for idle-timeout ({timeout:g} s) with no subscription"),
            None,
        )
        self.server.schedule_flush()

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
        limit = server.max_destination_bytes
        if len(destination) * 4 > limit:  # cannot pass in UTF-8 otherwise
            check_destination_length(destination, limit)
        if destination.startswith(_CLUSTER_QUEUES):
            raise Forbidden(f"{destination!r}: the $cluster. queues belong to the cluster links")
        if server.security_on:
            server.authorize(self.user, "send", destination)
        if transaction is None:
            hold = server.broker.send(self.conn_id, destination, headers, event.body, self.now)
            if hold is not None:
                self.undecided_sends.append(hold)
        else:
            server.broker.send(
                self.conn_id, destination, headers, event.body, self.now, transaction=transaction
            )

    def on_subscribe(self, event: f.Subscribe) -> None:
        server = self.server
        destination = event.destination
        check_destination_length(destination, server.max_destination_bytes)
        if destination.startswith(_CLUSTER_QUEUES):
            raise Forbidden(f"{destination!r}: the $cluster. queues belong to the cluster links")
        if server.security_on:
            server.authorize(self.user, "consume", destination)
        # A STOMP 1.0 SUBSCRIBE may leave out ``id``: the subscription then
        # goes by its destination (the core's ids are strings, never None).
        sub_id = event.id if event.id is not None else destination
        server.broker.subscribe(
            self.conn_id, sub_id, destination, event.ack, event.headers, time.time()
        )
        self.subscriptions[sub_id] = destination

    def on_unsubscribe(self, event: f.Unsubscribe) -> None:
        durable = "durable-subscription-name" in event.headers or (
            "activemq.subscriptionName" in event.headers
        )
        sub_id = event.id
        if sub_id is None:  # STOMP 1.0 may name the destination instead (readers.py)
            sub_id = self._subscription_to(event.destination or "")
        self.server.broker.unsubscribe(self.conn_id, sub_id, time.time(), durable=durable)
        self.subscriptions.pop(sub_id, None)

    def _subscription_to(self, destination: str) -> str:
        """The id of this connection's subscription to ``destination``: the one
        keyed by it (a 1.0 SUBSCRIBE without id), else the first with an id of
        its own; the destination itself when there is none (the core answers)."""
        if destination in self.subscriptions:
            return destination
        for sub_id, subscribed in self.subscriptions.items():
            if subscribed == destination:
                return sub_id
        return destination

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
            self.undecided_sends.extend(holds)

    def on_abort(self, event: f.Abort) -> None:
        self.server.broker.abort(self.conn_id, event.transaction, time.time())

    def on_disconnect(self, event: f.Disconnect) -> None:
        server = self.server
        broker = server.broker
        # What the core delivered before this frame goes out ahead of the
        # RECEIPT and the close: an auto-ack delivery is settled already, so
        # dropping its bytes would lose the message.
        broker.batch_end()
        server.flush()
        broker.batch_begin()
        broker.disconnect(self.conn_id, time.time())
        self.connected = False
        if event.receipt is None:
            self.close_after_write()
            return
        self._receipt(event.receipt)
        self.closing = True
        if not self.receipts_awaiting_sync:
            self.close_after_write()
        else:
            self.server.persistence.when_synced(
                self.receipts_awaiting_sync[-1][0], self._drain_and_close
            )

    def _drain_and_close(self, error: StoreError | None) -> None:
        if error is not None:  # what the receipts stand for is not on disk: none goes out
            self.receipts_awaiting_sync.clear()
            self.output_awaiting_sync.clear()
            self._fail(error, None, hint=f"journal sync failed, no receipt sent: {error}")
            return
        while self.output_awaiting_sync:
            self.out.extend(self.output_awaiting_sync.popleft()[1])
        while self.receipts_awaiting_sync:
            self.out.append(self.receipts_awaiting_sync.popleft()[1])
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


def check_destination_length(destination: str, limit: int) -> None:
    """Refuse a destination longer than max-destination-bytes (UTF-8)."""
    if 0 <= limit < len(destination.encode()):
        raise LimitExceeded(
            "max-destination-bytes",
            limit,
            f"destination longer than max-destination-bytes ({limit} bytes)",
        )


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
# Frames that may have to wait for a full address.
_BLOCKABLE = frozenset({f.Send, f.Commit})
# Frames kept in order behind a blocked one (besides any naming a transaction).
_ORDERED_WITH_SENDS = frozenset({f.Send, f.Begin, f.Commit, f.Abort, f.Disconnect})
# Frames that answer their receipt themselves.
_OWN_RECEIPT = frozenset({f.Connect, f.Disconnect})
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
