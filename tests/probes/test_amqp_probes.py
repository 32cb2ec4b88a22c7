"""AMQP 1.0 probes against a real `shoal serve`: malformed frames and resource
exhaustion from raw sockets. Each ends with a STOMP client on another
connection still sending and receiving, and the broker's memory in bounds."""

from __future__ import annotations

import os
import struct

import pytest
import stomp
from proton import Described, Message, uint, ulong
from stomp.listener import TestListener as Received

from probes.wire import (
    ATTACH,
    DETACH,
    DISPOSITION,
    FLOW,
    TRANSFER,
    Bystander,
    RawAmqp,
    attach_sender,
    begin,
    error_conditions,
    frame,
    open_frame,
    rss_kib,
    transfer,
)
from support import wait_for

pytestmark = pytest.mark.e2e

MIB = 1024 * 1024
RESOURCE_LIMIT = "amqp:resource-limit-exceeded"


def limits(**values: int) -> str:
    return "[limits]\n" + "".join(f'"{k}" = {v}\n' for k, v in values.items())


def attached(client: RawAmqp, links: int = 1) -> None:
    """Wait for the broker's attach (and credit) on ``links`` producer links."""
    seen = 0
    while seen < links:
        for code, _ in client.until(FLOW):
            seen += code == FLOW


def grown_mib(pid: int, before_kib: int) -> float:
    return (rss_kib(pid) - before_kib) / 1024


def start(shoal_server, config: str | None = None, *, opened: bool = True):
    """A broker, its bystander, the broker's RSS now (KiB) and a raw AMQP client."""
    srv = shoal_server(config=config)
    bystander = Bystander(srv.stomp_port)
    before = rss_kib(srv.proc.pid)
    client = RawAmqp(srv.amqp_port)
    if opened:
        client.open()
    return srv, bystander, before, client


def test_a_transfer_past_the_size_limit_is_dropped_as_it_arrives(shoal_server):
    srv, bystander, before, client = start(shoal_server, config=limits(**{"max-frame-bytes": MIB}))
    client.send(attach_sender(0, 0, "big"))
    attached(client)
    chunk = os.urandom(1000 * 1000)
    for _ in range(80):  # 80 MB of one message, far past the 1 MiB limit
        client.send(transfer(0, 0, 0, chunk, more=True))
    seen = client.until(DETACH)
    assert "amqp:link:message-size-exceeded" in error_conditions(seen, DETACH)
    bystander.round_trip()
    assert grown_mib(srv.proc.pid, before) < 40  # the 80 MB were not kept
    client.send(attach_sender(0, 1, "after"))  # the connection goes on
    attached(client)
    client.close()
    bystander.close()


def test_transfers_arriving_at_once_are_bounded_per_connection(shoal_server):
    srv, bystander, before, client = start(
        shoal_server, config=limits(**{"max-amqp-partial-bytes-per-connection": 4 * MIB})
    )
    client.send(b"".join(attach_sender(0, h, f"part{h}") for h in range(20)))
    attached(client, 20)
    chunk = os.urandom(900 * 1000)
    for _ in range(4):  # 20 links with 3.6 MB each under way: 72 MB
        for handle in range(20):
            try:
                client.send(transfer(0, handle, handle, chunk, more=True))
            except OSError:
                break  # closed, as it should be
    assert client.close_condition() == RESOURCE_LIMIT
    bystander.round_trip()
    assert grown_mib(srv.proc.pid, before) < 40
    bystander.close()


@pytest.mark.parametrize(
    ("limit", "frames"),
    [
        ("max-amqp-sessions-per-connection", lambda n: [begin(c) for c in range(1, n + 1)]),
        (
            "max-amqp-links-per-connection",
            lambda n: [attach_sender(0, h, f"l{h}") for h in range(n + 1)],
        ),
    ],
)
def test_sessions_and_links_are_bounded_per_connection(shoal_server, limit, frames):
    srv, bystander, _, client = start(shoal_server, config=limits(**{limit: 8}))
    client.send(b"".join(frames(8)))
    assert client.close_condition() == RESOURCE_LIMIT
    bystander.round_trip()
    bystander.close()


def test_many_sessions_are_refused_without_growing_the_broker(shoal_server):
    srv, bystander, before, client = start(shoal_server, opened=False)
    client.send(open_frame() + b"".join(begin(c) for c in range(32767)))
    assert client.close_condition() == RESOURCE_LIMIT
    bystander.round_trip()
    assert grown_mib(srv.proc.pid, before) < 40
    bystander.close()


