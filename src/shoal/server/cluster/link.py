"""The cluster link (C4): node-to-node STOMP carrying forwarded SENDs.

A link is a STOMP 1.2 connection from the origin node to the target node's
link listener. The origin's side (``LinkClient``) is a consumer of the
store-and-forward queue ``$cluster.forward.<target>`` in its own core,
prefetch ``LINK_WINDOW``, ack ``client`` (cumulative): each delivery becomes
a SEND with the origin headers, written in runs (one write per loop pass).
Only the last SEND of a run, and every ``RECEIPT_EVERY``-th, asks for a
receipt: the link is one ordered connection and the target answers a
RECEIPT once everything before it is journaled too, so one RECEIPT acks
every entry sent up to it. A link that drops hands its unacked entries back
to the forward queue, which sends them again in order on the next
connection; the target drops the ones it has already seen
(``x-shoal-origin-node`` / ``x-shoal-origin-id``).

The target's side (``LinkSession``) is a ``StompSession`` whose SENDs are
routed with ``Broker.send_forwarded``: the group is bound to this node, so
no new decision is asked for.

With ``[cluster] secret`` both ends prove they know it before anything else
(HMAC-SHA256 challenge-response, ``link_proof``): CONNECT carries the
origin's nonce; CONNECTED the target's nonce and its proof over the
origin's; the origin's first SEND (to ``AUTH_DESTINATION``) its proof over
the target's, answered by a RECEIPT. Until then the target's session stays
a stranger (handshake timeout, small frames, no core connection).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import secrets
import time
from collections import deque
from typing import TYPE_CHECKING, Any

from shoal.cluster.grouping import DESTINATION, ORIGIN_ID, ORIGIN_NODE, RESENT, forward_queue
from shoal.cluster.local_handler import (
    DECISION_RECEIPT,
    HANDLER_DESTINATIONS,
    HANDLER_RECEIPTS,
    decision_headers,
)
from shoal.errors import BrokerError, ProtocolError, Unauthenticated
from shoal.protocol.stomp import NEED_DATA, Role, StompConnection
from shoal.protocol.stomp import frames as f
from shoal.protocol.stomp.connection import ConnectionState
from shoal.protocol.stomp.encoder import encode_send
from shoal.server.stomp import StompSession

if TYPE_CHECKING:
    from shoal.broker.effects import Deliver
    from shoal.server.session_api import ServerState

log = logging.getLogger("shoal.cluster.link")

NODE_HEADER = "shoal-node"  # CONNECT: the connecting node's id
CLUSTER_HEADER = "shoal-cluster"  # CONNECT: the cluster's name; must match
NONCE_HEADER = "shoal-nonce"  # CONNECT, CONNECTED: the challenge to the other end
PROOF_HEADER = "shoal-proof"  # CONNECTED, the first SEND: the answer to it
AUTH_DESTINATION = "/cluster/auth"  # the origin's proof; nothing else is taken before it
AUTH_RECEIPT = "link-auth"  # the target accepted the origin's proof
NONCE_BYTES = 32
LINK_WINDOW = 1000  # forwarded messages in flight per link (unacked)
# At most this many SENDs per RECEIPT, so that acks flow back while a long
# run is still being written and the window never drains.
RECEIPT_EVERY = 100
# Heart-beats both ways: a target silent for twice this (hung, stopped, cut
# off without a TCP error) is dropped and reconnected; its unacked forwards
# go back to the forward queue.
LINK_HEARTBEAT_MS = 1000
HANDSHAKE_TIMEOUT = 5.0  # s from TCP connect to CONNECTED (a stopped node accepts TCP)
RECONNECT_MIN = 0.1  # s; doubles up to RECONNECT_MAX while the target is unreachable
RECONNECT_MAX = 2.0


# Which end proves: a proof made by one end is never valid from the other.
ACCEPTING = "accepting"
CONNECTING = "connecting"


def new_nonce() -> str:
    return secrets.token_hex(NONCE_BYTES)


def link_proof(
    secret: bytes, role: str, nonce: str, cluster: str, prover: str, verifier: str
) -> str:
    """HMAC-SHA256 over the other end's nonce, the cluster and both node names."""
    message = "\n".join((role, nonce, cluster, prover, verifier)).encode()
    return hmac.new(secret, message, hashlib.sha256).hexdigest()


