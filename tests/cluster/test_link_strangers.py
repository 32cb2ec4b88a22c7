"""The cluster link's port has its own pool of unauthenticated connections."""

from __future__ import annotations

import socket

import pytest
from tests.support import RawStomp

pytestmark = pytest.mark.cluster


def test_idle_sockets_on_the_link_port_do_not_lock_out_clients(cluster):
    (node,) = cluster.start(1, cluster="[limits]\nmax-unauthenticated-connections = 3\n")
    link_port = node.ports["link"]
    idle = [socket.create_connection(("127.0.0.1", link_port)) for _ in range(3)]
    try:
        extra = RawStomp(link_port)  # the link's pool is full...
        command, headers, _ = extra.read_frame()
        assert command == "ERROR" and "max-unauthenticated-connections" in headers["message"]
        extra.close()
        client = RawStomp(node.stomp_port)  # ...and the clients' port is not
        assert client.connect()[0] == "CONNECTED"
        client.frame("SEND", {"destination": "/queue/q", "receipt": "r"}, b"x")
        assert client.read_frame()[1]["receipt-id"] == "r"
        client.close()
    finally:
        for sock in idle:
            sock.close()
