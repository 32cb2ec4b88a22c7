"""Pre-authentication hardening: password checks off the loop, no user-name
timing oracle, failed-login throttling, linear permission matching."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import threading

import pytest

import shoal.security as security_module
from shoal.broker.settings import _match
from shoal.errors import Unauthenticated
from shoal.security import LoginThrottle, hash_password, parse_security
from shoal.server.app import BrokerServer
from shoal.server.config import Config
from support import StompFrame, parse_frame


def _security(**perms):
    users = {"alice": {"password-hash": hash_password("pw"), "roles": ["app"]}}
    return parse_security(users, [{"match": "#", "send": ["app"], **perms}])


def test_unknown_user_costs_a_scrypt_like_a_known_one(monkeypatch):
    sec = _security()
    calls = []
    real = hashlib.scrypt

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(security_module.hashlib, "scrypt", counting)
    with pytest.raises(Unauthenticated):
        sec.authenticate("nobody", "pw")
    assert len(calls) == 1  # checked against the dummy hash
    with pytest.raises(Unauthenticated):
        sec.authenticate("alice", "wrong")
    assert len(calls) == 2
    assert sec.authenticate("alice", "pw") == "alice"
    assert sec.verify("nobody", "pw") is False  # remembered; the dummy never passes


def test_login_throttle_is_a_token_bucket_per_address():
    throttle = LoginThrottle(per_minute=2)
    assert throttle.allows("10.0.0.1", 0.0)
    throttle.failed("10.0.0.1", 0.0)
    throttle.failed("10.0.0.1", 0.0)
    assert not throttle.allows("10.0.0.1", 1.0)
    assert throttle.allows("10.0.0.2", 1.0)  # another address is not affected
    assert throttle.allows("10.0.0.1", 30.0)  # one token back after half a minute
    throttle.succeeded("10.0.0.1", 30.0)
    throttle.failed("10.0.0.1", 30.0)
    assert throttle.allows("10.0.0.1", 30.0)
    off = LoginThrottle(per_minute=-1)
    for _ in range(100):
        off.failed("a", 0.0)
    assert off.allows("a", 0.0)


def _reference_match(pattern, words):
    """The former backtracking matcher: the definition the linear one must keep."""
    if not pattern:
        return not words
    if pattern[0] == "#":
        return any(_reference_match(pattern[1:], words[i:]) for i in range(len(words) + 1))
    if not words:
        return False
    if pattern[0] in ("*", words[0]):
        return _reference_match(pattern[1:], words[1:])
    return False


def test_linear_wildcard_match_agrees_with_the_definition():
    for plen in range(5):
        for pattern in itertools.product(["a", "b", "#", "*"], repeat=plen):
            for wlen in range(5):
                for words in itertools.product(["a", "b"], repeat=wlen):
                    expected = _reference_match(list(pattern), list(words))
                    assert _match(list(pattern), list(words)) == expected, (pattern, words)


def test_permission_decisions_are_memoized(monkeypatch):
    sec = parse_security(
        {"alice": {"password-hash": hash_password("pw"), "roles": ["app"]}},
        [{"match": "#", "send": ["admin"]}, {"match": "orders.#", "send": ["app"]}],
    )
    calls = []
    real = security_module._match

    def counting(pattern, words):
        calls.append(1)
        return real(pattern, words)

    monkeypatch.setattr(security_module, "_match", counting)
    assert sec.allowed("alice", "send", "orders.eu")
    first = len(calls)
    assert first == 1  # most specific rule tried first, and it matched
    assert sec.allowed("alice", "send", "orders.eu")
    assert not sec.allowed("alice", "consume", "orders.eu")
    assert len(calls) == first  # no rule for consume; the send decision was remembered


async def _read_frame(reader: asyncio.StreamReader) -> StompFrame:
    """The next frame; the broker's frames here have no NUL in their bodies."""
    return parse_frame(await asyncio.wait_for(reader.readuntil(b"\x00"), 10))


def test_passwords_are_checked_off_the_loop_and_do_not_delay_others(monkeypatch):
    """A pending (slow) password check does not hold up an authenticated client."""
    release = threading.Event()
    threads: list[str] = []
    real_verify = security_module.Security.verify

    def slow_verify(self, login, passcode):
        threads.append(threading.current_thread().name)
        if passcode == "slow":
            release.wait(10)
        return real_verify(self, login, passcode)

    monkeypatch.setattr(security_module.Security, "verify", slow_verify)

    async def scenario():
        config = Config(
            stomp=("127.0.0.1", 0), http=None, amqp=None, data=None, security=_security()
        )
        server = BrokerServer(config)
        await server.start()
        port = server.addresses["stomp"][1]
        try:
            good_r, good_w = await asyncio.open_connection("127.0.0.1", port)
            good_w.write(b"CONNECT\naccept-version:1.2\nlogin:alice\npasscode:pw\n\n\x00")
            assert (await _read_frame(good_r))[0] == "CONNECTED"
            slow = []
            for _ in range(3):  # more pending checks than the pool has workers
                r, w = await asyncio.open_connection("127.0.0.1", port)
                w.write(b"CONNECT\naccept-version:1.2\nlogin:alice\npasscode:slow\n\n\x00")
                slow.append((r, w))
            await asyncio.sleep(0.05)
            good_w.write(b"SEND\ndestination:/queue/q\nreceipt:r1\n\nhi\x00")
            command, headers, _ = await _read_frame(good_r)
            assert command == "RECEIPT" and headers["receipt-id"] == "r1"
            assert not release.is_set()  # answered while the checks are still pending
            release.set()
            for r, w in slow:
                assert (await _read_frame(r))[0] == "ERROR"
                w.close()
            good_w.close()
        finally:
            release.set()
            await server.stop()
        return threading.current_thread().name

    loop_thread = asyncio.run(scenario())
    assert threads and all(name.startswith("shoal-auth") for name in threads)
    assert loop_thread not in threads


def test_timeouts_and_pre_auth_limits_are_configurable():
    from shoal.errors import ConfigError
    from shoal.server.config import config_from_dict

    cfg = config_from_dict(
        {
            "broker": {"handshake-timeout": 2.5, "idle-timeout": 0},
            "limits": {"max-unauthenticated-connections": 5, "max-destination-bytes": 256},
        }
    )
    assert (cfg.handshake_timeout, cfg.idle_timeout) == (2.5, 0.0)
    assert cfg.limits["max-unauthenticated-connections"] == 5
    assert cfg.limits["max-unauthenticated-frame-bytes"] == 64 * 1024
    with pytest.raises(ConfigError, match="handshake-timeout"):
        config_from_dict({"broker": {"handshake-timeout": -1}})
