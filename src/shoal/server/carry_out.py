"""The core's effects carried out: deliveries turned into bytes, session by
session, and the other effects handed to whom they name.

``BrokerServer.flush`` (app.py) hands the round's records to the journal,
then the core's effects come here: each delivery is encoded into its
session's output, and the other effects reach the session or the cluster
node they name. Compiled with mypyc (``_native.py``): this runs once per
message delivered, and compiled, the reads of ``Deliver`` and ``Message``
fields are slots of native classes rather than Python attribute lookups.
app.py itself stays interpreted.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Protocol

from shoal.broker.effects import (
    CloseConnection,
    Deliver,
    ProducerFlow,
    ProposeBinding,
    ReleaseBinding,
    SendDecided,
    TouchBinding,
)
from shoal.server.stomp import StompSession

if TYPE_CHECKING:
    import asyncio

    from shoal.broker.effects import Effect
    from shoal.records import MessageRemoved

log = logging.getLogger("shoal.server")


class EffectsServer(Protocol):
    """What carry_out_effects uses of the server (``app.BrokerServer``), so that this
    module does not import app.py, which imports it."""

    loop: asyncio.AbstractEventLoop
    sessions: dict[int, Any]  # conn id -> StompSession or another protocol's session
    redelivered_below: int  # ids below it were recovered after a crash: flagged redelivered
    link_clients: dict[int, Any]  # core conn id -> cluster LinkClient
    cluster: Any  # shoal.server.cluster.node.ClusterNode, or None on a single node

    def encode_lossy(
        self, session: StompSession, eff: Deliver, headers: dict[str, str], body: bytes
    ) -> bytes | None: ...


def carry_out_effects(
    server: EffectsServer, effects: list[Effect], unsent: dict[int, MessageRemoved] | None
) -> tuple[set[Any], list[int]]:
    """Carry out ``effects``; returns the sessions with new output, and the
    timestamps of the messages delivered (for the latency histogram).

    ``unsent``: auto-ack removals by message id; each delivered here is
    taken out and waits in its session for the delivery's bytes."""
    sessions = server.sessions  # Any values: AMQP sessions are in it too
    dirty: set[Any] = set()
    redelivered_below = server.redelivered_below
    delivered_ts: list[int] = []
    # Deliveries come in runs for one connection: look the session up once a run.
    last_id = -1
    session: Any = None  # a StompSession, or another protocol's (AMQP)
    stomp: StompSession | None = None  # the session when it is STOMP's
    out: list[bytes] = []
    # Another protocol's session (AMQP) turns its deliveries into bytes itself.
    deliver: Any = None
    for eff in effects:
        if type(eff) is Deliver:
            if eff.conn_id != last_id:
                last_id = eff.conn_id
                session = sessions.get(last_id)
                stomp = None
                if session is not None:
                    out = session.out
                    if isinstance(session, StompSession):
                        stomp = session
                        deliver = None
                    else:
                        deliver = session.deliver
                    dirty.add(session)
            if session is None:
                if server.link_clients:  # a cluster link consuming a forward queue
                    link = server.link_clients.get(last_id)
                    if link is not None:
                        link.forward(eff)
                continue
            if session.closing:
                continue
            msg = eff.message
            body = msg.body
            if body is None:  # paged out: read back by take_records
                body = eff.body
                if body is None:
                    session.shutdown(f"message {msg.id} could not be read from the journal")
                    continue
            suspect = msg.id < redelivered_below  # recovered after a crash: maybe delivered
            if stomp is None:
                try:
                    deliver(eff, body, suspect)
                except Exception:
                    log.exception(
                        "cannot deliver message %d to connection %d from %s",
                        msg.id,
                        session.conn_id,
                        session.peer,
                    )
                    session.shutdown(f"message {msg.id} could not be encoded; see the log")
                    continue
                delivered_ts.append(msg.timestamp)
                continue
            headers = msg.headers
            if eff.redelivered or eff.first_key is not None or msg.delivery_count or suspect:
                headers = dict(headers)
                if eff.redelivered or suspect:
                    headers["redelivered"] = "true"
                # After a crash an unflagged count of 0 may hide one delivery.
                count = msg.delivery_count or (1 if suspect else 0)
                headers["x-delivery-count"] = str(count)
                if eff.first_key is not None:
                    headers[eff.first_key] = "true"
            ack_id = eff.ack_id
            data: bytes | None
            try:
                data = stomp.conn.send_message(
                    msg.destination, ack_id, eff.sub_id, ack_id, headers, body
                )
            except Exception:
                data = server.encode_lossy(stomp, eff, headers, body)
                if data is None:
                    continue
            out.append(data)
            stomp.messages_out += 1
            delivered_ts.append(msg.timestamp)
            if unsent:
                removal = unsent.pop(msg.id, None)
                if removal is not None:
                    stomp.removals_after_write.append(removal)
        elif type(eff) is ProducerFlow:
            if not eff.blocked:  # blocked SENDs may go on; not inside this flush
                s = sessions.get(eff.conn_id)
                if s is not None and s.blocked_frames:
                    server.loop.call_soon(s.release_blocked)
        elif type(eff) is CloseConnection:
            s = sessions.get(eff.conn_id)
            if s is not None:
                s.shutdown(eff.reason)
                last_id = -1  # its session is closing now
        elif type(eff) is ProposeBinding:
            server.cluster.propose(eff)
        elif type(eff) is TouchBinding:
            server.cluster.touch(eff)
        elif type(eff) is ReleaseBinding:
            server.cluster.release(eff)
        elif type(eff) is SendDecided:
            s = sessions.get(eff.conn_id)
            if s is not None:
                s.send_decided(eff.hold_id, eff.error)  # StompSession and AmqpSession
                last_id = -1  # it may have closed
    return dirty, delivered_ts
