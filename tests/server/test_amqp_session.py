"""AmqpSession on a fake transport against a Proton client engine, in memory.

The session runs on a real BrokerServer without listeners (fakes.py); the
client is Proton's engine, its bytes moved by hand, so a test decides when
the server's flush runs.
"""

from __future__ import annotations

import asyncio

import pytest
from fakes import FakeTransport, PassLog, SessionHarness, frame
from proton import Collector, Connection, Link, Message, Transport

from shoal.server.amqp import AmqpSession


@pytest.fixture
def loop():
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


class Client:
    """A Proton client engine wired to an AmqpSession on a fake transport."""

    def __init__(self, h: SessionHarness) -> None:
        self.h = h
        self.session = AmqpSession(h.server)
        self.transport = FakeTransport()
        self.session.connection_made(self.transport)  # type: ignore[arg-type]
        self.engine = Transport()
        self.engine.sasl().allowed_mechs("ANONYMOUS")
        self.conn = Connection()
        self.conn.collect(Collector())
        self.engine.bind(self.conn)
        self.conn.open()
        self.ssn = self.conn.session()
        self.ssn.open()
        self.pump()

    def pump(self) -> None:
        """Move bytes both ways (and let the server flush) until nothing moves."""
        for _ in range(50):
            moved = False
            pending = self.engine.pending()
            if pending > 0:
                data = self.engine.peek(pending)
                self.engine.pop(len(data))
                self.session.data_received(bytes(data))
                moved = True
            self.h.settle()
            while self.transport.read < len(self.transport.buffers):
                self.engine.push(self.transport.buffers[self.transport.read])
                self.transport.read += 1
                moved = True
            if not moved:
                return

    def sender(self, address: str):
        snd = self.ssn.sender("p-" + address)
        snd.target.address = address
        snd.open()
        self.pump()
        return snd

    def receiver(self, address: str, credit: int):
        rcv = self.ssn.receiver(address + "-" + str(credit))
        rcv.source.address = address
        rcv.open()
        rcv.flow(credit)
        self.pump()
        return rcv


def test_a_delivery_to_a_link_detached_in_the_same_round_goes_back(loop):
    h = SessionHarness(loop)
    try:
        c = Client(h)
        first = c.receiver("q", 5)
        # The core picks the first link for a message (a Deliver effect waits
        # for the flush); the client detaches that link before the flush runs.
        core = h.server.broker
        core.connect(999, 1.0)
        core.send(999, "/queue/q", {"JMSXGroupID": "g"}, b"m", 1.0)
        first.close()
        data = c.engine.peek(c.engine.pending())
        c.engine.pop(len(data))
        c.session.data_received(bytes(data))  # the detach, before the flush
        c.pump()
        assert not c.transport.closed  # not a connection failure
        second = c.receiver("q", 5)
        c.pump()
        dlv = second.current
        assert dlv is not None and dlv.readable
        assert Message().decode(second.recv(dlv.pending)) is None
    finally:
        h.close()


def test_messages_keep_their_own_fields_through_reused_proton_messages(loop):
    # The session hands decoded and sent messages back for reuse: nothing of
    # one message may show up in the next, either way.
    h = SessionHarness(loop)
    try:
        c = Client(h)
        snd = c.sender("q")
        sent = [
            Message(body=b"a", group_id="g1", group_sequence=1, properties={"k": "v"}),
            Message(body="text", content_type="text/plain", subject="s", durable=True),
            Message(body=b"c", priority=9),
        ]
        for i, m in enumerate(sent):
            dlv = snd.delivery(str(i).encode())
            snd.send(m.encode())
            snd.advance()
            dlv.settle()
        c.pump()
        rcv = c.receiver("q", 10)
        c.pump()
        got = []
        while (dlv := rcv.current) is not None:
            m = Message()
            m.decode(rcv.recv(dlv.pending))
            rcv.advance()
            got.append(m)
        assert [bytes(m.body) if isinstance(m.body, memoryview) else m.body for m in got] == [
            b"a",
            "text",
            b"c",
        ]
        assert [(m.group_id, m.subject, m.durable, m.priority) for m in got] == [
            ("g1", None, False, 4),
            (None, "s", True, 4),
            (None, None, False, 9),
        ]
        assert got[0].properties == {"k": "v"}
        assert not got[1].properties and not got[2].properties
    finally:
        h.close()


