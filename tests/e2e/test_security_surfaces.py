"""Bad input and unauthorised requests on the newer surfaces (AMQP, WebSocket,
selectors, the sink API, destination parameters, the HTTP guard), against a
real `shoal serve`: a clear error, the broker unharmed, other clients unaffected."""

from __future__ import annotations

import base64
import contextlib
import socket

import pytest
import stomp
import websocket
from proton.utils import BlockingConnection, LinkDetached

from support import RawStomp, free_port, http_json, wait_for

pytestmark = pytest.mark.e2e


# --- graceful shutdown with every protocol connected ---------------------------------


def _stomp_conn(port: int) -> stomp.Connection12:
    conn = stomp.Connection12([("127.0.0.1", port)])
    conn.connect(wait=True)
    return conn


@contextlib.contextmanager
def _connected(protocol: str, srv, ws_port: int):
    """One idle client of ``protocol``, consuming an empty queue."""
    if protocol == "stomp":
        conn = _stomp_conn(srv.stomp_port)
        conn.subscribe("/queue/idle", id="1", ack="client-individual")
        yield
        with contextlib.suppress(Exception):
            conn.disconnect()
    elif protocol == "amqp":
        amqp = BlockingConnection(f"amqp://127.0.0.1:{srv.amqp_port}", timeout=10)
        amqp.create_receiver("idle", credit=10)
        yield
        with contextlib.suppress(Exception):
            amqp.close()
    else:
        ws = websocket.create_connection(
            f"ws://127.0.0.1:{ws_port}/", subprotocols=["v12.stomp"], timeout=10
        )
        ws.send("CONNECT\naccept-version:1.2\nhost:/\n\n\x00")
        assert ws.recv().startswith("CONNECTED")
        ws.send("SUBSCRIBE\nid:1\ndestination:/queue/idle\n\n\x00")
        yield
        with contextlib.suppress(Exception):
            ws.close()


@pytest.mark.parametrize("protocol", ["stomp", "amqp", "ws"])
def test_shutdown_with_a_client_connected_is_clean(shoal_server, protocol):
    """SIGTERM with a client of any protocol connected exits 0 after the
    journal drain, so the queued messages come back after the restart as
    never delivered."""
    ws_port = free_port()
    srv = shoal_server(args=["--ws", f"127.0.0.1:{ws_port}"])
    producer = _stomp_conn(srv.stomp_port)
    for i in range(3):
        producer.send("/queue/kept", f"m{i}", headers={"persistent": "true", "receipt": f"r{i}"})
    producer.disconnect(receipt="bye")
    with _connected(protocol, srv, ws_port):
        assert srv.stop() == 0
    assert "Traceback" not in srv.log_text()
    srv.start()
    raw = RawStomp(srv.stomp_port)
    assert raw.connect()[0] == "CONNECTED"
    raw.frame("SUBSCRIBE", {"id": "1", "destination": "/queue/kept"})
    got = [raw.read_frame() for _ in range(3)]
    assert [body for _, _, body in got] == [b"m0", b"m1", b"m2"]
    assert all("redelivered" not in headers for _, headers, _ in got)
    raw.close()


# --- selectors cannot stall the broker -------------------------------------------------


def test_a_like_selector_cannot_stall_the_broker(shoal_server):
    """``%a%a...%b`` against a long run of 'a' used to backtrack for minutes on
    the event loop; now the message is judged at once and everyone else is
    served as usual."""
    srv = shoal_server(data=None)
    consumer = RawStomp(srv.stomp_port)
    consumer.connect()
    consumer.frame(
        "SUBSCRIBE",
        {
            "id": "1",
            "destination": "/queue/picky",
            "selector": "x LIKE '%a%a%a%a%a%a%a%a%b'",
            "receipt": "sub",
        },
    )
    assert consumer.read_frame()[1]["receipt-id"] == "sub"
    producer = RawStomp(srv.stomp_port)
    producer.connect()
    producer.frame("SEND", {"destination": "/queue/picky", "x": "a" * 64, "receipt": "evil"})
    producer.frame("SEND", {"destination": "/queue/picky", "x": "a" * 64 + "b"}, b"fits")
    assert producer.read_frame()[1]["receipt-id"] == "evil"
    other = RawStomp(srv.stomp_port)  # another client, another queue: served at once
    assert other.connect()[0] == "CONNECTED"
    other.frame("SEND", {"destination": "/queue/plain", "receipt": "r"}, b"hello")
    assert other.read_frame()[1]["receipt-id"] == "r"
    command, _, body = consumer.read_frame()
    assert (command, body) == ("MESSAGE", b"fits")
    for peer in (consumer, producer, other):
        peer.close()


def test_selectors_past_their_limits_get_an_error(shoal_server):
    srv = shoal_server(data=None)
    for selector, reason in [
        ("(" * 2000 + "a = 1" + ")" * 2000, "nested deeper than 64"),
        ("x LIKE '" + "a%" * 200 + "'", "LIKE patterns longer than 256"),
    ]:
        raw = RawStomp(srv.stomp_port)
        raw.connect()
        raw.frame("SUBSCRIBE", {"id": "1", "destination": "/queue/q", "selector": selector})
        command, headers, _ = raw.read_frame()
        assert command == "ERROR" and reason in headers["message"], headers
        raw.close()


