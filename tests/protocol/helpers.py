"""Test helpers for the STOMP layer: a client and a server joined in memory."""

from __future__ import annotations

from shoal.protocol.stomp import (
    NEED_DATA,
    Connect,
    Connected,
    ConnectionState,
    Event,
    Limits,
    Role,
    StompConnection,
)


def drain(conn: StompConnection) -> list[Event]:
    """Every event ``conn`` can produce from what it has buffered."""
    events: list[Event] = []
    while True:
        event = conn.next_event()
        if event is NEED_DATA:
            return events
        assert isinstance(event, Event)
        events.append(event)
        if conn.state is ConnectionState.CLOSED:
            return events


def receive_all(conn: StompConnection, data: bytes, now: float = 0.0) -> list[Event]:
    conn.receive_data(data, now)
    return drain(conn)


class ConnectionPair:
    """A CLIENT and a SERVER connection, wired back to back.

    ``send(role, event)`` encodes ``event`` on that side, feeds the bytes to
    the other side and returns the events the other side now produces. The
    bytes of every exchange are kept in ``wire`` for assertions.
    """

    def __init__(self, limits: Limits | None = None) -> None:
        self.client = StompConnection(Role.CLIENT, limits=limits)
        self.server = StompConnection(Role.SERVER, limits=limits)
        self.now = 0.0
        self.wire: list[tuple[Role, bytes]] = []

    def conn(self, role: Role) -> StompConnection:
        return self.client if role is Role.CLIENT else self.server

    def peer(self, role: Role) -> StompConnection:
        return self.server if role is Role.CLIENT else self.client

    def send(self, role: Role, event: Event) -> list[Event]:
        data = self.conn(role).send(event)
        self.wire.append((role, data))
        return receive_all(self.peer(role), data, self.now)

    def connect(
        self,
        accept_version: str | None = "1.0,1.1,1.2",
        *,
        client_heart_beat: tuple[int, int] = (0, 0),
        server_heart_beat: tuple[int, int] = (0, 0),
    ) -> Connected:
        """CONNECT + CONNECTED; returns the Connected the client received."""
        got = self.send(
            Role.CLIENT,
            Connect(accept_version=accept_version, host="localhost", heart_beat=client_heart_beat),
        )
        assert len(got) == 1 and isinstance(got[0], Connect)
        (connected,) = self.send(
            Role.SERVER, Connected(server="shoal/test", session="s-1", heart_beat=server_heart_beat)
        )
        assert isinstance(connected, Connected)
        assert self.client.version == self.server.version
        return connected


def open_pair(version: str = "1.2", limits: Limits | None = None) -> ConnectionPair:
    """A pair already connected with ``version``."""
    pair = ConnectionPair(limits)
    pair.connect(None if version == "1.0" else version)
    assert pair.server.version == version
    return pair


def open_conn(role: Role, version: str = "1.2", limits: Limits | None = None) -> StompConnection:
    """One side of a pair already connected with ``version``."""
    return open_pair(version, limits).conn(role)
