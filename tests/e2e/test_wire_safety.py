"""Wire safety end to end: frame injection through a NUL, a message a STOMP
1.0 consumer cannot carry as it is, and receipt-id on protocol errors."""

from __future__ import annotations

import pytest
import stomp
from stomp.listener import TestListener as Received

from support import RawStomp, wait_for

pytestmark = pytest.mark.e2e


def consumer(
    port: int, destination: str, conn_cls=stomp.Connection12
) -> tuple[stomp.Connection, Received]:
    conn = conn_cls([("127.0.0.1", port)])
    got = Received(receipt="subscribed")
    conn.set_listener("c", got)
    conn.connect(wait=True)
    conn.subscribe(destination, id="s1", ack="auto", headers={"receipt": "subscribed"})
    got.wait_on_receipt()
    return conn, got


def test_nul_in_a_header_cannot_forge_a_frame(shoal_server):
    srv = shoal_server()
    conn, got = consumer(srv.stomp_port, "/queue/victim")
    attacker = RawStomp(srv.stomp_port)
    attacker.connect()
    attacker.send(
        b"SEND\ndestination:/queue/victim\nreceipt:r-9\nx:a\x00MESSAGE\n"
        b"destination:/queue/victim\nmessage-id:forged\nsubscription:s1\nforged:yes\n\nevil\x00"
    )
    cmd, headers, _ = attacker.read_frame()
    assert cmd == "ERROR"
    assert "NUL" in headers["message"] and "'x'" in headers["message"]
    assert headers["receipt-id"] == "r-9"
    assert attacker.closed_by_peer()
    # A later, honest message arrives, and it is the only one.
    honest = RawStomp(srv.stomp_port)
    honest.connect()
    honest.frame("SEND", {"destination": "/queue/victim", "receipt": "r-1"}, b"honest")
    assert honest.read_frame()[0] == "RECEIPT"
    wait_for(lambda: got.message_list)
    conn.disconnect()
    assert [body for _, body in got.message_list] == ["honest"]
    assert all("forged" not in h for h, _ in got.message_list) and not got.errors
    honest.close()


def test_a_1_0_consumer_and_a_1_2_consumer_both_get_their_messages(shoal_server):
    srv = shoal_server()
    old, old_got = consumer(srv.stomp_port, "/queue/wire.v10", stomp.Connection10)
    new, new_got = consumer(srv.stomp_port, "/queue/wire.v12")
    producer = RawStomp(srv.stomp_port)
    producer.connect()
    # Both in one write, so both deliveries are encoded in the same flush;
    # the first holds an escaped newline, which STOMP 1.0 cannot carry.
    producer.send(
        b"SEND\ndestination:/queue/wire.v10\nmulti:line\\nbreak\nkeep:yes\n\nfor 1.0\x00"
        b"SEND\ndestination:/queue/wire.v12\nmulti:line\\nbreak\n\nfor 1.2\x00"
        b"SEND\ndestination:/queue/wire.sync\nreceipt:r-2\n\n\x00"
    )
    assert producer.read_frame()[0] == "RECEIPT"
    wait_for(lambda: new_got.message_list and old_got.message_list)
    ((h12, body12),) = new_got.message_list
    assert body12 == "for 1.2" and h12["multi"] == "line\nbreak"
    ((h10, body10),) = old_got.message_list
    assert body10 == "for 1.0" and h10["keep"] == "yes"
    assert "multi" not in h10
    assert h10["x-shoal-dropped-headers"] == "multi"
    assert not old_got.errors and not new_got.errors
    old.disconnect()
    new.disconnect()
    producer.close()
    assert "without headers STOMP 1.0 cannot carry: 'multi'" in srv.log_text()


@pytest.mark.parametrize(
    "frame",
    [
        b"SEND\nreceipt:r-7\n\nno destination\x00",
        b"FROB\nreceipt:r-7\n\n\x00",
        b"SUBSCRIBE\nreceipt:r-7\ndestination:/queue/a\n\n\x00",
        b"SUBSCRIBE\nreceipt:r-7\nid:s\ndestination:/queue/a\nack:sometimes\n\n\x00",
    ],
    ids=["send-no-destination", "unknown-command", "subscribe-no-id", "subscribe-bad-ack"],
)
def test_protocol_errors_answer_with_the_receipt_id(shoal_server, frame):
    srv = shoal_server(data=None)
    raw = RawStomp(srv.stomp_port)
    raw.connect()
    raw.send(frame)
    cmd, headers, _ = raw.read_frame()
    assert cmd == "ERROR" and headers["receipt-id"] == "r-7"
    assert raw.closed_by_peer()