def proof_matches(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode(), expected.encode())  # str: ASCII only


class LinkSession(StompSession):
    """The target's end of a link: only nodes of this cluster, only SEND."""

    def __init__(
        self, server: ServerState, cluster_name: str, node: str, secret: bytes | None
    ) -> None:
        super().__init__(server, versions=("1.2",))
        # Set here, not as a class attribute: a compiled StompSession keeps it
        # in its own slot, which a subclass's class attribute does not reach.
        self.offered_heartbeat_ms = (LINK_HEARTBEAT_MS, LINK_HEARTBEAT_MS)
        self.cluster_name = cluster_name
        self.node = node  # this node
        self.secret = secret
        self.origin = ""  # the connecting node, once accepted
        self.pending: f.Connect | None = None  # its CONNECT, until its proof
        self.challenge = ""  # the nonce its proof must cover

    def refused(self, exc: BrokerError) -> BrokerError:
        """Log a refused peer once; the caller raises (ERROR, then close)."""
        log.warning("cluster link: refused %s: %s", self.peer, exc)
        return exc

    def on_connect(self, event: f.Connect) -> None:
        node = event.headers.get(NODE_HEADER, "")
        name = event.headers.get(CLUSTER_HEADER, "")
        if not node or name != self.cluster_name:
            raise self.refused(
                ProtocolError(
                    f"cluster link: expected {NODE_HEADER} and {CLUSTER_HEADER}:"
                    f"{self.cluster_name} in CONNECT, got cluster {name!r}"
                )
            )
        event.headers["client-id"] = f"link:{node}"
        if self.secret is None:
            self._connected(event, None)
            self._accepted(node)
            return
        nonce = event.headers.get(NONCE_HEADER, "")
        if node == self.node or len(nonce) != 2 * NONCE_BYTES:
            raise self.refused(
                Unauthenticated(
                    f"cluster link: authentication required ({NONCE_HEADER} in CONNECT, "
                    "then the proof of the cluster secret)"
                )
            )
        self.pending = event
        self.challenge = new_nonce()
        proof = link_proof(self.secret, ACCEPTING, nonce, self.cluster_name, self.node, node)
        # CONNECTED, but still a stranger: only the proof is taken next (on_send)
        self.out.append(
            self._connected_frame(
                {NODE_HEADER: self.node, NONCE_HEADER: self.challenge, PROOF_HEADER: proof}
            )
        )

    def _authenticate(self, event: f.Send) -> None:
        """The origin's first SEND: its proof, before anything else is taken."""
        pending = self.pending
        assert pending is not None and self.secret is not None  # a SEND follows a CONNECT
        node = pending.headers[NODE_HEADER]
        expected = link_proof(
            self.secret, CONNECTING, self.challenge, self.cluster_name, node, self.node
        )
        given = event.headers.get(PROOF_HEADER, "")
        if event.destination != AUTH_DESTINATION or not proof_matches(given, expected):
            raise self.refused(
                Unauthenticated(
                    f"cluster link: wrong or missing proof of the cluster secret for {node!r}"
                )
            )
        self.pending = None
        self._admit(pending, None)
        self._arm_timer()
        self._accepted(node)  # the RECEIPT the proof asked for says so to the origin

    def _accepted(self, node: str) -> None:
        self.origin = node
        log.info("cluster link from node %r (%s) up", node, self.peer)
        self.server.cluster.link_session_up(node, self)

    def _arm_idle_timer(self, delay: float) -> None:
        pass  # a link carries no subscription and may be quiet for long: it stays

    def on_send(self, event: f.Send) -> None:
        if not self.origin:
            self._authenticate(event)
            return
        headers = event.headers
        if event.destination in HANDLER_DESTINATIONS:  # local/remote handlers (C8)
            self.server.cluster.handler_frame(self, event.destination, headers)
            return
        for transport_header in ("content-length", "destination", "receipt", "transaction"):
            headers.pop(transport_header, None)
        if headers.get(ORIGIN_NODE) != self.origin:
            raise ProtocolError(f"cluster link: {ORIGIN_NODE} must be {self.origin!r}")
        self.server.broker.send_forwarded(
            self.conn_id, event.destination, headers, event.body, self.now
        )

    def send_decision(self, queue: str, group: str, node: str) -> None:
        """The local handler's answer to this origin's proposal (once synced)."""
        self.send_handler_receipt(DECISION_RECEIPT, decision_headers(queue, group, node))

    def send_handler_receipt(self, receipt_id: str, headers: dict[str, str]) -> None:
        """The local handler's answers and notices to this origin (HANDLER_RECEIPTS)."""
        if self.closing or self.transport is None or self.transport.is_closing():
            return  # the origin asks again (and checks its bindings) when its link is back
        self.transport.write(self.conn.send(f.Receipt(receipt_id=receipt_id, headers=headers)))

    def connection_lost(self, exc: Exception | None) -> None:
        if self.origin:
            self.server.cluster.link_session_down(self.origin, self)
        super().connection_lost(exc)

    def on_disconnect(self, event: f.Disconnect) -> None:
        if self.connected:
            super().on_disconnect(event)
        else:  # not in the core yet
            self.close_after_write()

    def refuse(self, event: f.Event) -> None:
        raise ProtocolError(f"cluster link: {event.command} refused; only SEND is accepted")


