"""The broker process end to end: stomp.py and raw sockets against `shoal serve`."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time

import pytest
import stomp

from skips import needs_tools
from support import RawStomp, get_json, http_request, self_signed_cert, wait_for

pytestmark = pytest.mark.e2e


class Collector(stomp.ConnectionListener):
    def __init__(self) -> None:
        self.messages: list[stomp.utils.Frame] = []
        self.errors: list[stomp.utils.Frame] = []
        self.lock = threading.Lock()

    def on_message(self, frame) -> None:
        with self.lock:
            self.messages.append(frame)

    def on_error(self, frame) -> None:
        self.errors.append(frame)


def connect(port: int, **kwargs) -> tuple[stomp.Connection12, Collector]:
    conn = stomp.Connection12([("127.0.0.1", port)], **kwargs)
    listener = Collector()
    conn.set_listener("c", listener)
    conn.connect(wait=True)
    return conn, listener


def test_send_and_receive_with_user_and_group_headers(shoal_server):
    srv = shoal_server()
    conn, got = connect(srv.stomp_port)
    conn.subscribe("/queue/e2e.basic", id="s1", ack="client-individual")
    for i in range(5):
        conn.send("/queue/e2e.basic", f"m{i}", headers={"JMSXGroupID": "g1", "x-app": str(i)})
    wait_for(lambda: len(got.messages) == 5)
    assert [m.body for m in got.messages] == [f"m{i}" for i in range(5)]
    first = got.messages[0].headers
    assert first["JMSXGroupID"] == "g1" and first["x-app"] == "0"
    assert first["destination"] == "/queue/e2e.basic" and first["subscription"] == "s1"
    for m in got.messages:
        conn.ack(m.headers["ack"])
    conn.disconnect()


def test_receipt_for_send_and_health_endpoint(shoal_server):
    srv = shoal_server()
    raw = RawStomp(srv.stomp_port)
    cmd, headers, _ = raw.connect()
    assert cmd == "CONNECTED" and headers["version"] == "1.2"
    raw.frame("SEND", {"destination": "/queue/r", "receipt": "r-1", "persistent": "true"}, b"x")
    assert raw.read_frame()[:2] == ("RECEIPT", {"receipt-id": "r-1"})
    assert get_json(f"{srv.http_url}/health")["status"] == "ok"
    raw.close()


def test_bad_frame_gets_error_and_other_clients_and_messages_are_untouched(shoal_server):
    srv = shoal_server()
    good, got = connect(srv.stomp_port)
    good.send("/queue/e2e.bad", "kept-1")
    bad = RawStomp(srv.stomp_port)
    bad.connect()
    bad.frame("FROB", {"x": "y"})
    cmd, headers, _ = bad.read_frame()
    assert cmd == "ERROR" and "FROB" in headers["message"]
    assert bad.closed_by_peer()
    good.send("/queue/e2e.bad", "kept-2")
    good.subscribe("/queue/e2e.bad", id="s", ack="auto")
    wait_for(lambda: len(got.messages) == 2)
    assert [m.body for m in got.messages] == ["kept-1", "kept-2"]
    good.disconnect()


def test_frame_over_the_limit_names_the_limit(shoal_server):
    srv = shoal_server(config="[limits]\nmax-frame-bytes = 4096\n")
    raw = RawStomp(srv.stomp_port)
    raw.connect()
    raw.frame("SEND", {"destination": "/queue/big", "content-length": "100000"}, b"a" * 100000)
    cmd, headers, _ = raw.read_frame()
    assert cmd == "ERROR" and "max-frame-bytes" in headers["message"]


def test_non_numeric_group_seq_names_the_header_and_loses_nothing(shoal_server):
    srv = shoal_server()
    raw = RawStomp(srv.stomp_port)
    raw.connect()
    raw.frame("SEND", {"destination": "/queue/seq", "JMSXGroupID": "g", "receipt": "1"}, b"ok")
    assert raw.read_frame()[0] == "RECEIPT"
    raw.frame(
        "SEND",
        {"destination": "/queue/seq", "JMSXGroupID": "g", "JMSXGroupSeq": "abc", "receipt": "2"},
        b"bad",
    )
    cmd, headers, _ = raw.read_frame()
    assert cmd == "ERROR" and "JMSXGroupSeq" in headers["message"]
    assert headers.get("receipt-id") == "2"
    conn, got = connect(srv.stomp_port)
    conn.subscribe("/queue/seq", id="s", ack="auto")
    wait_for(lambda: got.messages)
    time.sleep(0.2)
    assert [m.body for m in got.messages] == ["ok"]
    conn.disconnect()


def test_nack_redelivers_with_flag_and_count(shoal_server):
    srv = shoal_server()
    conn, got = connect(srv.stomp_port)
    conn.subscribe("/queue/nack", id="s", ack="client-individual")
    conn.send("/queue/nack", "once")
    wait_for(lambda: len(got.messages) == 1)
    conn.nack(got.messages[0].headers["ack"])
    wait_for(lambda: len(got.messages) == 2)
    again = got.messages[1].headers
    assert again["redelivered"] == "true" and again["x-delivery-count"] == "1"
    conn.disconnect()


def test_unsettled_messages_move_in_order_when_owner_disconnects(shoal_server):
    srv = shoal_server()
    owner, owner_got = connect(srv.stomp_port)
    owner.subscribe(
        "/queue/move", id="s", ack="client-individual", headers={"activemq.prefetchSize": "5"}
    )
    producer, _ = connect(srv.stomp_port)
    for i in range(10):
        producer.send("/queue/move", str(i), headers={"JMSXGroupID": "G"})
    wait_for(lambda: len(owner_got.messages) == 5)
    owner.ack(owner_got.messages[0].headers["ack"])
    wait_for(lambda: len(owner_got.messages) == 6)
    other, other_got = connect(srv.stomp_port)
    other.subscribe("/queue/move", id="s", ack="client-individual")
    time.sleep(0.1)
    assert other_got.messages == []  # the group stays with its owner
    owner.disconnect()
    wait_for(lambda: len(other_got.messages) == 9)
    bodies = [m.body for m in other_got.messages]
    assert bodies == [str(i) for i in range(1, 10)]
    flags = [m.headers.get("redelivered") for m in other_got.messages]
    assert flags[:5] == ["true"] * 5 and flags[5:] == [None] * 4
    other.disconnect()
    producer.disconnect()


def test_silent_client_is_dropped_after_twice_its_heartbeat(shoal_server):
    srv = shoal_server(config="[broker]\nheartbeat = [0, 200]\n")  # wants beats every 200 ms
    raw = RawStomp(srv.stomp_port)
    cmd, headers, _ = raw.connect(**{"heart-beat": "200,0"})  # we promise them, then go silent
    assert cmd == "CONNECTED"
    raw.frame("SUBSCRIBE", {"destination": "/queue/hb", "id": "s", "ack": "client"})
    conn, got = connect(srv.stomp_port)
    conn.send("/queue/hb", "held")
    assert raw.read_frame()[2] == b"held"
    assert raw.closed_by_peer(timeout=5)  # silent: the broker hangs up
    conn.subscribe("/queue/hb", id="s2", ack="auto")
    wait_for(lambda: got.messages)
    assert got.messages[0].body == "held" and got.messages[0].headers["redelivered"] == "true"
    conn.disconnect()


def test_persistent_messages_survive_restart(shoal_server):
    srv = shoal_server()
    conn, _ = connect(srv.stomp_port)
    for i in range(20):
        conn.send("/queue/durable", str(i), headers={"persistent": "true", "receipt": f"r{i}"})
    conn.send("/queue/durable", "volatile")
    time.sleep(0.2)
    conn.disconnect()
    srv.restart()
    conn, got = connect(srv.stomp_port)
    conn.subscribe("/queue/durable", id="s", ack="auto")
    wait_for(lambda: len(got.messages) == 20)
    time.sleep(0.2)
    assert [m.body for m in got.messages] == [str(i) for i in range(20)]
    conn.disconnect()


def test_sigterm_closes_clients_with_a_reason_and_exits_zero(shoal_server):
    srv = shoal_server()
    raw = RawStomp(srv.stomp_port)
    raw.connect()
    srv.proc.send_signal(signal.SIGTERM)
    cmd, headers, _ = raw.read_frame()
    assert cmd == "ERROR" and "shutting down" in headers["message"]
    assert srv.proc.wait(5) == 0


def test_wrong_credentials_get_an_error_and_are_closed(shoal_server, tmp_path):
    users = tmp_path / "users.json"
    from shoal.security import add_user

    add_user(users, "alice", "pw", ["app"])
    config = (
        f'[broker]\nusers-file = "{users}"\n'
        '[[permissions]]\nmatch = "#"\nsend = ["app"]\nconsume = ["app"]\n'
    )
    srv = shoal_server(config=config)
    raw = RawStomp(srv.stomp_port)
    cmd, headers, _ = raw.connect(login="alice", passcode="bad")
    assert cmd == "ERROR" and "alice" in headers["message"]
    assert raw.closed_by_peer()
    with pytest.raises(stomp.exception.ConnectFailedException):
        connect(srv.stomp_port)  # no credentials at all
    ok = RawStomp(srv.stomp_port)
    assert ok.connect(login="alice", passcode="pw")[0] == "CONNECTED"


def test_forbidden_destination_gets_an_error(shoal_server, tmp_path):
    from shoal.security import add_user

    users = tmp_path / "users.json"
    add_user(users, "bob", "pw", ["reader"])
    config = (
        f'[broker]\nusers-file = "{users}"\n[[permissions]]\nmatch = "#"\nconsume = ["reader"]\n'
    )
    srv = shoal_server(config=config)
    raw = RawStomp(srv.stomp_port)
    assert raw.connect(login="bob", passcode="pw")[0] == "CONNECTED"
    raw.frame("SEND", {"destination": "/queue/q", "receipt": "x"}, b"no")
    cmd, headers, _ = raw.read_frame()
    assert cmd == "ERROR" and "send" in headers["message"] and headers["receipt-id"] == "x"


def test_refuses_non_loopback_without_users(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "shoal.cli",
            "serve",
            "--stomp",
            "0.0.0.0:0",
            "--data",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode != 0 and "non-loopback" in proc.stderr


@needs_tools("openssl")
def test_tls_listener(shoal_server, tmp_path):
    import socket
    import ssl

    cert, key = self_signed_cert(tmp_path)
    srv = shoal_server(
        args=["--stomp-tls", "127.0.0.1:0", "--tls-cert", str(cert), "--tls-key", str(key)]
    )
    port = srv.ports["stomp-tls"]
    ctx = ssl.create_default_context(cafile=str(cert))
    ctx.check_hostname = False
    with socket.create_connection(("127.0.0.1", port)) as sock, ctx.wrap_socket(sock) as tls:
        tls.sendall(b"CONNECT\naccept-version:1.2\nhost:x\n\n\x00")
        assert tls.recv(4096).startswith(b"CONNECTED")


def test_transactions_commit_and_abort(shoal_server):
    srv = shoal_server()
    conn, got = connect(srv.stomp_port)
    conn.begin("t1")
    conn.send("/queue/tx", "a", transaction="t1")
    conn.abort("t1")
    conn.begin("t2")
    conn.send("/queue/tx", "b", transaction="t2")
    conn.send("/queue/tx", "c", transaction="t2")
    conn.subscribe("/queue/tx", id="s", ack="auto")
    time.sleep(0.1)
    assert got.messages == []
    conn.commit("t2")
    wait_for(lambda: len(got.messages) == 2)
    assert [m.body for m in got.messages] == ["b", "c"]
    conn.disconnect()


def test_http_api_accepts_basic_auth_and_bearer_tokens(shoal_server, tmp_path):
    import base64

    from shoal.security import add_token, add_user

    users = tmp_path / "users.json"
    add_user(users, "ops", "pw", ["admin"])
    token = add_token(users, "ops")
    config = f'[broker]\nusers-file = "{users}"\n[[permissions]]\nmatch = "#"\nbrowse = ["admin"]\n'
    srv = shoal_server(config=config)

    def get(path: str, auth: str | None) -> int:
        return http_request(srv.http_url + path, headers={"Authorization": auth} if auth else {})[0]

    assert get("/health", None) == 200
    assert get("/api/queues", None) == 401
    assert get("/api/queues", "Bearer " + token) == 200
    assert get("/api/queues", "Bearer wrong") == 401
    assert get("/api/queues", "Basic " + base64.b64encode(b"ops:pw").decode()) == 200
    assert get("/api/queues", "Basic " + base64.b64encode(b"ops:no").decode()) == 401
