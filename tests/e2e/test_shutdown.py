"""Stopping a broker with clients still connected, on both builds."""

from __future__ import annotations

import pytest
from proton import Message
from proton.utils import BlockingConnection

from support import BUILDS, RawStomp

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("build", BUILDS)
def test_sigterm_with_stomp_and_amqp_clients_connected_exits_cleanly(shoal_server, build):
    """Every session is told and closed; the broker exits 0 with nothing in
    its log but the notices (strict: a traceback fails the test)."""
    server = shoal_server(build=build)
    stomp = RawStomp(server.stomp_port)
    amqp = BlockingConnection(f"amqp://127.0.0.1:{server.amqp_port}", timeout=10)
    try:
        assert stomp.connect()[0] == "CONNECTED"
        stomp.frame("SUBSCRIBE", {"destination": "/queue/open", "id": "1", "ack": "auto"})
        amqp.create_sender("open").send(Message(body="kept", durable=True))
        receiver = amqp.create_receiver("open-amqp", credit=1)
        assert receiver is not None
        assert server.stop() == 0
        assert stomp.closed_by_peer()
    finally:
        stomp.close()
        try:
            amqp.close()
        except Exception:
            pass
