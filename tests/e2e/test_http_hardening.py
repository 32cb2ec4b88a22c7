"""The HTTP listener before and around authentication, over raw sockets against `shoal serve`.

Each test fails on a broker that buffers bodies before authenticating, has no
body cap per route, no deadlines, no connection limit, answers deeply nested
JSON with a 500, or answers any Host (README "HTTP limits").
"""

from __future__ import annotations

import base64
import json
import socket
import urllib.error
import urllib.request

import pytest
import stomp

from support import ShoalProcess, wait_for

pytestmark = pytest.mark.e2e


class RawHttp:
    """One HTTP/1.1 connection: exact bytes out, whole responses in."""

    def __init__(self, port: int, timeout: float = 10.0) -> None:
        self.port = port
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buf = b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def head(self, method: str, path: str, headers: dict[str, str] | None = None) -> None:
        fields = {"Host": f"127.0.0.1:{self.port}", **(headers or {})}
        self.send(
            f"{method} {path} HTTP/1.1\r\n".encode()
            + "".join(f"{k}: {v}\r\n" for k, v in fields.items()).encode()
            + b"\r\n"
        )

    def request(
        self, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None
    ) -> tuple[int, dict[str, str], bytes]:
        self.head(method, path, {"Content-Length": str(len(body)), **(headers or {})})
        self.send(body)
        return self.response()

    def _fill(self) -> None:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed by the broker; unread: {self.buf!r}")
        self.buf += chunk

    def response(self) -> tuple[int, dict[str, str], bytes]:
        while b"\r\n\r\n" not in self.buf:
            self._fill()
        head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        length = int(headers.get("content-length", "0"))
        while len(self.buf) < length:
            self._fill()
        body, self.buf = self.buf[:length], self.buf[length:]
        return status, headers, body

    def closed_by_broker(self) -> bool:
        """True once the broker closes (EOF or reset); a socket timeout fails the test."""
        try:
            return self.sock.recv(65536) == b""
        except ConnectionResetError:
            return True

    def close(self) -> None:
        self.sock.close()


def error_of(body: bytes) -> dict:
    return json.loads(body)


def broker(tmp_path_factory, name: str, config: str | None = None):
    base = tmp_path_factory.mktemp(name)
    path = None
    if config is not None:
        path = base / "shoal.toml"
        path.write_text(config)
    return ShoalProcess(base / "data", path).start()


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    """Defaults: no users, 1 MiB JSON bodies."""
    srv = broker(tmp_path_factory, "plain")
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    from shoal.security import add_user

    base = tmp_path_factory.mktemp("secured-users")
    users = base / "users.json"
    add_user(users, "admin", "pw", ["admin"])
    add_user(users, "viewer", "pw", ["viewer"])
    srv = broker(
        tmp_path_factory,
        "secured",
        (
            f'[broker]\nusers-file = "{users}"\n'
            '[[permissions]]\nmatch = "#"\nsend = ["admin"]\nconsume = ["admin"]\n'
            'browse = ["admin", "viewer"]\nmanage = ["admin"]\n'
        ),
    )
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def tight(tmp_path_factory):
    """Small body caps, three connections, one configured host name."""
    srv = broker(
        tmp_path_factory,
        "tight",
        (
            '[broker]\nallowed-hosts = ["broker.example", "localhost:1"]\n'
            "[limits]\nhttp-max-connections = 3\nhttp-max-body-bytes = 1000\n"
            "http-max-upload-bytes = 5000\n"
        ),
    )
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def hasty(tmp_path_factory):
    """Deadlines of 300 ms."""
    srv = broker(
        tmp_path_factory,
        "hasty",
        "[limits]\nhttp-idle-timeout-ms = 300\nhttp-header-timeout-ms = 300\n",
    )
    yield srv
    srv.stop()


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


# --- authentication before the body -------------------------------------------------


@pytest.mark.parametrize("authorization", [None, basic("admin", "wrong"), "Bearer nope"])
def test_401_arrives_after_only_the_headers_of_a_huge_body(secured, authorization):
    conn = RawHttp(secured.http_port)
    headers = {
        "Content-Type": "application/vnd.apache.arrow.stream",
        "Content-Length": str(60 * 1024 * 1024),
    }
    if authorization:
        headers["Authorization"] = authorization
    conn.head("POST", "/api/sinks/stage?destination=/queue/q&handle=h", headers)
    status, fields, body = conn.response()  # not one body byte was sent
    assert status == 401, body
    assert fields["www-authenticate"].startswith("Basic")
    assert fields["connection"] == "close"
    assert conn.closed_by_broker()
    conn.close()


def test_a_client_that_sends_its_refused_body_at_once_still_reads_the_401(secured):
    req = urllib.request.Request(
        f"{secured.http_url}/api/queues",
        data=b"x" * (32 * 1024 * 1024),
        method="POST",
        headers={"Authorization": basic("admin", "wrong")},
    )
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(req, timeout=10)
    assert caught.value.code == 401
    caught.value.close()


