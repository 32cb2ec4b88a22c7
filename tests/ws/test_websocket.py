"""STOMP over WebSocket end to end: @stomp/stompjs under node, stomp.py's
WebSocket transport and a raw WebSocket client against a real `shoal serve`."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
from collections import defaultdict
from pathlib import Path

import pytest
import stomp
import websocket
from stomp.adapter.ws import WSStompConnection

from skips import needs_tools, skip_missing
from support import RawStomp, free_port, parse_frame, self_signed_cert, wait_for

pytestmark = pytest.mark.e2e

HERE = Path(__file__).resolve().parent
SUBPROTOCOLS = ["v12.stomp", "v11.stomp", "v10.stomp"]


@pytest.fixture
def broker(shoal_server):
    """A broker with a WebSocket listener; returns (process, ws port)."""

    def start(config: str | None = None):
        port = free_port()
        proc = shoal_server(data=None, config=config, args=["--ws", f"127.0.0.1:{port}"])
        return proc, port

    return start


def grouped(n_groups: int, per_group: int) -> list[tuple[str, int]]:
    """(group, seq) in an interleaved send order."""
    return [(f"g{g}", seq) for seq in range(per_group) for g in range(n_groups)]


def send_over_tcp(port: int, queue: str, messages: list[tuple[str, int]]) -> None:
    conn = stomp.Connection12([("127.0.0.1", port)])
    conn.connect(wait=True)
    for i, (group, seq) in enumerate(messages):
        receipt = f"r{i}" if i == len(messages) - 1 else None
        headers = {"JMSXGroupID": group}
        if receipt:
            headers["receipt"] = receipt
        conn.send(f"/queue/{queue}", str(seq), headers=headers)
    conn.disconnect(receipt="bye")


def assert_groups_in_order_one_consumer_each(received: list[dict], messages) -> None:
    by_group: dict[str, list[int]] = defaultdict(list)
    owners: dict[str, set[int]] = defaultdict(set)
    for r in received:
        by_group[r["group"]].append(r["seq"])
        owners[r["group"]].add(r["consumer"])
    expected: dict[str, list[int]] = defaultdict(list)
    for group, seq in messages:
        expected[group].append(seq)
    assert dict(by_group) == dict(expected)  # every message once, each group in order
    assert all(len(o) == 1 for o in owners.values()), owners
    assert {c for o in owners.values() for c in o} == {0, 1}  # both consumers had groups


# --- @stomp/stompjs under node ------------------------------------------------


def test_stompjs_consumers_get_whole_groups_in_order(broker) -> None:
    if shutil.which("node") is None:
        skip_missing("node")
    if not (HERE / "node_modules" / "@stomp" / "stompjs").is_dir():
        skip_missing("tests/ws/node_modules", "make tests/ws/node_modules")
    proc, ws_port = broker("[broker]\nheartbeat = [200, 200]\n")
    messages = grouped(12, 15)
    node = subprocess.Popen(
        [
            "node",
            str(HERE / "group_consumers.mjs"),
            f"ws://127.0.0.1:{ws_port}/stomp",
            "orders",
            str(len(messages)),
        ],
        cwd=HERE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert node.stdout is not None
        assert node.stdout.readline().strip() == "ready", node.stderr.read() if node.stderr else ""
        send_over_tcp(proc.stomp_port, "orders", messages)
        out, err = node.communicate(timeout=60)
    finally:
        if node.poll() is None:
            node.kill()
            node.wait()
    assert node.returncode == 0, err
    report = json.loads(out.strip().splitlines()[-1])
    assert report["errors"] == []
    assert report["closes"] == 0  # neither side gave up on heart-beats
    assert all(n > 0 for n in report["pongs"])  # the broker's EOLs arrived as messages
    assert all(n > 0 for n in report["pings"])  # and the clients' were accepted
    assert_groups_in_order_one_consumer_each(report["received"], messages)


# --- stomp.py's WebSocket transport ------------------------------------------------


class Collector(stomp.ConnectionListener):
    def __init__(self, conn, index: int, received: list[dict]) -> None:
        self.conn, self.index, self.received = conn, index, received
        self.errors: list[str] = []
        self.lock = threading.Lock()

    def on_message(self, frame) -> None:
        with self.lock:
            self.received.append(
                {
                    "consumer": self.index,
                    "group": frame.headers["JMSXGroupID"],
                    "seq": int(frame.body),
                }
            )
        self.conn.ack(frame.headers["ack"])

    def on_error(self, frame) -> None:
        self.errors.append(frame.headers.get("message", ""))


def test_stomp_py_websocket_transport_sends_and_receives_groups_in_order(broker) -> None:
    proc, ws_port = broker()
    received: list[dict] = []
    consumers = []
    for index in (0, 1):
        conn = WSStompConnection([("127.0.0.1", ws_port)], ws_path="/ws")
        listener = Collector(conn, index, received)
        conn.set_listener("c", listener)
        conn.connect(wait=True)
        conn.subscribe(
            "/queue/wsq",
            id="s",
            ack="client-individual",
            headers={"activemq.prefetchSize": "3", "receipt": f"sub{index}"},
        )
        consumers.append((conn, listener))
    producer = WSStompConnection([("127.0.0.1", ws_port)], ws_path="/")
    producer.connect(wait=True)
    messages = grouped(8, 10)
    for group, seq in messages:
        producer.send("/queue/wsq", str(seq), headers={"JMSXGroupID": group})
    producer.disconnect(receipt="done")
    wait_for(lambda: len(received) == len(messages))
    for conn, listener in consumers:
        assert listener.errors == []
        conn.disconnect()
    assert_groups_in_order_one_consumer_each(received, messages)


# --- the wire: raw WebSocket messages --------------------------------------------


def ws_connect(port: int, path: str = "/stomp", **kwargs) -> websocket.WebSocket:
    return websocket.create_connection(f"ws://127.0.0.1:{port}{path}", timeout=5, **kwargs)


def recv_frame(ws: websocket.WebSocket) -> tuple[int, bytes]:
    """One WebSocket data message (opcode, payload)."""
    opcode, data = ws.recv_data()
    return opcode, data


def raw_upgrade(port: int, **headers: str) -> tuple[int, bytes]:
    """Send an upgrade request by hand; the status and body of the reply."""
    import socket

    fields = {
        "Host": f"127.0.0.1:{port}",
        "Upgrade": "websocket",
        "Connection": "Upgrade",
        "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
        "Sec-WebSocket-Version": "13",
        **{k.replace("_", "-"): v for k, v in headers.items()},
    }
    request = "GET /stomp HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in fields.items())
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall((request + "\r\n").encode())
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
    head, _, body = reply.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


def assert_closed_by_broker(ws: websocket.WebSocket) -> None:
    opcode, data = ws.recv_data()
    assert opcode == websocket.ABNF.OPCODE_CLOSE
    assert int.from_bytes(data[:2], "big") == 1000  # the ERROR frame said why
    with pytest.raises(websocket.WebSocketConnectionClosedException):
        ws.recv_data()


CONNECT = b"CONNECT\naccept-version:1.2\nhost:localhost\n\n\x00"


def test_frames_may_be_split_or_batched_and_each_broker_frame_is_one_message(broker) -> None:
    _, port = broker()
    ws = ws_connect(port, subprotocols=SUBPROTOCOLS)
    assert ws.getsubprotocol() == "v12.stomp"
    ws.send(CONNECT[:5].decode())  # one frame over three messages, text and binary
    ws.send_binary(CONNECT[5:20])
    ws.send(CONNECT[20:].decode())
    opcode, data = recv_frame(ws)
    assert opcode == websocket.ABNF.OPCODE_TEXT
    assert data.startswith(b"CONNECTED\nversion:1.2\n") and data.endswith(b"\x00")
    # Three frames in one binary message, the SEND body not UTF-8.
    batch = (
        b"SUBSCRIBE\nid:1\ndestination:/queue/raw\nack:client-individual\n\n\x00"
        b"SEND\ndestination:/queue/raw\ncontent-length:3\n\n\xff\x00\xfe\x00"
        b"SEND\ndestination:/queue/raw\nreceipt:r1\n\nsecond\x00"
    )
    ws.send_binary(batch)
    got = [recv_frame(ws) for _ in range(3)]
    kinds = sorted(parse_frame(data)[0] for _, data in got)  # one whole frame per message
    assert kinds == ["MESSAGE", "MESSAGE", "RECEIPT"]
    for opcode, data in got:  # each message holds exactly one whole frame
        assert data.endswith(b"\x00")
        if b"\xff" in data:
            assert opcode == websocket.ABNF.OPCODE_BINARY  # not UTF-8: a binary message
            assert data.endswith(b"\n\n\xff\x00\xfe\x00")
        else:
            assert opcode == websocket.ABNF.OPCODE_TEXT
            assert data.count(b"\x00") == 1
    ws.ping(b"are you there")
    frame = ws.recv_data_frame(control_frame=True)[1]
    assert (frame.opcode, frame.data) == (websocket.ABNF.OPCODE_PONG, b"are you there")
    ws.close()


def test_the_subprotocol_fixes_the_stomp_version(broker) -> None:
    _, port = broker()
    ws = ws_connect(port, subprotocols=["v11.stomp"])
    assert ws.getsubprotocol() == "v11.stomp"
    ws.send(CONNECT.decode())  # accepts only 1.2
    _, data = recv_frame(ws)
    assert data.startswith(b"ERROR\n")
    assert b"version:1.1\n" in data and b"Supported protocol versions are 1.1" in data
    ws.close()

    ws = ws_connect(port, subprotocols=["v11.stomp"])
    ws.send("CONNECT\naccept-version:1.0,1.1,1.2\nhost:localhost\n\n\x00")
    _, data = recv_frame(ws)
    assert data.startswith(b"CONNECTED\nversion:1.1\n")
    ws.close()


def test_an_unknown_subprotocol_is_refused(broker) -> None:
    _, port = broker()
    with pytest.raises(websocket.WebSocketBadStatusException) as info:
        ws_connect(port, subprotocols=["mqtt"])
    assert info.value.status_code == 400
    status, body = raw_upgrade(port, Sec_WebSocket_Protocol="mqtt")
    assert status == 400 and b"v12.stomp" in body


def test_a_non_stomp_message_gets_an_error_frame_then_close(broker) -> None:
    _, port = broker()
    ws = ws_connect(port)
    ws.send('{"op": "subscribe", "topic": "x"}')
    opcode, data = recv_frame(ws)
    assert data.startswith(b"ERROR\n") and b"unknown command" in data
    assert_closed_by_broker(ws)


@pytest.mark.parametrize(
    "kwargs",
    [{"origin": "http://evil.example"}, {"host": "evil.example"}, {"origin": "null"}],
    ids=["origin", "host", "null-origin"],
)
def test_a_foreign_origin_or_host_is_refused_with_403(broker, kwargs) -> None:
    proc, port = broker()
    with pytest.raises(websocket.WebSocketBadStatusException) as info:
        ws_connect(port, **kwargs)
    assert info.value.status_code == 403
    status, body = raw_upgrade(port, **{k.capitalize(): v for k, v in kwargs.items()})
    assert status == 403 and b"allowed-hosts" in body
    # The broker's own page (same host) and configured names are fine.
    ws_connect(port, origin=f"http://127.0.0.1:{proc.http_port}").close()
    ws_connect(port, origin="http://localhost:3000").close()


def test_allowed_hosts_admits_configured_names(broker) -> None:
    _, port = broker('[broker]\nallowed-hosts = ["mq.example", "app.example"]\n')
    ws_connect(port, host="mq.example", origin="https://app.example").close()
    with pytest.raises(websocket.WebSocketBadStatusException) as info:
        ws_connect(port)  # 127.0.0.1 is no longer among them
    assert info.value.status_code == 403


def test_a_plain_http_request_is_refused(broker) -> None:
    import urllib.error
    import urllib.request

    _, port = broker()
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5)
    assert info.value.code == 400


def test_an_oversized_frame_is_refused_as_on_tcp(broker) -> None:
    proc, port = broker("[limits]\nmax-frame-bytes = 4096\n")
    frame = b"SEND\ndestination:/queue/big\n\n" + b"x" * 5000 + b"\x00"

    tcp = RawStomp(proc.stomp_port)
    tcp.connect()
    tcp.send(frame)
    tcp_error = tcp.read_frame()
    tcp.close()

    ws = ws_connect(port)
    ws.send(CONNECT.decode())
    recv_frame(ws)
    for start in range(0, len(frame), 1000):  # split across messages, too
        ws.send_binary(frame[start : start + 1000])
    _, data = recv_frame(ws)
    command, headers, _ = parse_frame(data)
    assert command == tcp_error[0] == "ERROR"
    assert headers["message"] == tcp_error[1]["message"]
    assert "max-frame-bytes" in headers["message"]
    assert_closed_by_broker(ws)
    # Other clients are not disturbed.
    ws = ws_connect(port)
    ws.send(CONNECT.decode())
    assert recv_frame(ws)[1].startswith(b"CONNECTED\n")
    ws.close()


def test_authentication_is_the_stomp_listeners(broker, tmp_path) -> None:
    from shoal.security import add_user

    users = tmp_path / "users.json"
    add_user(users, "alice", "secret", ["admin"])
    _, port = broker(
        f'[broker]\nusers-file = "{users}"\n\n[[permissions]]\nmatch = "#"\n'
        'send = ["admin"]\nconsume = ["admin"]\n'
    )
    ws = ws_connect(port)
    ws.send("CONNECT\naccept-version:1.2\nhost:localhost\nlogin:alice\npasscode:wrong\n\n\x00")
    assert recv_frame(ws)[1].startswith(b"ERROR\n")
    ws = ws_connect(port)
    ws.send("CONNECT\naccept-version:1.2\nhost:localhost\nlogin:alice\npasscode:secret\n\n\x00")
    assert recv_frame(ws)[1].startswith(b"CONNECTED\n")
    ws.close()


@needs_tools("openssl")
def test_wss_listener(shoal_server, tmp_path) -> None:
    import ssl

    cert, key = self_signed_cert(tmp_path)
    port = free_port()
    shoal_server(
        data=None,
        args=["--ws-tls", f"127.0.0.1:{port}", "--tls-cert", str(cert), "--tls-key", str(key)],
    )
    ws = websocket.create_connection(
        f"wss://127.0.0.1:{port}/stomp",
        timeout=5,
        subprotocols=SUBPROTOCOLS,
        sslopt={"cert_reqs": ssl.CERT_REQUIRED, "ca_certs": str(cert), "check_hostname": False},
    )
    ws.send(CONNECT.decode())
    assert recv_frame(ws)[1].startswith(b"CONNECTED\nversion:1.2\n")
    ws.close()


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"GARBAGE\r\n\r\n",
        b"POST /stomp HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX: " + b"y" * 70_000 + b"\r\n\r\n",
    ],
    ids=["not-http", "post", "huge-headers"],
)
def test_a_bad_upgrade_request_gets_400_and_the_listener_keeps_serving(
    broker, request_bytes
) -> None:
    import socket

    _, port = broker()
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(request_bytes)
        reply = b""
        try:
            while chunk := sock.recv(65536):
                reply += chunk
        except ConnectionResetError:  # closed with our unread bytes pending
            pass
    assert reply.startswith(b"HTTP/1.1 400 ")
    ws = ws_connect(port)
    ws.send(CONNECT.decode())
    assert recv_frame(ws)[1].startswith(b"CONNECTED\n")
    ws.close()