def test_a_client_that_never_reads_cannot_grow_the_write_buffer(shoal_server):
    """Attach and detach in a loop, reading nothing: each pair has the broker
    answer with two frames. Past its write buffer's high-water mark (1 MiB)
    the broker stops reading the connection until the client reads, as it
    does for WebSocket clients; its memory stays bounded meanwhile."""
    srv, bystander, before, client = start(shoal_server)
    client.sock.settimeout(5.0)
    pair = attach_sender(0, 0, "loop") + frame(0, DETACH, [uint(0), True])
    burst = pair * 2000
    sent = 0
    stopped = False
    while sent < 200 * MIB:
        try:
            client.send(burst)
        except TimeoutError:  # the broker stopped reading
            stopped = True
            break
        sent += len(burst)
    assert stopped, f"the broker read {sent} bytes from a client that never reads"
    bystander.round_trip()
    assert grown_mib(srv.proc.pid, before) < 40  # links the peer detached are freed too
    client.sock.settimeout(10.0)
    assert client.next_performative() is not None  # reading again lets it go on
    client.close()
    bystander.close()


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param(bytes(range(256)) * 4, id="random-bytes"),
        pytest.param(b"\x00\x53\x75\xb0\xff\xff\xff\xff" + b"x" * 100, id="data-claims-4GiB"),
        pytest.param(b"", id="empty"),
    ],
)
def test_an_undecodable_message_is_rejected_and_not_stored(shoal_server, payload):
    srv, bystander, _, client = start(shoal_server)
    client.send(attach_sender(0, 0, "undecodable"))
    attached(client)
    client.send(transfer(0, 0, 0, payload, more=False))
    seen = client.until(DISPOSITION)
    assert error_conditions(seen, DISPOSITION) == ["amqp:decode-error"]
    # Nothing was stored: the queue's first message is the next good one.
    good = Message(body=b"good").encode()
    client.send(transfer(0, 0, 1, bytes(good), more=False))
    client.until(DISPOSITION)
    consumer = stomp.Connection12([("127.0.0.1", srv.stomp_port)])
    got = Received()
    consumer.set_listener("c", got)
    consumer.connect(wait=True)
    consumer.subscribe("/queue/undecodable", id="c1", ack="auto")
    wait_for(lambda: got.message_list)
    assert [body for _, body in got.message_list] == ["good"]
    consumer.disconnect()
    bystander.round_trip()
    client.close()
    bystander.close()


def test_a_long_address_is_refused_as_on_stomp(shoal_server):
    srv, bystander, before, client = start(shoal_server)
    client.send(b"".join(attach_sender(0, h, f"{h}" + "a" * 500_000) for h in range(20)))
    seen = client.until(DETACH, count=20)
    assert error_conditions(seen, DETACH) == [RESOURCE_LIMIT] * 20
    assert grown_mib(srv.proc.pid, before) < 40
    # The anonymous relay: a message whose own address is too long is rejected.
    client.send(attach_sender(0, 20, None))
    attached(client)
    client.send(transfer(0, 20, 0, bytes(Message(address="b" * 2000).encode()), more=False))
    seen = client.until(DISPOSITION)
    assert error_conditions(seen, DISPOSITION) == [RESOURCE_LIMIT]
    bystander.round_trip()
    client.close()
    bystander.close()


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param(frame(0, 0x7F, ["what"]), id="unknown-performative"),
        pytest.param(struct.pack(">IBBH", 20, 2, 0, 0) + b"\xff" * 12, id="garbage-body"),
        pytest.param(struct.pack(">IBBH", 2**32 - 1, 2, 0, 0), id="frame-claims-4GiB"),
    ],
)
def test_a_malformed_frame_gets_a_close_naming_it(shoal_server, bad):
    srv, bystander, _, client = start(shoal_server)
    client.send(bad)
    assert client.close_condition() in ("amqp:decode-error", "amqp:connection:framing-error")
    bystander.round_trip()
    bystander.close()


def test_an_attach_whose_name_is_not_a_string_is_refused(shoal_server):
    srv, bystander, _, client = start(shoal_server)
    client.send(frame(0, ATTACH, [42, uint(0), False]))  # was taken as a producer link
    assert client.close_condition() == "amqp:invalid-field"
    bystander.round_trip()
    bystander.close()


def test_credit_past_two_to_the_31_still_delivers(shoal_server):
    srv = shoal_server()
    bystander = Bystander(srv.stomp_port)
    producer = stomp.Connection12([("127.0.0.1", srv.stomp_port)])
    producer.connect(wait=True)
    producer.send("/queue/credit", "hello", headers={"receipt": "r"})
    client = RawAmqp(srv.amqp_port)
    client.open()
    client.send(
        frame(
            0,
            ATTACH,
            [
                "recv",
                uint(0),
                True,
                None,
                None,
                Described(ulong(0x28), ["credit"]),
                Described(ulong(0x29), []),
            ],
        )
    )
    client.until(ATTACH)
    # flow: next-incoming-id, incoming-window, next-outgoing-id, outgoing-window,
    # handle, delivery-count, link-credit
    client.send(
        frame(
            0,
            FLOW,
            [uint(0), uint(2**31 - 1), uint(0), uint(2**31 - 1), uint(0), uint(0), uint(2**32 - 1)],
        )
    )
    seen = client.until(TRANSFER)
    assert [code for code, _ in seen if code == TRANSFER]
    producer.disconnect()
    bystander.round_trip()
    client.close()
    bystander.close()