def test_a_second_read_before_the_flush_waits_for_it(loop):
    # As for STOMP (server/pacing.py): uvloop reads a socket up to 32 times a
    # loop iteration; a producer's burst must not outrun the flush.
    h = SessionHarness(loop)
    try:
        c = Client(h)
        snd = c.sender("q")
        assert c.transport.reading
        for i in range(2):
            dlv = snd.delivery(str(i).encode())
            snd.send(Message(body=b"m").encode())
            snd.advance()
            dlv.settle()
            data = c.engine.peek(c.engine.pending())
            c.engine.pop(len(data))
            c.session.data_received(bytes(data))
        assert not c.transport.reading  # the second read: the next waits for the flush
        pauses = c.transport.pauses
        h.settle()  # the flush
        assert c.transport.reading and c.transport.pauses == pauses
        assert h.server.broker.queues["q"].depth == 2
    finally:
        h.close()


def test_a_peer_that_does_not_read_is_not_read_until_it_does(loop):
    """Past the write buffer's high-water mark the connection is not read; the
    flush does not resume reading meanwhile, the peer's reading does."""
    h = SessionHarness(loop)
    try:
        c = Client(h)
        c.sender("q")
        assert c.transport.reading
        c.session.pause_writing()  # the transport's buffer passed its high-water mark
        assert not c.transport.reading
        h.settle()  # the flush
        assert not c.transport.reading
        c.session.resume_writing()
        assert c.transport.reading
    finally:
        h.close()


def presettled_receiver(c: Client, address: str):
    """An at-most-once consumer link (snd-settle-mode settled) with credit 5."""
    rcv = c.ssn.receiver("settled")
    rcv.source.address = address
    rcv.snd_settle_mode = Link.SND_SETTLED
    rcv.open()
    rcv.flow(5)
    c.pump()
    return rcv


def assert_removed_after_its_transfer(log: PassLog, rcv) -> None:
    """The client got the message pre-settled, and the store heard of its
    removal on a later loop pass than the session's write of it."""
    dlv = rcv.current
    assert dlv is not None and dlv.settled
    assert Message().decode(rcv.recv(dlv.pending)) is None
    stored = log.first("MessageStored")
    written = min(n for n, w in log.events if w == "write" and n >= stored)
    assert log.first("MessageRemoved") > written


def test_a_pre_settled_delivery_leaves_the_journal_only_after_its_transfer_is_written(loop):
    """As a STOMP auto-ack: a crash between a durable removal and the write
    would lose the message, so the removal waits for the write."""
    h = SessionHarness(loop)
    try:
        c = Client(h)
        rcv = presettled_receiver(c, "q")
        log = PassLog(h, c.transport, label=lambda data: "write")
        producer, _ = h.connect()
        core = h.server.broker
        core.connect(999, 1.0)
        core.send(999, "/queue/q", {"persistent": "true"}, b"m", 1.0)
        h.server.schedule_flush()
        # In the same pass, after the flush: a STOMP SEND whose receipt takes
        # the records journaled so far (uvloop writes the transfer after it).
        send = frame("SEND", {"destination": "/queue/o", "persistent": "true", "receipt": "r"})
        loop.call_soon(producer.data_received, send)
        c.pump()
        log.close()
        assert_removed_after_its_transfer(log, rcv)
        assert core.browse("q") == []
    finally:
        h.close()


def test_a_pre_settled_transfer_held_for_a_sync_is_acked_only_once_written(loop):
    """A delivery count first (persist-delivery-count-before-delivery) holds the
    round's output for a sync: the pre-settled transfer waits, so does its ack."""
    h = SessionHarness(loop)
    try:
        c = Client(h)
        rcv = presettled_receiver(c, "q")
        counted, _ = h.connect()
        counted.data_received(
            frame(
                "SUBSCRIBE",
                {
                    "destination": "/queue/c?persist-delivery-count-before-delivery=true",
                    "id": "s",
                    "ack": "client-individual",
                },
            )
        )
        h.settle()
        log = PassLog(h, c.transport, label=lambda data: "write")
        core = h.server.broker
        core.connect(999, 1.0)
        h.store.gate.clear()  # the sync the output waits for does not finish yet
        core.send(999, "/queue/c", {"persistent": "true"}, b"counted", 1.0)
        core.send(999, "/queue/q", {"persistent": "true"}, b"m", 1.0)
        h.server.schedule_flush()
        for _ in range(4):
            h.run_once()
        assert [w for _n, w in log.events if w in ("write", "MessageRemoved")] == []
        h.store.gate.set()
        c.pump()
        log.close()
        assert_removed_after_its_transfer(log, rcv)
        assert core.browse("q") == []
    finally:
        h.close()
