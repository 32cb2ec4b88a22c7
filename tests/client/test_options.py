"""Connection URLs and their options: pure, no broker."""

from __future__ import annotations

import ssl

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shoal.client import InvalidURL, parse_url
from shoal.client.options import DEFAULT_URL


def test_defaults():
    o = parse_url(None)
    assert (o.host, o.port, o.tls) == ("127.0.0.1", 61613, False)
    assert o.login is None and o.passcode is None
    assert o.heartbeat == (10_000, 10_000)
    assert not o.auto_group and o.group_id is None and not o.reconnect
    assert parse_url(DEFAULT_URL) == o


def test_user_password_host_port_are_decoded():
    o = parse_url("stomp://al%40ice:p%3Ass%2Fw@broker.example:1234")
    assert (o.login, o.passcode, o.host, o.port) == ("al@ice", "p:ss/w", "broker.example", 1234)
    assert o.address == "broker.example:1234"
    assert "p:ss/w" not in o.url() and o.url(password=True).endswith("@broker.example:1234")


def test_ipv6_host():
    o = parse_url("stomp://[::1]:61613")
    assert o.host == "::1" and o.address == "[::1]:61613"


def test_ssl_scheme_defaults_port_and_builds_a_context(tmp_path):
    o = parse_url("stomp+ssl://h")
    assert o.tls and o.port == 61614
    ctx = o.ssl_context()
    assert isinstance(ctx, ssl.SSLContext) and ctx.verify_mode == ssl.CERT_REQUIRED
    loose = parse_url("stomp+tls://h:1?verify=false").ssl_context()
    assert loose is not None and loose.verify_mode == ssl.CERT_NONE and not loose.check_hostname
    assert parse_url("stomp://h").ssl_context() is None


@pytest.mark.parametrize(
    "query, field, value",
    [
        ("autoGroup=true", "auto_group", True),
        ("auto-group=yes", "auto_group", True),
        ("AUTO_GROUP=0", "auto_group", False),
        ("groupID=AAPL", "group_id", "AAPL"),
        ("heartbeat=0,0", "heartbeat", (0, 0)),
        ("heartbeat=10000,5000", "heartbeat", (10_000, 5_000)),
        ("reconnect=true", "reconnect", True),
        ("reconnectDelay=250", "reconnect_delay", 0.25),
        ("reconnectMaxDelay=2000", "reconnect_max_delay", 2.0),
        ("reconnectAttempts=3", "reconnect_attempts", 3),
        ("timeout=1500", "timeout", 1.5),
        ("host=vhost1", "vhost", "vhost1"),
        ("clientId=c-1", "client_id", "c-1"),
        ("cafile=/x/ca.pem", "cafile", "/x/ca.pem"),
    ],
)
def test_options(query, field, value):
    assert getattr(parse_url(f"stomp://h:1?{query}"), field) == value


@pytest.mark.parametrize(
    "url, words",
    [
        ("http://h:1", ["scheme", "http"]),
        ("stomp://h:1?bogus=1", ["unknown", "bogus"]),
        ("stomp://h:1?autoGroup=maybe", ["autoGroup", "true or false"]),
        ("stomp://h:1?heartbeat=10", ["heartbeat", "CX,CY"]),
        ("stomp://h:1?heartbeat=a,b", ["heartbeat", "integer"]),
        ("stomp://h:1?heartbeat=-1,0", ["heartbeat", ">= 0"]),
        ("stomp://h:1?groupID=", ["groupID", "empty"]),
        ("stomp://h:1?autoGroup=true&groupID=G", ["autoGroup", "groupID"]),
        ("stomp://h:99999", ["port"]),
        ("stomp://h:1/path", ["path"]),
        ("stomp://h:1?timeout=0", ["timeout", ">= 1"]),
    ],
)
def test_bad_urls_name_the_problem(url, words):
    with pytest.raises(InvalidURL) as info:
        parse_url(url)
    text = str(info.value)
    for w in words:
        assert w in text
    assert isinstance(info.value, ValueError)  # the builtin it really is


def test_keyword_overrides_win_over_the_url():
    o = parse_url("stomp://u:p@h:1?reconnect=false", reconnect=True, login="other")
    assert o.reconnect and o.login == "other" and o.passcode == "p"
    with pytest.raises(TypeError):
        parse_url("stomp://h:1", not_an_option=1)


@given(
    user=st.text(min_size=1, max_size=20),
    password=st.text(max_size=20),
    port=st.integers(1, 65535),
)
def test_any_credentials_round_trip_through_percent_encoding(user, password, port):
    from urllib.parse import quote

    o = parse_url(f"stomp://{quote(user, safe='')}:{quote(password, safe='')}@h:{port}")
    assert (o.login, o.passcode, o.port) == (user, password, port)
