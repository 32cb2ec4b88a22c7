"""Per-connection glue between a sans-I/O AMQP 1.0 connection and the core.

The same shape as ``StompSession`` (stomp.py): bytes in -> protocol events
-> core commands; Deliver effects come back through the server's flush,
which hands them to :meth:`AmqpSession.deliver`. Group fields are native
in AMQP: ``group-id``/``group-sequence`` are ``JMSXGroupID``/``JMSXGroupSeq``,
application properties are headers, ``durable`` is ``persistent``.

Producer links: the broker's link credit is the producer's flow control; a
transfer is accepted once everything journaled so far is synced (a durable
message after its fsync, as a STOMP RECEIPT), or rejected with an error
condition naming why. Consumer links: the peer's credit is the prefetch;
accepted = ACK, released = back to the head of its group uncounted,
rejected / modified(delivery-failed or undeliverable-here) = NACK counted
toward max-delivery-attempts. See docs/amqp.md.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import sys
import time
from collections import deque
from typing import TYPE_CHECKING, Any

from shoal.errors import (
    BrokerError,
    GroupDecisionTimeout,
    LimitExceeded,
    NotFound,
    StoreError,
)
from shoal.protocol.amqp import (
    NEED_DATA,
    AmqpConnection,
    AmqpHeaders,
    AuthenticationFailed,
    ConnectionClosed,
    ConnectionOpened,
    CredentialsReceived,
    CreditChanged,
    DeclareReceived,
    DischargeReceived,
    LinkDetached,
    OutcomeReceived,
    ProtocolFailed,
    ReceiverAttached,
    SenderAttached,
    TransferReceived,
)
from shoal.security import wrong_credentials
from shoal.server.amqp_mapping import destination_for, headers_of, message_of, transfer_as_received
from shoal.server.amqp_transactions import TransactionCoordinator
from shoal.server.pacing import ReadPacer
from shoal.server.stomp import check_destination_length

if TYPE_CHECKING:
    from proton import Message

    from shoal.broker.effects import Deliver
    from shoal.server.session_api import ServerState

log = logging.getLogger("shoal.amqp")

_HIGH_WATER = 1024 * 1024
PRODUCER_CREDIT = 1000  # transfers a producer link may have outstanding; topped up at half
IDLE_TIMEOUT_FACTOR = 3  # our idle-timeout: this many times the STOMP heart-beat we want
# Messages every connection recycles into (one event loop): what producers hand
# back, consumers fill and send, with one bound on what is kept for all of them.
_MESSAGE_POOL: list[Message] = []

# Error code (shoal.errors) -> AMQP error condition of a rejected transfer or a refused link.
CONDITIONS = {
    "limit": "amqp:resource-limit-exceeded",
    "full": "amqp:resource-limit-exceeded",
    "forbidden": "amqp:unauthorized-access",
    "unauthenticated": "amqp:unauthorized-access",
    "not-found": "amqp:not-found",
    "bad-destination": "amqp:invalid-field",
    "bad-header": "amqp:invalid-field",
    "bad-parameter": "amqp:invalid-field",
    "conflict": "amqp:resource-locked",
    "store": "amqp:internal-error",
    "protocol": "amqp:invalid-field",
    "internal": "amqp:internal-error",
    "no-decision": "amqp:precondition-failed",  # cluster: no grouping decision in time (C3)
}


def _limit(limits: dict[str, int], name: str) -> int:
    """A limit from ``[limits]``, -1 (off) as no bound at all."""
    value = limits[name]
    return value if value >= 0 else sys.maxsize


def condition_of(exc: BrokerError) -> tuple[str, str]:
    """(AMQP condition, description naming the reason) for a refusal."""
    text = getattr(exc, "error_frame_hint", None) or str(exc)
    if isinstance(exc, LimitExceeded):  # name the limit as the config file does
        text = text.replace(exc.limit_name, exc.limit_name.replace("_", "-"))
    return CONDITIONS.get(exc.code, "amqp:internal-error"), f"{exc.code}: {text}"


class AmqpSession(asyncio.Protocol):
    """One AMQP 1.0 client connection."""

    protocol = "amqp"

    def __init__(self, server: ServerState) -> None:
        self.server = server
        self.conn_id = server.next_conn_id()
        config = server.config
        security = config.security
        # ANONYMOUS only where the broker has no users (as STOMP needs no login then).
        mechanisms = ("PLAIN",) if security.enabled else ("ANONYMOUS", "PLAIN")
        want_ms = config.heartbeat_ms[1]
        self.conn = AmqpConnection(
            mechanisms=mechanisms,
            container_id=f"shoal-{server.version}",
            max_message_bytes=config.limits["max-frame-bytes"],
            idle_timeout=want_ms * IDLE_TIMEOUT_FACTOR / 1000.0,
            message_pool=_MESSAGE_POOL,
            max_sessions=_limit(config.limits, "max-amqp-sessions-per-connection"),
            max_links=_limit(config.limits, "max-amqp-links-per-connection"),
            max_partial_bytes=_limit(config.limits, "max-amqp-partial-bytes-per-connection"),
        )
        self.transport: asyncio.Transport | None = None
        self.peer = ""
        self.user: str | None = None
        self.connected = False
        self.closing = False
        self.pacer = ReadPacer(self, server)
        self.out: list[bytes] = []
        # (seq, delivery id, condition, description, txn-id): settled once seq is synced
        self.outcomes_awaiting_sync: deque[
            tuple[int, int, str | None, str | None, bytes | None]
        ] = deque()
        self.output_awaiting_sync: deque[tuple[int, list[bytes]]] = deque()
        self.transfers_awaiting_decision: dict[int, int] = {}  # cluster hold id -> delivery id
        self.subscriptions: dict[int, str] = {}  # consumer link -> core subscription id
        self.durable_links: set[int] = set()  # consumer links of a durable subscription
        self.client_id: str | None = None  # the peer's container id
        self.presettled: set[int] = set()  # consumer links that settle at once
        self.draining: set[int] = set()
        self.producers: dict[
            int, str | None
        ] = {}  # producer link -> destination (None: per message)
        self.blocked_frames: deque[TransferReceived] = deque()  # behind a full address
        self.blocked_bytes = 0
        self.fed_links: set[int] = set()  # producer links with transfers taken this read
        self.unsettled: dict[int, str] = {}  # our delivery id -> core ack id
        self.transactions = TransactionCoordinator(
            server, self.conn_id, self.conn, self._answer, condition_of
        )
        self.to_ack: list[str] = []  # pre-settled deliveries, acked once written
        self._timer: asyncio.TimerHandle | None = None
        self._handshake_timer: asyncio.TimerHandle | None = None
        self._idle_timer: asyncio.TimerHandle | None = None
        self.last_read = 0.0  # loop time of the last bytes from the peer
        self.peer_host = "?"
        self.connected_at = time.time()
        self.frames_in = 0  # transfers and dispositions
        self.messages_out = 0
        self.now = self.connected_at

    # --- asyncio.Protocol ---------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        transport.set_write_buffer_limits(high=_HIGH_WATER)  # type: ignore[attr-defined]
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.peer_host = str(peer[0]) if peer else "?"
        server = self.server
        # Strangers have their own, lower cap (as on STOMP): they cannot lock clients out.
        limit = server.config.limits["max-unauthenticated-connections"]
        if not server.handshaking.admit(self.conn_id, transport, limit):  # per listener
            log.warning(
                "refusing AMQP connection from %s: max-unauthenticated-connections %d",
                self.peer,
                limit,
            )
            transport.close()
            self.closing = True
            return
        server.sessions[self.conn_id] = self
        self.last_read = server.loop.time()
        timeout = server.config.handshake_timeout
        if timeout > 0:
            self._handshake_timer = server.loop.call_later(timeout, self._handshake_expired)

    def _handshake_expired(self) -> None:
        self._handshake_timer = None
        if self.connected or self.closing:
            return
        timeout = self.server.config.handshake_timeout
        log.info(
            "closing AMQP connection from %s: not open within handshake-timeout (%g s)",
            self.peer,
            timeout,
        )
        self.conn.close(
            "amqp:connection:forced", f"not open within handshake-timeout ({timeout:g} s)"
        )
        self.close_after_write()

    def data_received(self, data: bytes) -> None:
        if self.closing:
            return
        self.pacer.note_read()  # one read per flush (server/pacing.py)
        self.last_read = self.server.loop.time()
        self._process(data)

    def _process(self, data: bytes | None) -> None:
        """Feed bytes (None: only the events already waiting), handle the events, flush."""
        server = self.server
        self.now = time.time()
        broker = server.broker
        broker.batch_begin()
        try:
            if data is not None:
                self.conn.receive_data(data, server.loop.time())
            self._handle_events()
            if self.fed_links:  # credit once per read, not per transfer
                for link_id in self.fed_links:
                    self._top_up(link_id)
                self.fed_links.clear()
        except BrokerError as exc:
            self._fail(exc)
        except Exception:  # a bug must not take the broker down
            log.exception("unexpected error handling AMQP from %s", self.peer)
            self._fail(BrokerError("internal broker error; see the broker log"))
        finally:
            try:
                broker.batch_end()
            except Exception:  # a bug must not take the broker down
                log.exception("unexpected error dispatching after AMQP from %s", self.peer)
                self._fail(BrokerError("internal broker error; see the broker log"))
        server.dirty.add(self)
        server.schedule_flush()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        self.blocked_frames.clear()  # never accepted: their producers know they were not taken
        for timer in (self._timer, self._handshake_timer, self._idle_timer):
            if timer is not None:
                timer.cancel()
        server = self.server
        server.handshaking.discard(self.conn_id)
        if server.sessions.pop(self.conn_id, None) is not None and self.connected:
            self.connected = False
            server.broker.disconnect(self.conn_id, time.time())
            server.schedule_flush()

    def pause_writing(self) -> None:
        # A peer that sends (attach and detach in a loop, say) and never reads
        # would grow our write buffer without end: stop reading it (pacing.py).
        self.pacer.pause_for_writes()
        if self.connected:
            self.server.broker.set_writable(self.conn_id, False, time.time())

    def resume_writing(self) -> None:
        self.pacer.resume_after_writes()
        if self.connected:
            self.server.broker.set_writable(self.conn_id, True, time.time())
            self.server.schedule_flush()

    # --- events -------------------------------------------------------------

    def _handle_events(self) -> None:
        conn = self.conn
        while not self.closing:
            event = conn.next_event()
            if event is NEED_DATA:
                break
            handler = _HANDLERS[type(event)]
            handler(self, event)

    def on_credentials(self, event: CredentialsReceived) -> None:
        """SASL PLAIN, checked as STOMP's CONNECT is: throttled, scrypt off the loop."""
        server = self.server
        security = server.config.security
        if not security.enabled:
            self.conn.authenticated(event.user)
            return
        throttle = server.login_throttle
        if not throttle.allows(self.peer_host, time.time()):
            self.conn.refuse_credentials(
                f"too many failed logins from {self.peer_host} "
                f"(max-auth-failures-per-minute {throttle.per_minute}); retry later"
            )
            return
        ok = security.cached(event.user, event.password)
        if ok is not None:
            self._verdict(event.user, ok)
            return
        # The failure is counted up front (given back on success), as on STOMP.
        throttle.failed(self.peer_host, time.time())
        server.verify_password_async(
            event.user, event.password, lambda: not self.closing
        ).add_done_callback(lambda fut: self._verified(event.user, fut))

    def _verified(self, user: str, fut: asyncio.Future[bool | None]) -> None:
        if self.closing or fut.cancelled():
            return
        ok = bool(fut.exception() is None and fut.result())
        if ok:
            self.server.login_throttle.succeeded(self.peer_host, time.time())
        if ok:
            self.conn.authenticated(user)
        else:
            self.conn.refuse_credentials(str(wrong_credentials(user)))
        self._process(None)

    def _verdict(self, user: str, ok: bool) -> None:
        if ok:
            self.conn.authenticated(user)
        else:
            self.server.login_throttle.failed(self.peer_host, time.time())
            self.conn.refuse_credentials(str(wrong_credentials(user)))

    def on_open(self, event: ConnectionOpened) -> None:
        server = self.server
        limit = server.config.limits["max-connections"]
        if 0 <= limit <= len(server.sessions) - len(server.handshaking):
            raise LimitExceeded("max-connections", limit)
        self.user = event.user
        self.client_id = event.container_id or None
        server.broker.connect(self.conn_id, time.time(), user=self.user, client_id=self.client_id)
        self.connected = True
        server.handshaking.discard(self.conn_id)
        if self._handshake_timer is not None:
            self._handshake_timer.cancel()
            self._handshake_timer = None
        self._arm_timer()
        self._arm_idle_timer(server.config.idle_timeout)

    def on_closed(self, event: ConnectionClosed) -> None:
        if self.connected:
            self.connected = False
            self.server.broker.disconnect(self.conn_id, time.time())
        self._drain_and_close()

    def on_auth_failed(self, event: AuthenticationFailed) -> None:
        log.info(
            "AMQP connection from %s: SASL %s refused: %s",
            self.peer,
            event.mechanism or "(none)",
            event.reason,
        )
        self.close_after_write()

    def on_protocol_failed(self, event: ProtocolFailed) -> None:
        log.info("AMQP connection from %s: %s", self.peer, event.description)
        self.close_after_write()

    def on_sender_attached(self, event: SenderAttached) -> None:
        """The peer consumes: a subscription whose credit is the link's."""
        server = self.server
        address = event.address
        found = None
        try:
            if not address:
                # A durable subscription named by its link alone (Qpid JMS removes one
                # this way, with no source at all): its topic, if it exists.
                found = server.broker.durable_subscription_topic(self.client_id, event.name)
                if found is None:
                    raise NotFound(f"no address, and no durable subscription {event.name!r}")
                address = f"topic://{found}"
            destination = self._destination(address, event.capabilities)
            if server.security_on:
                server.authorize(self.user, "consume", destination)
            headers = {"selector": event.selector} if event.selector else {}
            durable = (event.durable or found is not None) and destination.startswith("/topic/")
            if durable:  # the link's name is the subscription's, as on Artemis
                headers["durable-subscription-name"] = event.name
            sub_id = f"amqp-{event.link_id}"
            server.broker.subscribe(
                self.conn_id,
                sub_id,
                destination,
                "client-individual",
                headers,
                time.time(),
                link_credit=True,
            )
        except BrokerError as exc:
            self.conn.refuse_link(event.link_id, *condition_of(exc))
            return
        self.subscriptions[event.link_id] = sub_id
        if durable:
            self.durable_links.add(event.link_id)
        if event.settled:
            self.presettled.add(event.link_id)
        self.conn.accept_link(event.link_id, address=found, settled=event.settled)

    def on_receiver_attached(self, event: ReceiverAttached) -> None:
        """The peer produces: check the address, then grant credit."""
        server = self.server
        if event.coordinator:  # the peer's transactions: Declare and Discharge come on it
            self.transactions.attached(event.link_id)
            return
        try:
            destination = None
            if event.address:  # no address: each message names its own (anonymous relay)
                destination = self._destination(event.address, event.capabilities)
                if server.security_on:
                    server.authorize(self.user, "send", destination)
        except BrokerError as exc:
            self.conn.refuse_link(event.link_id, *condition_of(exc))
            return
        self.producers[event.link_id] = destination
        self.conn.accept_link(event.link_id)
        self.conn.grant_credit(event.link_id, PRODUCER_CREDIT)

    def on_detached(self, event: LinkDetached) -> None:
        link_id = event.link_id
        self.transactions.detached(link_id, self.connected)
        if self.producers.pop(link_id, 0) != 0 and self.blocked_frames:
            kept = [e for e in self.blocked_frames if e.link_id != link_id]
            self.blocked_bytes = sum(e.size for e in kept)
            self.blocked_frames = deque(kept)
        sub_id = self.subscriptions.pop(link_id, None)
        self.presettled.discard(link_id)
        self.draining.discard(link_id)
        # A durable subscription ends with a closing detach; a plain detach keeps it.
        durable = event.closed and link_id in self.durable_links
        self.durable_links.discard(link_id)
        if sub_id is not None and self.connected:
            self.server.broker.unsubscribe(self.conn_id, sub_id, time.time(), durable=durable)

    # --- transactions (server/amqp_transactions.py) ---------------------------

    def on_declare(self, event: DeclareReceived) -> None:
        self.transactions.declare(event)

    def on_discharge(self, event: DischargeReceived) -> None:
        self.transactions.discharge(event)

    def on_transfer(self, event: TransferReceived) -> None:
        self.frames_in += 1
        if event.txn_id is not None:  # buffered until its commit: never waits for room
            self._take(event)
            self.fed_links.add(event.link_id)
            return
        if self.blocked_frames or self._blocked(event):
            self._block(event)
            return
        self._take(event)
        self.fed_links.add(event.link_id)

    def _destination_of(self, event: TransferReceived) -> str:
        destination = self.producers.get(event.link_id)
        if destination is None:  # the anonymous relay: the message names its address
            destination = self._destination(event.message.address, ())
            if self.server.security_on:
                self.server.authorize(self.user, "send", destination)
        return destination

    def _destination(self, address: str | None, capabilities: tuple[str, ...]) -> str:
        """The destination an address names, within max-destination-bytes (as on STOMP)."""
        if address:
            check_destination_length(address, self.server.max_destination_bytes)
        return destination_for(address, capabilities)

    def _take(self, event: TransferReceived) -> None:
        """Hand one transfer to the core; answer it once synced (accepted or rejected)."""
        try:
            destination = self._destination_of(event)
            headers, body = headers_of(
                event.message, int(self.now * 1000), event.encoding, event.default_header
            )
            self.conn.recycle(event.message)  # headers_of copied what it keeps
            txn_id = event.txn_id
            tx = None
            if txn_id is not None:
                tx = self.transactions.core_tx(txn_id)
                if tx is None:
                    if not event.settled:
                        self.transactions.refuse_unknown(event.delivery_id, txn_id)
                    return
            hold = self.server.broker.send(
                self.conn_id, destination, headers, body, self.now, transaction=tx
            )
        except BrokerError as exc:
            if not event.settled:
                condition, description = condition_of(exc)
                self._answer(event.delivery_id, description, condition)
        else:
            if hold is not None:  # cluster: waits for its group's binding (send_decided)
                if not event.settled:
                    self.transfers_awaiting_decision[hold] = event.delivery_id
            elif not event.settled:
                self._answer(event.delivery_id, None, None, event.txn_id)

    def send_decided(self, hold_id: int, error: str | None) -> None:
        """Cluster: an undecided transfer was routed (accepted once synced) or refused
        (rejected, naming the group and the timeout; the link stays up)."""
        delivery_id = self.transfers_awaiting_decision.pop(hold_id, None)
        if delivery_id is None or self.closing:
            return
        if error is None:
            self._answer(delivery_id, None, None)
        else:
            condition, description = condition_of(GroupDecisionTimeout(error))
            self._answer(delivery_id, description, condition)
        self._write_out()

    def _top_up(self, link_id: int) -> None:
        """Link credit is the producer's flow control: none while its address is full."""
        if self.blocked_frames or link_id not in self.producers:
            return
        credit = self.conn.credit(link_id)
        if credit < PRODUCER_CREDIT // 2:
            self.conn.grant_credit(link_id, PRODUCER_CREDIT - credit)

    # --- producer flow control (address-full-policy "block"), as StompSession ---

    def _blocked(self, event: TransferReceived) -> bool:
        try:
            destination = self._destination_of(event)
        except BrokerError:
            return False  # _take refuses it
        return self.server.broker.send_blocked(self.conn_id, destination)

    def _block(self, event: TransferReceived) -> None:
        """Wait behind a full address, in order; no credit is granted meanwhile."""
        self.blocked_frames.append(event)
        self.blocked_bytes += event.size
        limit = self.server.config.limits["max-held-send-bytes"]
        if 0 <= limit < self.blocked_bytes:
            self.pacer.pause_for_backlog()

    def release_blocked(self) -> None:
        """From the server's flush once an address has room: take blocked transfers in order."""
        if self.closing or not self.blocked_frames:
            return
        self.now = time.time()
        blocked = self.blocked_frames
        broker = self.server.broker
        broker.batch_begin()
        try:
            while blocked and not self.closing and not self._blocked(blocked[0]):
                event = blocked.popleft()
                self.blocked_bytes -= event.size
                self._take(event)
        except Exception:  # a bug must not take the broker down
            log.exception("unexpected error releasing blocked AMQP transfers from %s", self.peer)
            self._fail(BrokerError("internal broker error; see the broker log"))
        finally:
            broker.batch_end()
        limit = self.server.config.limits["max-held-send-bytes"]
        if limit < 0 or self.blocked_bytes <= limit:
            self.pacer.resume_after_backlog()
        for link_id in list(self.producers):
            self._top_up(link_id)
        self.server.dirty.add(self)
        self.server.schedule_flush()

    def _answer(
        self,
        delivery_id: int,
        description: str | None,
        condition: str | None,
        txn_id: bytes | None = None,
    ) -> None:
        """Settle a transfer once everything journaled so far is synced (in order)."""
        pipeline = self.server.persistence
        seq = pipeline.append(self.server.take_records())
        if not self.outcomes_awaiting_sync and seq <= pipeline.synced_seq:
            self._settle(delivery_id, description, condition, txn_id)
            return
        self.outcomes_awaiting_sync.append((seq, delivery_id, condition, description, txn_id))
        pipeline.when_synced(seq, self._synced, fail_fast=True)

    def _settle(
        self,
        delivery_id: int,
        description: str | None,
        condition: str | None,
        txn_id: bytes | None = None,
    ) -> None:
        if condition is None:
            self.conn.settle(delivery_id, "accepted", txn_id=txn_id)
        else:
            self.conn.settle(delivery_id, "rejected", condition=condition, description=description)

    def _synced(self, error: StoreError | None) -> None:
        if self.closing:
            return
        synced = self.server.persistence.synced_seq
        if error is not None:  # the journal failed: nothing waiting was stored
            while self.outcomes_awaiting_sync:
                did = self.outcomes_awaiting_sync.popleft()[1]
                self._settle(did, f"store: message not stored: {error}", "amqp:internal-error")
        while self.outcomes_awaiting_sync and self.outcomes_awaiting_sync[0][0] <= synced:
            _seq, did, condition, description, txn_id = self.outcomes_awaiting_sync.popleft()
            self._settle(did, description, condition, txn_id)
        while self.output_awaiting_sync and self.output_awaiting_sync[0][0] <= synced:
            self.out.extend(self.output_awaiting_sync.popleft()[1])
        self._write_out()

    def on_credit(self, event: CreditChanged) -> None:
        sub_id = self.subscriptions.get(event.link_id)
        if sub_id is None:
            return
        self.server.broker.set_credit(self.conn_id, sub_id, event.credit, time.time())
        if event.drain:
            self.draining.add(event.link_id)

    def on_outcome(self, event: OutcomeReceived) -> None:
        self.frames_in += 1
        if not event.settled:
            return  # a non-terminal state (received): wait for the outcome
        ack_id = self.unsettled.pop(event.delivery_id, None)
        if ack_id is None or not self.connected:
            return
        broker = self.server.broker
        outcome = event.outcome
        tx = None
        if event.txn_id is not None:
            tx = self.transactions.core_tx(event.txn_id)
            if tx is None:  # not ours, or discharged: keep it
                log.info("AMQP connection from %s: outcome in an unknown transaction", self.peer)
                outcome = "released"
        try:
            if outcome == "accepted":
                broker.ack(self.conn_id, ack_id, self.now, transaction=tx)
            elif outcome == "released" or (
                outcome == "modified" and not (event.delivery_failed or event.undeliverable_here)
            ):
                broker.nack(self.conn_id, ack_id, self.now, counted=False, transaction=tx)
            else:  # rejected, modified(delivery-failed / undeliverable-here)
                broker.nack(self.conn_id, ack_id, self.now, transaction=tx)
        except NotFound:
            pass  # already returned (its subscription closed)

    # --- output ---------------------------------------------------------------

    def deliver(self, eff: Deliver, body: bytes, suspect: bool) -> None:
        """From the server's flush: transfer one message on its consumer link."""
        link_id = int(eff.sub_id[5:])  # "amqp-<link id>"
        if link_id not in self.subscriptions:
            return  # detached after the core chose it: unsubscribe returned the message
        msg = eff.message
        count = msg.delivery_count or (1 if suspect else 0)
        redelivered = eff.redelivered or suspect or count > 0
        conn = self.conn
        settled = link_id in self.presettled
        headers = msg.headers
        if type(headers) is AmqpHeaders:  # received over AMQP: passed on as it came
            ttl = max(1, msg.expires - int(time.time() * 1000)) if msg.expires else 0
            encoded = transfer_as_received(eff, body, headers, count, redelivered, ttl)
            did = conn.send_message(link_id, encoded, settled=settled)
        else:
            amqp_message = message_of(eff, body, headers, count, redelivered, conn.blank_message())
            did = conn.send_message(link_id, amqp_message, settled=settled)
            conn.recycle(amqp_message)  # encoded and sent: Proton holds its own copy
        if settled:
            self.to_ack.append(eff.ack_id)
        else:
            self.unsettled[did] = eff.ack_id
        self.messages_out += 1

    def _ack_written(self) -> None:
        """Ack the pre-settled deliveries whose transfers were just written (not
        while any output is held for a sync); their removals wait for that write
        (``settled_on_send``). One never written goes back when the link goes."""
        broker = self.server.broker
        acks, self.to_ack = self.to_ack, []
        for ack_id in acks:
            try:
                broker.ack(self.conn_id, ack_id, self.now, settled_on_send=True)
            except NotFound:
                pass
        self.server.schedule_flush()

    def _after_deliveries(self) -> None:
        """End drains (no more to send now)."""
        broker = self.server.broker
        if self.draining:
            for link_id in list(self.draining):
                self.draining.discard(link_id)
                self.conn.drained(link_id)
                sub_id = self.subscriptions.get(link_id)
                if sub_id is not None and self.connected:
                    broker.set_credit(self.conn_id, sub_id, self.conn.credit(link_id), time.time())

    def _collect(self) -> None:
        if self.closing and self.transport is None:
            return
        self._after_deliveries()
        data = self.conn.data_to_send()
        if data:
            self.out.append(data)

    def write_now(self) -> None:
        self._collect()
        if self.output_awaiting_sync and self.out and not self.closing:
            self.output_awaiting_sync.append((self.output_awaiting_sync[-1][0], self.out.copy()))
            self.out.clear()
            return
        self._write_out()
        if self.conn.finished and not self.closing:
            self.close_after_write()

    def write_after_sync(self, seq: int) -> None:
        """Write this round's output only once ``seq`` is synced (delivery counts first)."""
        self._collect()
        if not self.out:
            return
        self.output_awaiting_sync.append((seq, self.out.copy()))
        self.out.clear()
        self.server.persistence.when_synced(seq, self._synced, fail_fast=False)

    def _write_out(self) -> None:
        if self.transport is None or self.transport.is_closing():
            self.out.clear()
            return
        data = self.conn.data_to_send()
        if data:
            self.out.append(data)
        if self.out:
            self.transport.writelines(self.out)
        self.out.clear()
        if self.to_ack and self.connected and not self.output_awaiting_sync:
            self._ack_written()

    def _fail(self, exc: BrokerError) -> None:
        """Close this connection with an error condition naming the problem."""
        condition, description = condition_of(exc)
        log.info("closing AMQP connection from %s: %s", self.peer, description)
        self.conn.close(condition, description)
        self.close_after_write()

    def _drain_and_close(self) -> None:
        while self.output_awaiting_sync:
            self.out.extend(self.output_awaiting_sync.popleft()[1])
        self.close_after_write()

    def close_after_write(self) -> None:
        self.closing = True
        self._write_out()
        if self.transport is not None:
            self.transport.close()

    def shutdown(self, reason: str) -> None:
        """Graceful stop: tell the client why, then close."""
        if self.closing:
            return
        self.conn.close("amqp:connection:forced", reason)
        self.close_after_write()

    # --- idle timeouts ----------------------------------------------------------
    # Two, as on STOMP: the engine's (AMQP idle-time-out, our half of the
    # heart-beat: empty frames out, a silent peer closed) and the broker's
    # idle-timeout for a connection that consumes nothing and sends nothing.

    def _arm_idle_timer(self, delay: float) -> None:
        if delay > 0 and not self.closing:
            self._idle_timer = self.server.loop.call_later(delay, self._idle_check)

    def _idle_check(self) -> None:
        """Close a connection without consumer links that sent nothing for idle-timeout."""
        self._idle_timer = None
        if self.closing:
            return
        timeout = self.server.config.idle_timeout
        quiet = self.server.loop.time() - self.last_read
        if self.subscriptions or self.blocked_frames or self.outcomes_awaiting_sync:
            self._arm_idle_timer(timeout)
            return
        if quiet < timeout:
            self._arm_idle_timer(timeout - quiet)
            return
        log.info("closing AMQP connection from %s: idle for %.0f s", self.peer, quiet)
        self.conn.close(
            "amqp:connection:forced",
            f"connection idle for idle-timeout ({timeout:g} s) with no consumer link",
        )
        self.close_after_write()

    def _arm_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        deadline = self.conn.handle_timer(self.server.loop.time())
        if deadline is None or self.closing:
            return
        self._timer = self.server.loop.call_at(deadline, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        if self.closing:
            return
        self._arm_timer()
        self._handle_events()  # an idle timeout closes the connection
        self._write_out()
        if self.conn.finished:
            self.close_after_write()


_HANDLERS: dict[type, Any] = {
    ConnectionOpened: AmqpSession.on_open,
    CredentialsReceived: AmqpSession.on_credentials,
    ConnectionClosed: AmqpSession.on_closed,
    AuthenticationFailed: AmqpSession.on_auth_failed,
    ProtocolFailed: AmqpSession.on_protocol_failed,
    SenderAttached: AmqpSession.on_sender_attached,
    ReceiverAttached: AmqpSession.on_receiver_attached,
    LinkDetached: AmqpSession.on_detached,
    TransferReceived: AmqpSession.on_transfer,
    CreditChanged: AmqpSession.on_credit,
    OutcomeReceived: AmqpSession.on_outcome,
    DeclareReceived: AmqpSession.on_declare,
    DischargeReceived: AmqpSession.on_discharge,
}


async def start_amqp(
    server: ServerState, hostport: tuple[str, int], ctx: ssl.SSLContext | None
) -> tuple[asyncio.base_events.Server, tuple[str, int]]:
    """Listen for AMQP 1.0 (amqps:// when ``ctx``); the listener and its address."""
    listener = await server.loop.create_server(
        lambda: AmqpSession(server),
        hostport[0],
        hostport[1],
        ssl=ctx,
        reuse_address=True,
        backlog=1024,
    )
    sock = listener.sockets[0].getsockname()
    return listener, (sock[0], sock[1])
