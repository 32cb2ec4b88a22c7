"""The origin's end of a cluster link (LinkClient) over a real core and a
recording transport: SENDs go out in runs with one RECEIPT asked per run
(at most RECEIPT_EVERY SENDs apart), a RECEIPT acks every entry up to it,
and a dropped link sends the rest again, in order, marked resent."""

from __future__ import annotations

import asyncio
import itertools
import time
from types import SimpleNamespace

from shoal.broker.core import Broker
from shoal.broker.effects import Deliver
from shoal.broker.settings import AddressSettings
from shoal.cluster.grouping import ORIGIN_ID, ORIGIN_NODE, RESENT, ClusterGrouping
from shoal.protocol.stomp import NEED_DATA, Role, StompConnection
from shoal.protocol.stomp import frames as f
from shoal.server.cluster.link import RECEIPT_EVERY, LinkClient

FORWARD = "$cluster.forward.n2"


class Wire:
    """A transport that keeps what the link writes, parsed as the target would."""

    def __init__(self) -> None:
        self.target = StompConnection(Role.SERVER)
        self.frames: list[f.Event] = []
        self.closed = False

    def _feed(self, data: bytes) -> None:
        self.target.receive_data(data, time.time())
        while (event := self.target.next_event()) is not NEED_DATA:
            self.frames.append(event)

    def write(self, data: bytes) -> None:
        self._feed(data)

    def writelines(self, chunks: list[bytes]) -> None:
        self._feed(b"".join(chunks))

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def sends(self) -> list[f.Send]:
        return [e for e in self.frames if isinstance(e, f.Send)]


class Origin:
    """Node n1 with groups bound to n2 and its link to n2 (no sockets)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.broker = Broker(AddressSettings(), time.time())
        self.broker.cluster = ClusterGrouping("n1", 5000)
        self.broker.connect(1, time.time())
        ids = itertools.count(100)
        self.server = SimpleNamespace(
            loop=self.loop,
            broker=self.broker,
            redelivered_below=0,
            link_clients={},
            next_conn_id=lambda: next(ids),
            protocol_limits=None,
            schedule_flush=lambda: None,
            cluster=SimpleNamespace(link_up=lambda node: None),  # the ClusterNode
        )
        self.link = LinkClient(self.server, "test", "n1", "n2", ("127.0.0.1", 1))
        self.link.start = lambda: None  # type: ignore[method-assign]  # no reconnecting here
        self.sent = 0

    def close(self) -> None:
        self.loop.close()

    def send(self, count: int) -> None:
        b = self.broker
        for _ in range(count):
            group = f"g{self.sent % 3}"
            hold = b.send(1, "/queue/q", {"JMSXGroupID": group}, f"m{self.sent}".encode(), 0)
            if hold is not None:
                b.binding_decided("q", group, "n2", time.time())
            self.sent += 1
        self.pump()

    def pump(self) -> None:
        """What the server's flush and the loop do: deliveries to the link, then its write."""
        for e in self.broker.take_effects():
            if isinstance(e, Deliver) and e.conn_id == self.link.conn_id:
                self.link.forward(e)
        self.loop.run_until_complete(asyncio.sleep(0))

    def connect(self) -> Wire:
        wire = Wire()
        self.link.connection_made(wire)  # type: ignore[arg-type]
        wire.target.send(f.Connected(version="1.2"))  # moves the target's side to OPEN
        self.link.data_received(b"CONNECTED\nversion:1.2\nheart-beat:0,0\n\n\x00")
        self.pump()
        return wire

    def receipt(self, receipt_id: str) -> None:
        self.link.data_received(f"RECEIPT\nreceipt-id:{receipt_id}\n\n\x00".encode())
        self.pump()

    def unacked(self) -> int:
        return self.broker.queues[FORWARD].in_flight


def test_a_run_of_sends_asks_for_a_receipt_every_receipt_every_and_at_its_end():
    o = Origin()
    try:
        wire = o.connect()
        o.send(250)
        sends = wire.sends()
        assert [s.body for s in sends] == [f"m{i}".encode() for i in range(250)]
        assert [s.headers[ORIGIN_NODE] for s in sends] == ["n1"] * 250
        ids = [int(s.headers[ORIGIN_ID]) for s in sends]
        assert ids == sorted(ids)
        asked = [k for k, s in enumerate(sends) if s.receipt is not None]
        assert asked == [RECEIPT_EVERY - 1, 2 * RECEIPT_EVERY - 1, 249]
        assert all(RESENT not in s.headers for s in sends)
        assert o.link.sent == 250 and o.link.acked == 0

        # One RECEIPT acks every entry sent up to it.
        o.receipt(sends[2 * RECEIPT_EVERY - 1].receipt)  # type: ignore[arg-type]
        assert o.link.acked == 2 * RECEIPT_EVERY
        assert o.unacked() == 250 - 2 * RECEIPT_EVERY

        # The link drops before the last RECEIPT: the rest is sent again, in
        # order, marked resent (the target drops what it has already seen).
        o.link.closed = True  # no reconnect timer
        o.link.connection_lost(None)
        o.link.closed = False
        again = o.connect()
        resent = again.sends()
        assert [s.body for s in resent] == [f"m{i}".encode() for i in range(200, 250)]
        assert all(s.headers[RESENT] == "true" for s in resent)
        assert [k for k, s in enumerate(resent) if s.receipt is not None] == [49]
        o.receipt(resent[-1].receipt)  # type: ignore[arg-type]
        assert o.unacked() == 0 and o.broker.queues[FORWARD].depth == 0
    finally:
        o.close()