def test_403_for_a_permission_on_the_path_comes_before_the_body(secured):
    conn = RawHttp(secured.http_port)
    conn.head(
        "POST",
        "/api/queues/q/purge",
        {"Authorization": basic("viewer", "pw"), "Content-Length": str(10**9)},
    )
    status, _, body = conn.response()
    assert status == 403, body
    assert error_of(body)["permission"] == "manage"
    assert conn.closed_by_broker()
    conn.close()


def test_admitted_request_gets_100_continue_then_its_answer(secured):
    conn = RawHttp(secured.http_port)
    body = json.dumps({"name": "continued"}).encode()
    conn.head(
        "POST",
        "/api/queues",
        {
            "Authorization": basic("admin", "pw"),
            "Content-Type": "application/json",
            "Content-Length": str(len(body)),
            "Expect": "100-continue",
        },
    )
    status, _, _ = conn.response()
    assert status == 100
    conn.send(body)
    status, _, answer = conn.response()
    assert status == 201, answer
    conn.close()


# --- body caps per route --------------------------------------------------------------


def test_declared_body_over_the_json_cap_gets_413_before_it_is_sent(plain):
    conn = RawHttp(plain.http_port)
    conn.head(
        "POST",
        "/api/queues",
        {"Content-Length": str(1024 * 1024 + 1), "Content-Type": "application/json"},
    )
    status, _, body = conn.response()
    assert status == 413
    assert error_of(body)["error"] == "limit"
    assert "1048576" in error_of(body)["message"]
    assert conn.closed_by_broker()
    conn.close()


def test_streamed_body_over_the_cap_gets_413(plain):
    conn = RawHttp(plain.http_port)
    conn.head(
        "POST", "/api/queues", {"Transfer-Encoding": "chunked", "Content-Type": "application/json"}
    )
    chunk = b" " * 65536
    for _ in range(20):  # 1.25 MiB, no length declared
        conn.send(b"%x\r\n" % len(chunk) + chunk + b"\r\n")
    status, _, body = conn.response()
    assert status == 413, body
    conn.close()


def test_body_caps_are_per_route(tight):
    host = {"Host": "broker.example"}
    conn = RawHttp(tight.http_port)
    status, _, body = conn.request("POST", "/api/queues", b" " * 1001, host)
    assert status == 413, body
    conn.close()
    conn = RawHttp(tight.http_port)
    # 3000 bytes fit the upload cap of the Arrow staging route: read, then found not Arrow
    status, _, body = conn.request(
        "POST", "/api/sinks/stage?destination=/queue/q&handle=h", b"x" * 3000, host
    )
    assert status == 400, body
    assert "Arrow" in error_of(body)["message"]
    status, _, body = conn.request(
        "POST", "/api/sinks/stage?destination=/queue/q&handle=h", b"x" * 5001, host
    )
    assert status == 413, body
    conn.close()


# --- bad JSON ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (b"[" * 100_000, "nested too deeply"),
        (b'{"name": ' * 50_000, "nested too deeply"),
        (b'{"name": "q"', "not valid JSON"),
        (b'{"name": NaN}', "not valid JSON"),
        (b'["q"]', "must be a JSON object"),
        (b"\xff\xfe{", "not valid JSON"),
    ],
)
def test_bad_json_is_a_400_naming_the_problem(plain, body, words):
    conn = RawHttp(plain.http_port)
    status, _, answer = conn.request(
        "POST", "/api/queues", body, {"Content-Type": "application/json"}
    )
    assert status == 400, answer
    assert words in error_of(answer)["message"]
    assert error_of(answer)["field"] == "body"
    status, _, _ = conn.request("GET", "/health")  # same connection, broker unharmed
    assert status == 200
    conn.close()


# --- DNS rebinding ------------------------------------------------------------------------


def test_rebound_host_cannot_purge_a_broker_without_users(plain):
    conn = RawHttp(plain.http_port)
    body = json.dumps({"name": "rebound"}).encode()
    assert conn.request("POST", "/api/queues", body)[0] == 201
    producer = stomp.Connection12([("127.0.0.1", plain.stomp_port)], heartbeats=(0, 0))
    producer.connect(wait=True)
    producer.send("/queue/rebound", "kept", receipt="r1")
    producer.disconnect()
    evil = {"Host": "evil.example", "Origin": "http://evil.example"}
    status, _, answer = conn.request("POST", "/api/queues/rebound/purge", b"", evil)
    assert status == 421, answer
    assert error_of(answer)["error"] == "misdirected"
    assert "evil.example" in error_of(answer)["message"]
    status, _, answer = conn.request("GET", "/api/queues/rebound", b"", {"Host": "evil.example:80"})
    assert status == 421
    status, _, answer = conn.request("GET", "/api/queues/rebound")
    assert status == 200 and json.loads(answer)["depth"] == 1
    conn.close()


