"""The client's shared, I/O-free parts: frames built, messages read, producers' groups."""

from __future__ import annotations

import pytest

from shoal.client import GROUP_HEADER, GROUP_SEQ_HEADER, Message, Producer, ServerError, parse_url
from shoal.client._core import connect_frame, send_frame, server_error, subscribe_frame
from shoal.errors import BrokerError
from shoal.protocol.stomp import Error, Role, StompConnection
from shoal.protocol.stomp import Message as MessageFrame


def frame(headers: dict[str, str], body: bytes = b"x") -> MessageFrame:
    base = {"destination": "/queue/q", "message-id": "7", "subscription": "s", "ack": "a7"}
    return MessageFrame("/queue/q", "7", "s", "a7", body, {**base, **headers})


class Settler:
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def _settle(self, kind, msg, tx, receipt):
        self.calls.append((kind, msg.ack_id, tx, receipt))
        return "result"


def test_message_fields_read_the_standard_headers():
    m = Message(
        frame(
            {
                GROUP_HEADER: "AAPL",
                GROUP_SEQ_HEADER: "3",
                "redelivered": "true",
                "x-delivery-count": "2",
                "persistent": "true",
            },
            "héllo".encode(),
        ),
        Settler(),
        "client",
        0,
    )
    assert (m.destination, m.message_id, m.subscription, m.ack_id) == ("/queue/q", "7", "s", "a7")
    assert m.group == "AAPL" and m.group_seq == 3
    assert m.redelivered and m.delivery_count == 2 and m.persistent
    assert m.text == "héllo" and m.body == "héllo".encode()
    assert "AAPL" in repr(m) and "redelivered" in repr(m)


def test_message_defaults_when_headers_are_absent():
    m = Message(frame({}), Settler(), "client", 0)
    assert m.group is None and m.group_seq is None
    assert not m.redelivered and m.delivery_count == 0 and not m.persistent
    assert Message(frame({"_AMQ_GROUP_ID": "g"}), Settler(), "auto", 0).group == "g"
    assert Message(frame({GROUP_SEQ_HEADER: "x"}), Settler(), "auto", 0).group_seq is None


def test_message_ack_and_nack_go_to_the_client():
    s = Settler()
    m = Message(frame({}), s, "client-individual", 0)
    assert m.ack() == "result"
    m.nack(receipt=True)
    assert s.calls == [("ack", "a7", None, False), ("nack", "a7", None, True)]


def test_send_frame_puts_group_seq_persistence_and_wins_over_headers():
    ev = send_frame(
        "/queue/q",
        "text",
        {GROUP_HEADER: "old", "x-n": 1},  # type: ignore[dict-item]
        group="new",
        group_seq=-1,
        persistent=True,
        content_type="text/plain",
        receipt="r-1",
        transaction="t",
    )
    assert ev.body == b"text" and ev.receipt == "r-1" and ev.transaction == "t"
    assert ev.headers == {
        GROUP_HEADER: "new",
        "x-n": "1",
        GROUP_SEQ_HEADER: "-1",
        "persistent": "true",
        "content-type": "text/plain",
    }
    bare = send_frame(
        "/queue/q",
        b"",
        None,
        group=None,
        group_seq=None,
        persistent=None,
        content_type=None,
        receipt=None,
        transaction=None,
    )
    assert bare.headers == {}
    with pytest.raises(TypeError):
        send_frame(
            "/queue/q",
            3,
            None,
            group=None,
            group_seq=None,  # type: ignore[arg-type]
            persistent=None,
            content_type=None,
            receipt=None,
            transaction=None,
        )


def test_send_frame_encodes_on_a_stomp_12_connection():
    conn = StompConnection(Role.CLIENT)
    conn.send(connect_frame(parse_url("stomp://u:p@h:1?heartbeat=0,0")))
    conn.receive_data(b"CONNECTED\nversion:1.2\n\n\x00", 0.0)
    conn.next_event()
    data = conn.send(
        send_frame(
            "/queue/q",
            b"b",
            {"k": "a:b"},
            group="g",
            group_seq=None,
            persistent=None,
            content_type=None,
            receipt=None,
            transaction=None,
        )
    )
    assert data.startswith(b"SEND\n") and b"k:a\\cb\n" in data and b"JMSXGroupID:g\n" in data


