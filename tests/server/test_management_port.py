"""ServerPort, the server's side of the management port, on a socketless
server (fakes.py): its snapshots and the close command its flush carries out."""

from __future__ import annotations

import asyncio
import time

import pytest
from fakes import SessionHarness, frame

from shoal.management.broker_port import SessionView
from shoal.server.management_port import ServerPort


@pytest.fixture
def h():
    loop = asyncio.new_event_loop()
    harness = SessionHarness(loop)
    yield harness
    harness.close()
    loop.close()


def test_close_connection_is_carried_out_by_the_flush(h):
    session, transport = h.connect()
    session.data_received(frame("SUBSCRIBE", {"id": "a", "destination": "/queue/q"}))
    h.settle()
    transport.frames()
    port = ServerPort(h.server)
    port.close_connection(session.conn_id, "closed by an operator", time.time())
    assert not transport.closed and not session.closing  # nothing happens inside the command
    h.settle()
    [error] = transport.frames()
    assert error.command == "ERROR" and error.headers["message"] == "closed by an operator"
    assert transport.closed


def test_sessions_are_snapshots(h):
    session, _ = h.connect()
    port = ServerPort(h.server)
    view = port.sessions()[session.conn_id]
    assert isinstance(view, SessionView)
    assert (view.peer, view.protocol, view.frames_in) == ("127.0.0.1:50001", "stomp", 1)
    session.data_received(frame("SEND", {"destination": "/queue/q"}, b"x"))
    assert view.frames_in == 1  # taken when asked, not a window onto the session
    assert port.sessions()[session.conn_id].frames_in == 2
