"""Host and Origin checks shared by the HTTP listener and the WebSocket upgrade."""

from __future__ import annotations

import pytest

from shoal.server.http_guard import (
    AllowedHosts,
    host_allowed,
    origin_allowed,
    same_origin,
    split_host,
)

DEFAULT = AllowedHosts.for_listener((), "127.0.0.1")


@pytest.mark.parametrize(
    ("value", "parsed"),
    [
        ("Example.COM:80", ("example.com", 80)),
        ("localhost", ("localhost", None)),
        ("[::1]:8161", ("::1", 8161)),
        ("[::1]", ("::1", None)),
        ("::1", ("::1", None)),
        ("host:", None),
        ("host:x", None),
        ("host:99999", None),
        ("[::1", None),
        ("[::1]x", None),
        ("", None),
        (":80", None),
    ],
)
def test_split_host(value, parsed):
    assert split_host(value) == parsed


@pytest.mark.parametrize(
    ("host", "ok"),
    [
        ("localhost", True),
        ("localhost:8161", True),
        ("LocalHost.:1", True),
        ("127.0.0.1:8161", True),
        ("[::1]:8161", True),
        ("10.1.2.3", False),
        ("evil.example", False),
        ("evil.example:8161", False),
        ("localhost.evil.example", False),
        ("local host", False),
        ("", False),
    ],
)
def test_default_hosts_are_loopback_names_and_addresses(host, ok):
    assert host_allowed(host, DEFAULT) is ok


def test_missing_host_is_allowed():
    assert host_allowed(None, DEFAULT)


def test_a_listener_on_every_address_takes_any_address_but_no_other_name():
    wildcard = AllowedHosts.for_listener((), "0.0.0.0")
    assert host_allowed("10.1.2.3:8161", wildcard) and host_allowed("[fe80::1]", wildcard)
    assert not host_allowed("evil.example", wildcard)
    assert not origin_allowed("http://10.1.2.3", wildcard)  # an address is nobody's page


def test_listener_name_and_configured_entries():
    assert host_allowed("broker.internal:8161", AllowedHosts.for_listener((), "broker.internal"))
    configured = AllowedHosts.for_listener(["broker.example", "ops.example:9000"], "127.0.0.1")
    assert host_allowed("broker.example:1", configured)
    assert host_allowed("ops.example:9000", configured)
    assert not host_allowed("ops.example:9001", configured)
    assert not host_allowed("localhost", configured)  # configured replaces the defaults
    assert not host_allowed("127.0.0.1", configured)
    assert host_allowed("anything.example", AllowedHosts.for_listener(["*"], "127.0.0.1"))


def test_malformed_entry_is_named():
    with pytest.raises(ValueError, match="'bad:port'"):
        AllowedHosts.parse(["ok", "bad:port"])


@pytest.mark.parametrize(
    ("origin", "ok"),
    [
        (None, True),
        ("http://localhost:3000", True),
        ("https://127.0.0.1", True),
        ("http://evil.example", False),
        ("null", False),
        ("file://", False),
        ("localhost", False),
    ],
)
def test_origin_allowed(origin, ok):
    assert origin_allowed(origin, DEFAULT) is ok


@pytest.mark.parametrize(
    ("origin", "host", "ok"),
    [
        (None, "x", True),
        ("http://127.0.0.1:8161", "127.0.0.1:8161", True),
        ("http://127.0.0.1:8161", "127.0.0.1:8162", False),
        ("null", "127.0.0.1", False),
        ("http://EVIL.example", "evil.example", True),  # same origin; the Host check refuses it
    ],
)
def test_same_origin(origin, host, ok):
    assert same_origin(origin, host) is ok


def test_config_allowed_hosts_and_http_limits():
    from shoal.errors import ConfigError
    from shoal.server.config import config_from_dict
    from shoal.server.http import HttpLimits

    cfg = config_from_dict(
        {
            "broker": {"allowed-hosts": ["broker.example", "[::1]:8161"]},
            "limits": {"http-idle-timeout-ms": -1, "http-max-body-bytes": 10},
        }
    )
    assert cfg.allowed_hosts == ("broker.example", "[::1]:8161")
    limits = HttpLimits.from_config(cfg.limits)
    assert limits.idle_timeout is None and limits.header_timeout == 10.0
    assert limits.body_bytes["json"] == 10 and limits.body_bytes["upload"] == 256 * 1024 * 1024
    assert limits.max_connections == 256
    assert config_from_dict({}).allowed_hosts == ()
    with pytest.raises(ConfigError, match="allowed-hosts"):
        config_from_dict({"broker": {"allowed-hosts": "localhost"}})
    with pytest.raises(ConfigError, match="'a:b'"):
        config_from_dict({"broker": {"allowed-hosts": ["a:b"]}})