def test_subscribe_frame_validates_ack_and_prefetch():
    ev = subscribe_frame("s1", "/queue/q", "client", 10, {"activemq.exclusive": "true"}, "r")
    assert ev.headers == {"activemq.exclusive": "true", "prefetch-count": "10"}
    assert ev.ack == "client" and ev.receipt == "r"
    with pytest.raises(ValueError, match="ack"):
        subscribe_frame("s1", "/queue/q", "sometimes", None, None, None)
    with pytest.raises(ValueError, match="prefetch"):
        subscribe_frame("s1", "/queue/q", "auto", -1, None, None)


def test_connect_frame_carries_credentials_heartbeat_vhost_and_client_id():
    ev = connect_frame(parse_url("stomp://u:p@h:1?heartbeat=100,200&host=v&clientId=c"))
    assert (ev.login, ev.passcode, ev.host, ev.heart_beat) == ("u", "p", "v", (100, 200))
    assert ev.headers == {"client-id": "c"}


def test_server_error_keeps_message_code_details_and_receipt():
    err = server_error(
        Error(
            "bad header",
            b"header 'JMSXGroupSeq' ...\n",
            "r-3",
            {"code": "bad-header", "message": "bad header"},
        )
    )
    assert isinstance(err, ServerError) and isinstance(err, BrokerError)
    assert err.message == "bad header" and err.code == "bad-header" and err.receipt_id == "r-3"
    assert err.details.startswith("header 'JMSXGroupSeq'") and "bad header" in str(err)
    assert err.http_status == 400
    assert server_error(Error("", b"first line\nsecond", None, {})).message == "first line"
    assert server_error(Error("m", b"", None, {"code": "weird"})).code == "internal"


class FakeClient:
    def __init__(self, url: str = "stomp://h:1") -> None:
        self.options = parse_url(url)
        self.sent: list[dict] = []

    def send(self, destination, body, **kw):
        self.sent.append({"destination": destination, "body": body, **kw})


def test_producers_follow_the_url_autogroup_each_with_its_own_id():
    c = FakeClient("stomp://h:1?autoGroup=true")
    a, b = Producer(c), Producer(c)
    assert a.group and b.group and a.group != b.group
    a.send("/queue/q", b"1")
    a.send("/queue/q", b"2")
    b.send("/queue/q", b"3")
    assert [(s["group"], s["group_seq"]) for s in c.sent] == [
        (a.group, 1),
        (a.group, 2),
        (b.group, 1),
    ]


def test_producers_follow_the_url_fixed_group():
    c = FakeClient("stomp://h:1?groupID=G")
    assert Producer(c).group == "G" and Producer(c).group == "G"
    assert Producer(c, group="H").group == "H"
    assert Producer(c, auto_group=False).group is None


def test_producer_without_group_sends_ungrouped_without_sequence():
    c = FakeClient()
    p = Producer(c, persistent=True, headers={"app": "x"})
    p.send("/queue/q", b"1", headers={"k": "v"})
    assert c.sent[0]["group"] is None and c.sent[0]["group_seq"] is None
    assert c.sent[0]["persistent"] is True and c.sent[0]["headers"] == {"app": "x", "k": "v"}
    with pytest.raises(ValueError):
        p.close_group("/queue/q")
    with pytest.raises(ValueError):
        Producer(c, group="g", auto_group=True)


def test_close_group_sends_minus_one_and_restarts_numbering():
    c = FakeClient()
    p = Producer(c, group="g")
    p.send("/queue/q", b"1")
    p.close_group("/queue/q", b"last")
    p.send("/queue/q", b"again")
    assert [s["group_seq"] for s in c.sent] == [1, -1, 1]
