"""WebSocket listener settings and the Host/Origin check (pure parts)."""

from __future__ import annotations

import pytest

from shoal.errors import ConfigError
from shoal.server.config import config_from_dict
from shoal.server.http_guard import AllowedHosts
from shoal.server.ws import allowed_hosts, refuse_host_or_origin


def test_ws_listeners_and_allowed_hosts_from_the_config():
    cfg = config_from_dict(
        {
            "broker": {
                "ws": "127.0.0.1:61614",
                "ws-tls": "127.0.0.1:61615",
                "allowed-hosts": ["MQ.example"],
            }
        }
    )
    assert (cfg.ws, cfg.ws_tls, cfg.allowed_hosts) == (
        ("127.0.0.1", 61614),
        ("127.0.0.1", 61615),
        ("mq.example",),
    )
    assert config_from_dict({}).ws is None  # off unless asked for


@pytest.mark.parametrize(
    ("broker", "key"),
    [
        ({"ws": "61614"}, "broker.ws"),
        ({"ws-tls": "h:x"}, "broker.ws-tls"),
        ({"allowed-hosts": "mq.example"}, "broker.allowed-hosts"),
        ({"allowed-hosts": [""]}, "broker.allowed-hosts"),
    ],
)
def test_bad_ws_settings_name_the_key(broker, key):
    with pytest.raises(ConfigError, match=key):
        config_from_dict({"broker": broker})


def test_a_non_loopback_ws_listener_needs_users_or_insecure():
    cfg = config_from_dict({"broker": {"ws": "0.0.0.0:61614"}})
    with pytest.raises(ConfigError, match="ws"):
        cfg.check_exposure()


DEFAULT = allowed_hosts((), "127.0.0.1")


@pytest.mark.parametrize(
    ("host", "origin", "allowed", "refused"),
    [
        ("127.0.0.1:61614", None, DEFAULT, None),
        ("localhost:61614", "http://localhost:3000", DEFAULT, None),
        ("[::1]:61614", "http://[::1]:8161", DEFAULT, None),
        ("evil.example:61614", None, DEFAULT, "Host"),
        ("127.0.0.1:61614", "http://evil.example", DEFAULT, "Origin"),
        ("127.0.0.1:61614", "null", DEFAULT, "Origin"),  # sandboxed frames, file:// pages
        ("127.0.0.1:61614", "not a url", DEFAULT, "Origin"),
        (
            "mq.example",
            "https://app.example",
            AllowedHosts.parse(["mq.example", "app.example"]),
            None,
        ),
        ("127.0.0.1:61614", None, AllowedHosts.parse(["mq.example"]), "Host"),
        ("anything.example", "https://else.example", AllowedHosts.parse(["*"]), None),
    ],
)
def test_host_and_origin_must_name_an_allowed_host(host, origin, allowed, refused):
    problem = refuse_host_or_origin(host, origin, allowed)
    if refused is None:
        assert problem is None
    else:
        assert problem is not None and problem.startswith(refused) and "allowed-hosts" in problem


def test_the_listener_address_is_allowed_by_default():
    assert refuse_host_or_origin("10.0.0.5:61614", None, allowed_hosts((), "10.0.0.5")) is None


def test_ws_tls_without_a_certificate_is_refused(capsys):
    from shoal.cli import main

    assert main(["serve", "--ws-tls", "127.0.0.1:0", "--data", ""]) == 1
    assert "--ws-tls" in capsys.readouterr().err


def test_a_connection_without_an_upgrade_request_is_closed(monkeypatch):
    import asyncio
    from types import SimpleNamespace

    from shoal.server import ws

    monkeypatch.setattr(ws, "UPGRADE_TIMEOUT", 0.05)

    async def scenario() -> bytes:
        loop = asyncio.get_running_loop()
        server = SimpleNamespace(loop=loop)
        listener = await loop.create_server(
            lambda: ws.WebSocketSession(server, DEFAULT),
            "127.0.0.1",
            0,  # type: ignore[arg-type]
        )
        port = listener.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /stomp HT")  # and nothing more
        try:
            return await asyncio.wait_for(reader.read(), 10)
        finally:
            writer.close()
            listener.close()

    assert asyncio.run(scenario()) == b""  # closed by the broker, nothing answered