@pytest.mark.parametrize(
    "host", ["localhost", "LOCALHOST:{port}", "127.0.0.1:{port}", "[::1]:{port}", "[::1]"]
)
def test_default_allowed_hosts(plain, host):
    conn = RawHttp(plain.http_port)
    status, _, _ = conn.request(
        "GET", "/api/broker", b"", {"Host": host.format(port=plain.http_port)}
    )
    assert status == 200
    conn.close()


@pytest.mark.parametrize(
    ("host", "status"),
    [
        ("broker.example", 200),
        ("broker.example:8161", 200),
        ("localhost:1", 200),
        ("localhost", 421),
        ("127.0.0.1", 421),
        ("localhost:2", 421),
        ("evil.example", 421),
    ],
)
def test_configured_allowed_hosts_replace_the_defaults(tight, host, status):
    conn = RawHttp(tight.http_port)
    assert conn.request("GET", "/health", b"", {"Host": host})[0] == status
    conn.close()


# --- deadlines ----------------------------------------------------------------------------


def test_idle_kept_alive_connection_is_closed(hasty):
    conn = RawHttp(hasty.http_port)
    assert conn.request("GET", "/health")[0] == 200
    assert conn.closed_by_broker()
    conn.close()


def test_connection_that_never_sends_is_closed(hasty):
    conn = RawHttp(hasty.http_port)
    assert conn.closed_by_broker()
    conn.close()


def test_incomplete_headers_get_408(hasty):
    conn = RawHttp(hasty.http_port)
    conn.send(b"GET /health HTTP/1.1\r\nHost: localhost\r\n")  # and never the blank line
    status, _, body = conn.response()
    assert status == 408
    assert "http-header-timeout-ms" in error_of(body)["message"]
    assert conn.closed_by_broker()
    conn.close()


def test_stalled_body_gets_408(hasty):
    conn = RawHttp(hasty.http_port)
    conn.head("POST", "/api/queues", {"Content-Length": "100"})
    conn.send(b'{"name": ')
    status, _, body = conn.response()
    assert status == 408
    assert "http-idle-timeout-ms" in error_of(body)["message"]
    conn.close()


# --- connection limit ------------------------------------------------------------------------


def test_connection_beyond_the_limit_gets_503_and_stomp_still_connects(tight):
    host = {"Host": "broker.example"}
    held = [RawHttp(tight.http_port) for _ in range(3)]
    for conn in held:
        assert conn.request("GET", "/health", b"", host)[0] == 200  # kept alive
    extra = RawHttp(tight.http_port)
    status, _, body = extra.response()  # refused without sending anything
    assert status == 503
    assert "http-max-connections" in error_of(body)["message"]
    assert extra.closed_by_broker()
    extra.close()
    client = stomp.Connection12([("127.0.0.1", tight.stomp_port)], heartbeats=(0, 0))
    client.connect(wait=True)  # STOMP is not refused meanwhile
    client.disconnect()
    held.pop().close()

    def served() -> bool:
        conn = RawHttp(tight.http_port)
        try:
            return conn.request("GET", "/health", b"", host)[0] == 200
        except ConnectionError:
            return False
        finally:
            conn.close()

    wait_for(served)
    for conn in held:
        conn.close()


# --- password guessing ----------------------------------------------------------------------


def test_failed_http_logins_are_throttled_per_address_as_on_stomp(tmp_path_factory):
    from shoal.security import add_user

    base = tmp_path_factory.mktemp("throttled-users")
    add_user(base / "users.json", "admin", "pw", ["admin"])
    srv = broker(
        tmp_path_factory,
        "throttled",
        (
            f'[broker]\nusers-file = "{base / "users.json"}"\n'
            "[limits]\nmax-auth-failures-per-minute = 2\n"
        ),
    )
    try:
        conn = RawHttp(srv.http_port)
        for password in ("guess1", "guess2"):
            status, _, body = conn.request(
                "GET", "/api/broker", b"", {"Authorization": basic("admin", password)}
            )
            assert status == 401 and "wrong login" in error_of(body)["message"]
        # the right password now too: no password is checked until tokens come back
        status, _, body = conn.request(
            "GET", "/api/broker", b"", {"Authorization": basic("admin", "pw")}
        )
        assert status == 401
        assert "max-auth-failures-per-minute" in error_of(body)["message"]
        conn.close()
        stomp_client = stomp.Connection12([("127.0.0.1", srv.stomp_port)], heartbeats=(0, 0))
        with pytest.raises(stomp.exception.ConnectFailedException):
            stomp_client.connect("admin", "pw", wait=True)  # one budget per address
    finally:
        srv.stop()