# --- the sink API ------------------------------------------------------------------


def _users_config(tmp_path, *, throttle: int = 100) -> str:
    """alice may send and consume on orders.#, eve on eve.#; reader only browses."""
    from shoal.security import add_user

    users = tmp_path / "users.json"
    add_user(users, "alice", "pw", ["app"])
    add_user(users, "eve", "pw", ["other"])
    add_user(users, "reader", "pw", ["ro"])
    return (
        f'[broker]\nusers-file = "{users}"\n'
        f"[limits]\nmax-auth-failures-per-minute = {throttle}\n"
        '[[permissions]]\nmatch = "orders.#"\nsend = ["app"]\nconsume = ["app"]\n'
        'create = ["app"]\n'
        '[[permissions]]\nmatch = "eve.#"\nsend = ["other"]\nconsume = ["other"]\n'
        'create = ["other"]\n'
        '[[permissions]]\nmatch = "#"\nbrowse = ["ro", "app", "other"]\n'
    )


def _as(user: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:pw".encode()).decode()}


def _arrow(bodies: list[bytes]) -> bytes:
    import pyarrow as pa

    table = pa.table({"body": pa.array(bodies, pa.binary())})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def _stage(srv, user: str, destination: str, handle: str, bodies: list[bytes]) -> int:
    status, _ = http_json(
        f"{srv.http_url}/api/sinks/stage?destination={destination}&handle={handle}",
        "POST",
        _arrow(bodies),
        headers={**_as(user), "Content-Type": "application/vnd.apache.arrow.stream"},
    )
    return status


def _publish(srv, user: str, sink_id: str, batch_id: int, handles: list[str]):
    body = {"sink_id": sink_id, "batch_id": batch_id, "handles": handles}
    return http_json(f"{srv.http_url}/api/sinks/publish", "POST", body, headers=_as(user))


def test_the_sink_api_keeps_users_apart(shoal_server, tmp_path):
    srv = shoal_server(config=_users_config(tmp_path))
    # A user who may send nowhere may neither publish nor abort.
    assert _publish(srv, "reader", "job", 10**15, [])[0] == 403
    status, _ = http_json(
        f"{srv.http_url}/api/sinks/abort", "POST", {"handles": ["h1"]}, headers=_as("reader")
    )
    assert status == 403
    # Staging checks send on the destination.
    assert _stage(srv, "eve", "/queue/orders.eu", "h1", [b"x"]) == 403
    # eve's ids are her own: her huge batch id, her abort and her staging
    # under alice's names touch nothing of alice's sink.
    assert _stage(srv, "alice", "/queue/orders.eu", "h1", [b"o1", b"o2"]) == 200
    assert _publish(srv, "eve", "job", 10**15, [])[0] == 200
    status, out = http_json(
        f"{srv.http_url}/api/sinks/abort", "POST", {"handles": ["h1"]}, headers=_as("eve")
    )
    assert (status, out["discarded"]) == (200, 0)
    assert _stage(srv, "eve", "/queue/eve.x", "h1", [b"eve's"]) == 200
    status, out = _publish(srv, "alice", "job", 1, ["h1"])
    assert (status, out["status"], out["rows"]) == (200, "published", 2)
    assert _publish(srv, "alice", "job", 1, [])[1]["status"] == "duplicate"
    consumer = RawStomp(srv.stomp_port)
    assert consumer.connect(login="alice", passcode="pw")[0] == "CONNECTED"
    consumer.frame("SUBSCRIBE", {"id": "1", "destination": "/queue/orders.eu"})
    assert [consumer.read_frame()[2] for _ in range(2)] == [b"o1", b"o2"]
    consumer.close()


def test_the_sink_api_cannot_reach_the_cluster_watermarks(shoal_server, tmp_path):
    """The cluster keeps its dedup watermarks (``$cluster.origin.<node>.<epoch>``)
    in the sink's table: no sink id may name one, with or without users."""
    for config in (None, _users_config(tmp_path)):
        srv = shoal_server(config=config)
        status, out = _publish(srv, "alice", "$cluster.origin.n1.1700000000", 10**15, [])
        assert status == 400 and "reserved" in out["message"]
        srv.stop()


# --- destination parameters and the create permission --------------------------------


def _acl_config(tmp_path) -> str:
    """bob may send and consume on A only; carol may also create A and send to B."""
    from shoal.security import add_user

    users = tmp_path / "acl-users.json"
    add_user(users, "bob", "pw", ["a-user"])
    add_user(users, "carol", "pw", ["a-user", "a-owner"])
    return (
        f'[broker]\nusers-file = "{users}"\n'
        '[[permissions]]\nmatch = "A"\nsend = ["a-user"]\nconsume = ["a-user"]\n'
        'create = ["a-owner"]\nmanage = ["a-owner"]\n'
        '[[permissions]]\nmatch = "B"\nsend = ["a-owner"]\nconsume = ["a-owner"]\n'
        '[[permissions]]\nmatch = "C"\nsend = ["nobody"]\n'
    )


def _subscribe(srv, user: str, destination: str) -> tuple[RawStomp, str, dict[str, str]]:
    raw = RawStomp(srv.stomp_port)
    assert raw.connect(login=user, passcode="pw")[0] == "CONNECTED"
    raw.frame(
        "SUBSCRIBE",
        {"id": "1", "destination": destination, "ack": "client-individual", "receipt": "sub"},
    )
    command, headers, _ = raw.read_frame()
    return raw, command, headers


def test_destination_parameters_need_create_and_the_named_address(shoal_server, tmp_path):
    srv = shoal_server(config=_acl_config(tmp_path))
    other = RawStomp(srv.stomp_port)  # another client, on A all along
    assert other.connect(login="bob", passcode="pw")[0] == "CONNECTED"
    # Settings from a client need create on the queue...
    raw, command, headers = _subscribe(
        srv, "bob", "/queue/A?dead-letter-address=B&max-delivery-attempts=1"
    )
    assert command == "ERROR" and "may not create on 'A'" in headers["message"]
    raw.close()
    # ...over AMQP too (the link is refused)...
    amqp = BlockingConnection(
        f"amqp://127.0.0.1:{srv.amqp_port}", user="bob", password="pw", timeout=10
    )
    with pytest.raises(LinkDetached, match="may not create"):
        amqp.create_receiver("A?dead-letter-address=B&max-delivery-attempts=1")
    amqp.close()
    # ...and one that names another address needs send there.
    raw, command, headers = _subscribe(srv, "carol", "/queue/A?dead-letter-address=C")
    assert command == "ERROR" and "may not send to 'C'" in headers["message"]
    raw.close()
    # So does a queue created through the API.
    status, out = http_json(
        f"{srv.http_url}/api/queues",
        "POST",
        {"name": "A", "settings": {"expiry-address": "C"}},
        headers=_as("carol"),
    )
    assert status == 403 and "may not send to 'C'" in out["message"]
    other.frame("SEND", {"destination": "/queue/A", "receipt": "r"}, b"still fine")
    assert other.read_frame()[1]["receipt-id"] == "r"
    # Allowed both, carol sets them: the message she NACKs goes to B.
    owner, command, _ = _subscribe(
        srv, "carol", "/queue/A?dead-letter-address=B&max-delivery-attempts=1"
    )
    assert command == "RECEIPT"
    _, headers, body = owner.read_frame()
    assert body == b"still fine"
    owner.frame("NACK", {"id": headers["ack"]})
    owner.frame("SUBSCRIBE", {"id": "2", "destination": "/queue/B"})
    assert owner.read_frame()[2] == b"still fine"
    for peer in (owner, other):
        peer.close()


# --- the HTTP guard ----------------------------------------------------------------


def test_health_answers_probes_whatever_their_credentials(shoal_server, tmp_path):
    """/health needs no credentials: ones a probe sends anyway are not
    checked, so neither wrong ones nor the failed-login throttle turn it 401."""
    srv = shoal_server(config=_users_config(tmp_path, throttle=2))
    bad = {"Authorization": "Basic " + base64.b64encode(b"alice:wrong").decode()}
    for _ in range(3):  # trips the throttle for this address
        assert http_json(f"{srv.http_url}/api/broker", headers=bad)[0] == 401
    assert http_json(f"{srv.http_url}/api/broker", headers=_as("alice"))[0] == 401
    for headers in ({}, bad, _as("alice")):
        status, body = http_json(f"{srv.http_url}/health", headers=headers)
        assert (status, body["status"]) == (200, "ok")


# --- each listener has its own pool of unauthenticated connections --------------------


def _refused_at_once(port: int) -> bool:
    """A fresh socket to ``port`` is closed by the broker before it says anything."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        try:
            return sock.recv(1) == b""
        except TimeoutError:
            return False


def test_idle_sockets_on_one_listener_do_not_lock_out_another(shoal_server):
    srv = shoal_server(data=None, config="[limits]\nmax-unauthenticated-connections = 3\n")
    idle = [socket.create_connection(("127.0.0.1", srv.amqp_port)) for _ in range(3)]
    try:
        wait_for(lambda: _refused_at_once(srv.amqp_port))  # the AMQP pool is full...
        for _ in range(3):  # ...and STOMP's is its own
            client = RawStomp(srv.stomp_port)
            assert client.connect()[0] == "CONNECTED"
            client.close()
        strangers = [RawStomp(srv.stomp_port) for _ in range(3)]
        extra = RawStomp(srv.stomp_port)  # STOMP's own cap still holds
        command, headers, _ = extra.read_frame()
        assert command == "ERROR" and "max-unauthenticated-connections" in headers["message"]
        for peer in (*strangers, extra):
            peer.close()
    finally:
        for sock in idle:
            sock.close()
