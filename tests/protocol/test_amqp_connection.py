"""AmqpConnection against a Proton client engine, joined in memory (no sockets)."""

from __future__ import annotations

from typing import Any

import pytest
from proton import (
    Collector,
    Connection,
    Described,
    Disposition,
    Message,
    Terminus,
    Transport,
    symbol,
    ulong,
)

from shoal.protocol.amqp import (
    NEED_DATA,
    AmqpConnection,
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
from shoal.server.amqp import PRODUCER_CREDIT


class Pair:
    """A Proton client connection and our server, bytes moved by ``pump``."""

    def __init__(
        self,
        server: AmqpConnection,
        *,
        user: str | None = None,
        password: str | None = None,
        sasl: bool = True,
    ) -> None:
        self.server = server
        self.transport = Transport()
        if sasl:
            s = self.transport.sasl()
            if user is not None:
                s.allowed_mechs("PLAIN")
                s.allow_insecure_mechs = True
            else:
                s.allowed_mechs("ANONYMOUS")
        self.conn = Connection()
        if user is not None:
            self.conn.user = user
            self.conn.password = password
        self.conn.collect(Collector())
        self.transport.bind(self.conn)
        self.conn.container = "test-client"
        self.conn.open()
        self.session = self.conn.session()
        self.session.open()
        self.now = 1.0

    def pump(self) -> list[object]:
        events: list[object] = []
        for _ in range(20):
            moved = False
            pending = self.transport.pending()
            if pending > 0:
                data = self.transport.peek(pending)
                self.transport.pop(len(data))
                self.server.receive_data(data, self.now)
                moved = True
            out = self.server.data_to_send()
            if out:
                if self.transport.capacity() > 0:
                    self.transport.push(out)
                moved = True
            while (e := self.server.next_event()) is not NEED_DATA:
                events.append(e)
            if not moved:
                break
        return events


def test_open_attach_transfer_and_settle() -> None:
    pair = Pair(AmqpConnection())
    events = pair.pump()
    assert events == [ConnectionOpened("test-client", None, None)]
    snd = pair.session.sender("p")
    snd.target.address = "orders"
    snd.target.capabilities.put_array(False, 19)  # Data.SYMBOL
    snd.target.capabilities.enter()
    snd.target.capabilities.put_symbol("queue")
    snd.target.capabilities.exit()
    snd.open()
    (attached,) = pair.pump()
    assert isinstance(attached, ReceiverAttached)
    assert (attached.address, attached.capabilities) == ("orders", ("queue",))
    pair.server.accept_link(attached.link_id)
    pair.server.grant_credit(attached.link_id, 10)
    pair.pump()
    assert snd.credit == 10
    dlv = snd.delivery(b"1")
    snd.send(Message(body="hello", group_id="g1", group_sequence=1, durable=True).encode())
    snd.advance()
    (transfer,) = pair.pump()
    assert isinstance(transfer, TransferReceived)
    assert transfer.message.body == "hello" and transfer.message.group_id == "g1"
    assert not transfer.settled
    pair.server.settle(
        transfer.delivery_id,
        "rejected",
        condition="amqp:resource-limit-exceeded",
        description="queue orders is full",
    )
    pair.pump()
    assert dlv.remote_state == Disposition.REJECTED
    assert dlv.remote.condition.description == "queue orders is full"


def test_consumer_credit_and_outcomes() -> None:
    pair = Pair(AmqpConnection())
    pair.pump()
    rcv = pair.session.receiver("c")
    rcv.source.address = "queue://orders"
    rcv.open()
    (attached,) = pair.pump()
    assert isinstance(attached, SenderAttached) and attached.address == "queue://orders"
    pair.server.accept_link(attached.link_id)
    assert pair.pump() == []
    rcv.flow(2)
    (credit,) = pair.pump()
    assert credit == CreditChanged(attached.link_id, 2, False)
    did = pair.server.send_message(attached.link_id, Message(body="m1", group_id="g"))
    pair.pump()
    dlv = rcv.current
    assert Message().decode(rcv.recv(dlv.pending)) is None
    rcv.advance()
    dlv.local.failed = True
    dlv.local.undeliverable = True
    dlv.update(Disposition.MODIFIED)
    dlv.settle()
    outcomes = [e for e in pair.pump() if not isinstance(e, CreditChanged)]
    assert outcomes[0] == OutcomeReceived(attached.link_id, did, "modified", True, True, True)
    rcv.close()
    assert pair.pump() == [LinkDetached(attached.link_id, True, None)]
    pair.conn.close()
    assert isinstance(pair.pump()[-1], ConnectionClosed)


def answer_plain(pair: Pair, events: list[object]) -> list[object]:
    """As the broker does: check PLAIN credentials, then answer the connection."""
    out = []
    for e in events:
        if isinstance(e, CredentialsReceived):
            assert "secret" not in repr(e)  # never logged
            if (e.user, e.password) == ("alice", "secret"):
                pair.server.authenticated(e.user)
            else:
                pair.server.refuse_credentials(f"wrong login or passcode for {e.user!r}")
            out.extend(pair.pump())
        else:
            out.append(e)
    return out


def test_plain_credentials_are_answered_by_the_owner() -> None:
    ok = Pair(AmqpConnection(mechanisms=("PLAIN",)), user="alice", password="secret")
    assert answer_plain(ok, ok.pump()) == [ConnectionOpened("test-client", None, "alice")]
    bad = Pair(AmqpConnection(mechanisms=("PLAIN",)), user="alice", password="nope")
    events = answer_plain(bad, bad.pump())
    assert isinstance(events[0], AuthenticationFailed)
    assert "wrong login" in events[0].reason
    assert bad.server.finished
    assert bad.transport.condition is not None  # the client heard the refusal


def test_anonymous_refused_where_plain_is_required() -> None:
    pair = Pair(AmqpConnection(mechanisms=("PLAIN",)), sasl=False)
    (failed,) = pair.pump()
    assert isinstance(failed, AuthenticationFailed)
    assert "PLAIN" in failed.reason


@pytest.mark.parametrize(
    "data",
    [
        b"GET / HTTP/1.1\r\n\r\n",
        b"AMQP\x03\x01\x00\x00\x00\x00\x00\x10\x02\x07\x00\x00xxxxxxxx",
        b"AMQP\x00\x01\x00\x00\x00\x00\x00\x0c\x02\x00\x00\x00garbage!",
    ],
)
def test_malformed_bytes_fail_clearly(data: bytes) -> None:
    server = AmqpConnection()
    server.receive_data(data, 1.0)
    events = []
    while (e := server.next_event()) is not NEED_DATA:
        events.append(e)
    assert any(isinstance(e, ProtocolFailed) for e in events), events
    server.data_to_send()
    assert server.finished


def _consumer(pair: Pair, credit: int) -> tuple[Any, int]:
    pair.pump()
    rcv = pair.session.receiver("c")
    rcv.source.address = "orders"
    rcv.open()
    (attached,) = pair.pump()
    pair.server.accept_link(attached.link_id)
    rcv.flow(credit)
    pair.pump()
    return rcv, attached.link_id


def _producer(pair: Pair, credit: int) -> tuple[Any, int]:
    pair.pump()
    snd = pair.session.sender("p")
    snd.target.address = "orders"
    snd.open()
    (attached,) = [e for e in pair.pump() if isinstance(e, ReceiverAttached)]
    pair.server.accept_link(attached.link_id)
    pair.server.grant_credit(attached.link_id, credit)
    pair.pump()
    return snd, attached.link_id


def _received(rcv: Any) -> list[tuple[Message, Any]]:
    """The client's complete deliveries so far, decoded, each with its delivery."""
    got = []
    while (dlv := rcv.current) is not None:
        m = Message()
        m.decode(rcv.recv(dlv.pending))
        rcv.advance()
        got.append((m, dlv))
    return got


def test_each_outcome_names_its_own_delivery() -> None:
    pair = Pair(AmqpConnection())
    rcv, link_id = _consumer(pair, 3)
    dids = [pair.server.send_message(link_id, Message(body=f"m{i}")) for i in range(3)]
    assert len(set(dids)) == 3 and 0 not in dids
    pair.pump()
    got = [(m.body, dlv) for m, dlv in _received(rcv)]
    assert [body for body, _ in got] == ["m0", "m1", "m2"]
    for (_, dlv), state in zip(
        reversed(got), (Disposition.ACCEPTED, Disposition.RELEASED, Disposition.REJECTED)
    ):
        dlv.update(state)
        dlv.settle()
    outcomes = [e for e in pair.pump() if isinstance(e, OutcomeReceived)]
    assert {(e.delivery_id, e.outcome) for e in outcomes} == {
        (dids[2], "accepted"),
        (dids[1], "released"),
        (dids[0], "rejected"),
    }
    assert all(e.settled and e.link_id == link_id for e in outcomes)


def test_presettled_transfer_gets_no_delivery_id_and_no_outcome() -> None:
    pair = Pair(AmqpConnection())
    rcv, link_id = _consumer(pair, 1)
    assert pair.server.send_message(link_id, Message(body="fire"), settled=True) == 0
    pair.pump()
    dlv = rcv.current
    assert dlv.settled  # the peer sees it settled
    rcv.advance()
    dlv.update(Disposition.ACCEPTED)
    dlv.settle()
    assert [e for e in pair.pump() if isinstance(e, OutcomeReceived)] == []


def test_detach_forgets_the_links_deliveries() -> None:
    pair = Pair(AmqpConnection())
    snd, link_id = _producer(pair, 5)
    snd.delivery(b"1")
    snd.send(Message(body="one").encode())
    snd.advance()
    (transfer,) = pair.pump()
    assert isinstance(transfer, TransferReceived) and transfer.message.body == "one"
    snd.close()
    assert pair.pump() == [LinkDetached(link_id, True, None)]
    pair.server.settle(transfer.delivery_id)  # gone with its link: nothing happens
    pair.pump()
    assert pair.server.credit(link_id) == 0


def test_presettled_and_unsettled_transfers_are_told_apart() -> None:
    pair = Pair(AmqpConnection())
    snd, link_id = _producer(pair, 5)
    first = snd.delivery(b"1")
    snd.send(Message(body=b"\x00\x01", group_id="g").encode())
    snd.advance()
    first.settle()  # pre-settled: at most once
    second = snd.delivery(b"2")
    snd.send(Message(body=b"\x02").encode())
    snd.advance()
    t1, t2 = pair.pump()
    assert isinstance(t1, TransferReceived) and isinstance(t2, TransferReceived)
    assert (t1.settled, t1.delivery_id) == (True, 0)
    assert bytes(t1.message.body) == b"\x00\x01" and t1.message.group_id == "g"
    assert not t2.settled and t2.delivery_id > 0
    pair.server.settle(t2.delivery_id)
    pair.pump()
    assert second.remote_state == Disposition.ACCEPTED and second.settled


def test_messages_larger_than_the_codec_buffer_go_both_ways_whole() -> None:
    pair = Pair(AmqpConnection())
    rcv, link_id = _consumer(pair, 2)
    big = bytes(range(256)) * 12  # 3 KiB: more than the first buffer (1 KiB)
    pair.server.send_message(link_id, Message(body=big, group_id="g"))
    pair.server.send_message(link_id, Message(body=b"small"))
    pair.pump()
    assert [bytes(m.body) for m, _ in _received(rcv)] == [big, b"small"]
    snd, _ = _producer(pair, 5)
    for body in (big * 2, b"after"):
        snd.delivery(body[:4])
        snd.send(Message(body=body).encode())
        snd.advance()
    transfers = [e for e in pair.pump() if isinstance(e, TransferReceived)]
    assert [bytes(t.message.body) for t in transfers] == [big * 2, b"after"]


def test_a_recycled_message_is_filled_and_sent_like_a_new_one() -> None:
    pair = Pair(AmqpConnection())
    rcv, link_id = _consumer(pair, 2)
    first = pair.server.blank_message()
    first.body, first.group_id, first.durable = b"one", "g1", True
    pair.server.send_message(link_id, first)
    pair.server.recycle(first)
    second = pair.server.blank_message()
    assert second is first
    second.body = b"two"
    pair.server.send_message(link_id, second)
    pair.pump()
    got = [(bytes(m.body), m.group_id, m.durable) for m, _ in _received(rcv)]
    assert got == [(b"one", "g1", True), (b"two", None, False)]


def test_a_producers_full_credit_of_transfers_reuses_recycled_messages() -> None:
    # All transfers of a read are decoded before the owner hands the first back,
    # and a producer link may have PRODUCER_CREDIT of them in one read: a pool
    # smaller than that allocated (and later freed) a proton.Message for the rest.
    pool: list[Message] = []
    pair = Pair(AmqpConnection(message_pool=pool))
    snd, _ = _producer(pair, 2 * PRODUCER_CREDIT)

    def read_of_full_credit() -> list[Message]:
        for i in range(PRODUCER_CREDIT):
            snd.delivery(str(i).encode())
            snd.send(Message(body=b"x" * 256, group_id=f"g{i % 100}").encode())
            snd.advance()
        got = [e.message for e in pair.pump() if isinstance(e, TransferReceived)]
        assert len(got) == PRODUCER_CREDIT
        return got

    first = read_of_full_credit()
    for m in first:
        pair.server.recycle(m)
    second = read_of_full_credit()  # first is still referenced: no id is reused
    assert {id(m) for m in second} <= {id(m) for m in first}
    assert [bytes(m.body) for m in second] == [b"x" * 256] * PRODUCER_CREDIT


def test_an_aborted_transfer_is_dropped_and_the_next_one_arrives() -> None:
    pair = Pair(AmqpConnection())
    snd, link_id = _producer(pair, 5)
    aborted = snd.delivery(b"1")
    snd.send(Message(body=b"x" * 100).encode()[:40])  # partial: no advance
    assert [e for e in pair.pump() if isinstance(e, TransferReceived)] == []
    aborted.abort()
    snd.delivery(b"2")
    snd.send(Message(body=b"whole").encode())
    snd.advance()
    transfers = [e for e in pair.pump() if isinstance(e, TransferReceived)]
    assert [bytes(t.message.body) for t in transfers] == [b"whole"]
    assert pair.server.credit(link_id) > 0


def test_a_transfer_over_the_message_limit_closes_its_link() -> None:
    pair = Pair(AmqpConnection(max_message_bytes=2000))
    snd, link_id = _producer(pair, 5)
    snd.delivery(b"1")
    snd.send(Message(body=b"y" * 3000).encode())
    snd.advance()
    assert [e for e in pair.pump() if isinstance(e, TransferReceived)] == []
    assert snd.remote_condition.name == "amqp:link:message-size-exceeded"
    assert "larger than 2000 bytes" in snd.remote_condition.description
    assert pair.server.credit(link_id) == 0  # forgotten


def test_a_partial_transfer_past_the_message_limit_closes_its_link() -> None:
    pair = Pair(AmqpConnection(max_message_bytes=2000))
    snd, _ = _producer(pair, 5)
    snd.delivery(b"1")
    snd.send(Message(body=b"z" * 5000).encode()[:3000])  # more to come, never advanced
    assert [e for e in pair.pump() if isinstance(e, TransferReceived)] == []
    assert snd.remote_condition.name == "amqp:link:message-size-exceeded"


def test_every_field_the_mapping_reads_comes_through() -> None:
    pair = Pair(AmqpConnection())
    snd, _ = _producer(pair, 5)
    snd.delivery(b"1")
    sent = Message(
        body="text",
        group_id="g-\u00e9",
        group_sequence=7,
        durable=True,
        priority=9,
        ttl=2.5,
        expiry_time=123.0,
        creation_time=45.0,
        id=99,
        correlation_id="c1",
        user_id=b"alice",
        reply_to="queue://replies",
        subject="s",
        content_encoding="gzip",
        content_type="text/x",
    )
    snd.send(sent.encode())
    snd.advance()
    (transfer,) = [e for e in pair.pump() if isinstance(e, TransferReceived)]
    got = transfer.message
    assert got.body == "text" and not transfer.default_header
    for name in (
        "group_id",
        "group_sequence",
        "durable",
        "priority",
        "ttl",
        "expiry_time",
        "creation_time",
        "id",
        "correlation_id",
        "user_id",
        "reply_to",
        "subject",
        "content_encoding",
        "content_type",
    ):
        assert getattr(got, name) == getattr(sent, name), name


def _coordinator(pair: Pair) -> tuple[Any, int]:
    pair.pump()
    snd = pair.session.sender("txn-ctrl")
    snd.target.type = Terminus.COORDINATOR
    snd.open()
    (attached,) = [e for e in pair.pump() if isinstance(e, ReceiverAttached)]
    assert attached.coordinator
    pair.server.accept_coordinator(attached.link_id, 10)
    pair.pump()
    assert snd.credit == 10
    return snd, attached.link_id


def _control(pair: Pair, snd: Any, body: Any) -> tuple[Any, list[object]]:
    dlv = snd.delivery(f"c{snd.unsettled}".encode())
    snd.send(Message(body=body).encode())
    snd.advance()
    return dlv, pair.pump()


def test_declare_discharge_and_transactional_states() -> None:
    pair = Pair(AmqpConnection())
    ctrl, ctrl_id = _coordinator(pair)
    dlv, (declare,) = _control(pair, ctrl, Described(symbol("amqp:declare:list"), [None]))
    assert declare == DeclareReceived(ctrl_id, declare.delivery_id)
    pair.server.declared(declare.delivery_id, b"t1")
    pair.pump()
    assert dlv.remote_state == 0x33 and bytes(dlv.remote.data[0]) == b"t1" and dlv.settled

    # A producer's transfer in the transaction, answered TransactionalState(t1, accepted).
    snd, _ = _producer(pair, 5)
    sent = snd.delivery(b"1")
    sent.local.data = [b"t1"]
    sent.update(0x34)
    snd.send(Message(body="in-txn").encode())
    snd.advance()
    (transfer,) = [e for e in pair.pump() if isinstance(e, TransferReceived)]
    assert transfer.txn_id == b"t1" and transfer.message.body == "in-txn"
    pair.server.settle(transfer.delivery_id, "accepted", txn_id=b"t1")
    pair.pump()
    assert sent.remote_state == 0x34 and sent.settled
    txn, outcome = sent.remote.data
    assert bytes(txn) == b"t1" and outcome.descriptor == 0x24

    # A consumer's settlement in the transaction names it, with its outcome.
    rcv, link_id = _consumer(pair, 2)
    dids = [pair.server.send_message(link_id, Message(body=f"m{i}")) for i in range(2)]
    pair.pump()
    got = _received(rcv)
    for (_, d), state in zip(got, (0x24, 0x26)):
        d.local.data = [b"t1", Described(ulong(state), [])]
        d.update(0x34)
        d.settle()
    outcomes = [e for e in pair.pump() if isinstance(e, OutcomeReceived)]
    assert [(e.delivery_id, e.outcome, e.settled, e.txn_id) for e in outcomes] == [
        (dids[0], "accepted", True, b"t1"),
        (dids[1], "released", True, b"t1"),
    ]

    # Discharge: the txn-id and whether it failed; answered with a plain outcome.
    dlv, (discharge,) = _control(pair, ctrl, Described(ulong(0x32), [b"t1", True]))
    assert discharge == DischargeReceived(ctrl_id, discharge.delivery_id, b"t1", True)
    pair.server.settle(discharge.delivery_id, "rejected", condition="amqp:transaction:unknown-id")
    pair.pump()
    assert dlv.remote_state == Disposition.REJECTED
    assert dlv.remote.condition.name == "amqp:transaction:unknown-id"


def test_a_coordinator_refuses_what_is_not_a_control() -> None:
    pair = Pair(AmqpConnection())
    ctrl, _ = _coordinator(pair)
    dlv, events = _control(pair, ctrl, "commit please")
    assert events == []
    assert dlv.remote_state == Disposition.REJECTED
    assert dlv.remote.condition.name == "amqp:decode-error"


def test_transfers_without_a_transaction_carry_no_txn_id() -> None:
    pair = Pair(AmqpConnection())
    _coordinator(pair)
    snd, _ = _producer(pair, 5)
    snd.delivery(b"1")
    snd.send(Message(body="plain").encode())
    snd.advance()
    (transfer,) = [e for e in pair.pump() if isinstance(e, TransferReceived)]
    assert transfer.txn_id is None