LinkSession.handlers = {
    **StompSession.handlers,
    f.Connect: LinkSession.on_connect,
    f.Send: LinkSession.on_send,
    f.Disconnect: LinkSession.on_disconnect,
    **dict.fromkeys(
        (f.Subscribe, f.Unsubscribe, f.Ack, f.Nack, f.Begin, f.Commit, f.Abort), LinkSession.refuse
    ),
}


class LinkClient(asyncio.Protocol):
    """The origin's end of the link to one target node; reconnects forever."""

    def __init__(
        self,
        server: Any,
        cluster_name: str,
        node: str,
        target: str,
        address: tuple[str, int],
        secret: bytes | None = None,
    ) -> None:
        self.server = server
        self.cluster_name = cluster_name
        self.secret = secret
        self.nonce = ""  # this connection's challenge to the target
        self.impostor = False  # the target failed our challenge (logged once)
        self.node = node
        self.target = target
        self.address = address
        self.state = "connecting"
        self.transport: asyncio.Transport | None = None
        self.conn: StompConnection | None = None
        self.conn_id = 0  # the core connection consuming the forward queue, 0 when down
        self.closed = False
        self._delay = RECONNECT_MIN
        self._task: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self.sent = 0
        self.acked = 0
        self.connects = 0
        self._run: list[Deliver] = []  # deliveries to write at the end of this loop pass
        # receipt ids asked for on this connection, in order, with the SENDs each covers
        self._receipts: deque[tuple[str, int]] = deque()

    # --- life cycle ---------------------------------------------------------

    def start(self) -> None:
        """Connect (again) unless connected or already trying: one connection at a time."""
        if self.closed or self.transport is not None:
            return
        if self._task is not None and not self._task.done():
            return
        self._task = self.server.loop.create_task(self._connect_loop())

    async def _connect_loop(self) -> None:
        while not self.closed and self.transport is None:
            try:
                await self.server.loop.create_connection(lambda: self, *self.address)
                return
            except OSError as exc:
                self.state = f"unreachable: {exc.strerror or exc}"
                await asyncio.sleep(self._delay)
                self._delay = min(RECONNECT_MAX, self._delay * 2)

    def retarget(self, address: tuple[str, int]) -> None:
        """The target now listens elsewhere (it restarted): reconnect there."""
        if address == self.address:
            return
        self.address = address
        if self.transport is not None:
            self.transport.close()  # connection_lost reconnects to the new address
        elif self._task is not None:
            self._task.cancel()
            self._task = None
            self.start()

    def close(self) -> None:
        self.closed = True
        if self._task is not None:
            self._task.cancel()
        if self.transport is not None:
            self.transport.close()

    # --- asyncio.Protocol ---------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.conn = StompConnection(Role.CLIENT, limits=self.server.protocol_limits)
        self.state = "handshake"
        self._timer = self.server.loop.call_later(HANDSHAKE_TIMEOUT, self._handshake_expired)
        headers = {NODE_HEADER: self.node, CLUSTER_HEADER: self.cluster_name}
        if self.secret is not None:
            self.nonce = headers[NONCE_HEADER] = new_nonce()
        self.transport.write(  # type: ignore[union-attr]
            self.conn.send(
                f.Connect(
                    accept_version="1.2",
                    host=self.target,
                    heart_beat=(LINK_HEARTBEAT_MS, LINK_HEARTBEAT_MS),
                    headers=headers,
                )
            )
        )

    def data_received(self, data: bytes) -> None:
        conn = self.conn
        assert conn is not None
        try:
            conn.receive_data(data, self.server.loop.time())
            while True:
                event = conn.next_event()
                if event is NEED_DATA:
                    break
                kind = type(event)
                if kind is f.Receipt:
                    receipt_id = event.receipt_id  # type: ignore[attr-defined]  # kind is f.Receipt
                    if receipt_id in HANDLER_RECEIPTS:
                        headers = event.headers  # type: ignore[attr-defined]  # kind is f.Receipt
                        self.server.cluster.receipt_from_link(self.target, receipt_id, headers)
                    elif receipt_id == AUTH_RECEIPT and self.state == "authenticating":
                        self._up()
                    else:
                        self._acked(receipt_id)
                elif kind is f.Connected:
                    if self.secret is None:
                        self._up()
                    elif not self._prove(event.headers):  # type: ignore[attr-defined]  # kind is f.Connected
                        return
                elif kind is f.Error:
                    log.warning("cluster link to %r: ERROR %s", self.target, event.message)  # type: ignore[attr-defined]  # kind is f.Error
                    self.transport.close()  # type: ignore[union-attr]
                    return
        except BrokerError as exc:
            log.warning("cluster link to %r: %s", self.target, exc)
            self.transport.close()  # type: ignore[union-attr]
        self.server.schedule_flush()

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self.conn = None
        self._run.clear()  # the core gets them back with the rest of the unacked
        self._receipts.clear()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.conn_id:
            # Unacked forwards go back to the head of the forward queue.
            self.server.link_clients.pop(self.conn_id, None)
            self.server.broker.disconnect(self.conn_id, time.time())
            self.conn_id = 0
            self.server.schedule_flush()
            log.warning("cluster link to node %r lost; reconnecting", self.target)
        self.state = "down"
        if not self.closed:
            self.server.loop.call_later(self._delay, self.start)
            self._delay = min(RECONNECT_MAX, self._delay * 2)

    def _prove(self, headers: dict[str, str]) -> bool:
        """Check the target's proof in CONNECTED, answer its challenge; False: closed."""
        assert self.secret is not None and self.conn is not None and self.transport is not None
        expected = link_proof(
            self.secret, ACCEPTING, self.nonce, self.cluster_name, self.target, self.node
        )
        if not proof_matches(headers.get(PROOF_HEADER, ""), expected):
            if not self.impostor:  # once, not on every reconnection
                log.warning(
                    "cluster link to node %r at %s:%d: it did not prove the cluster secret; "
                    "not forwarding to it",
                    self.target,
                    *self.address,
                )
            self.impostor = True
            self.transport.close()
            return False
        self.impostor = False
        proof = link_proof(
            self.secret,
            CONNECTING,
            headers.get(NONCE_HEADER, ""),
            self.cluster_name,
            self.node,
            self.target,
        )
        self.state = "authenticating"
        self.transport.write(
            self.conn.send(
                f.Send(
                    destination=AUTH_DESTINATION,
                    body=b"",
                    receipt=AUTH_RECEIPT,
                    headers={PROOF_HEADER: proof},
                )
            )
        )
        return True

    def _handshake_expired(self) -> None:
        self._timer = None
        if self.state in ("handshake", "authenticating") and self.transport is not None:
            log.warning(
                "cluster link to node %r: no CONNECTED within %g s; reconnecting",
                self.target,
                HANDSHAKE_TIMEOUT,
            )
            self.transport.abort()

    def _arm_timer(self) -> None:
        deadline = self.conn.get_timer() if self.conn is not None else None
        if deadline is not None:
            self._timer = self.server.loop.call_at(deadline, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        if self.conn is None or self.transport is None:
            return
        try:
            data = self.conn.handle_timer(self.server.loop.time())
        except ProtocolError as exc:
            log.warning("cluster link to node %r: %s; reconnecting", self.target, exc)
            self.state = "silent"
            self.transport.abort()  # connection_lost hands the unacked forwards back
            return
        if data:
            self.transport.write(data)
        self._arm_timer()

    # --- forwarding ---------------------------------------------------------

    def _up(self) -> None:
        server = self.server
        if self._timer is not None:  # the handshake timer
            self._timer.cancel()
            self._timer = None
        self.conn_id = server.next_conn_id()
        server.link_clients[self.conn_id] = self
        now = time.time()
        broker = server.broker
        broker.connect(self.conn_id, now, client_id=f"link-to:{self.target}")
        broker.ensure_forward_queue(self.target)
        broker.subscribe(
            self.conn_id,
            "forward",
            "/queue/" + forward_queue(self.target),
            "client",
            {"prefetch-count": str(LINK_WINDOW)},
            now,
        )
        self.state = "up"
        self.connects += 1
        self._arm_timer()
        self._delay = RECONNECT_MIN
        log.info("cluster link to node %r at %s:%d up", self.target, *self.address)
        self.server.cluster.link_up(self.target)

    def control(self, destination: str, headers: dict[str, str]) -> bool:
        """A frame for the target's grouping handler (the local node: a
        proposal, touch or release), no receipt; False while down."""
        if self.state != "up" or self.transport is None or self.conn is None:
            return False
        frame = f.Send(destination=destination, body=b"", headers=headers)
        self.transport.write(self.conn.send(frame))
        return True

    def forward(self, eff: Deliver) -> None:
        """A delivery from the forward queue: SEND it to the target with the
        rest of this loop pass's run."""
        if self.transport is None or self.conn is None:
            return  # connection_lost returns it to the forward queue
        if not self._run:
            self.server.loop.call_soon(self._write_run)
        self._run.append(eff)

    def _write_run(self) -> None:
        run, self._run = self._run, []
        conn = self.conn
        if self.transport is None or conn is None or not run:
            return
        if conn.state is not ConnectionState.OPEN or self.transport.is_closing():
            # The link failed (a heart-beat timeout) after this run was queued: its
            # messages come back to the forward queue when the link's consumer closes.
            return
        node = self.node
        redelivered_below = self.server.redelivered_below
        receipts = self._receipts
        out = []
        last = len(run) - 1
        covered = 0
        for k, eff in enumerate(run):
            m = eff.message
            headers = dict(m.headers)
            destination = headers.pop(DESTINATION, "/queue/" + m.queue)
            headers[ORIGIN_NODE] = node
            headers[ORIGIN_ID] = str(m.id)
            if m.persistent:
                headers["persistent"] = "true"
            if eff.redelivered or m.id < redelivered_below:
                headers[RESENT] = "true"
            headers.pop("content-length", None)
            covered += 1
            body = m.body if m.body is not None else eff.body
            if k == last or covered == RECEIPT_EVERY:
                receipts.append((eff.ack_id, covered))
                covered = 0
                # through the connection, which notes the output for its heart-beats
                out.append(
                    conn.send(
                        f.Send(
                            destination=destination,
                            body=body or b"",
                            receipt=eff.ack_id,
                            headers=headers,
                        )
                    )
                )
            else:
                out.append(encode_send(destination, headers, body or b"", "1.2"))
        self.transport.writelines(out)
        self.sent += len(run)

    def _acked(self, receipt_id: str) -> None:
        """The target journaled every SEND up to this one: ack them all
        (the subscription's acks are cumulative)."""
        receipts = self._receipts
        while receipts:
            rid, count = receipts.popleft()
            self.acked += count
            if rid == receipt_id:
                break
        if self.conn_id:
            try:
                self.server.broker.ack(self.conn_id, receipt_id, time.time())
            except BrokerError as exc:  # a receipt for a delivery already returned
                log.debug("cluster link to %r: receipt %s: %s", self.target, receipt_id, exc)

    def status(self) -> dict[str, Any]:
        return {
            "node": self.target,
            "link": f"{self.address[0]}:{self.address[1]}",
            "state": self.state,
            "forwarded": self.sent,
            "acked": self.acked,
            "connects": self.connects,
        }
