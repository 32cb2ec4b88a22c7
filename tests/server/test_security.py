from __future__ import annotations

import pytest

from shoal.errors import Forbidden, Unauthenticated
from shoal.security import add_user, hash_password, load_users_file, parse_security, verify_password


def test_password_hashes_are_salted_and_verify():
    a, b = hash_password("s3cret"), hash_password("s3cret")
    assert a != b  # different salts
    assert verify_password("s3cret", a) and verify_password("s3cret", b)
    assert not verify_password("wrong", a)
    assert not verify_password("s3cret", "garbage")


def test_authenticate_and_most_specific_permission_wins(tmp_path):
    path = tmp_path / "users.json"
    add_user(path, "alice", "pw", ["producer"])
    add_user(path, "root", "pw2", ["admin"])
    sec = parse_security(
        load_users_file(path),
        [
            {"match": "#", "send": ["admin"], "consume": ["admin"], "manage": ["admin"]},
            {"match": "orders.#", "send": ["producer"]},
            {"match": "orders.secret", "send": ["admin"]},
        ],
    )
    assert sec.authenticate("alice", "pw") == "alice"
    with pytest.raises(Unauthenticated):
        sec.authenticate("alice", "nope")
    with pytest.raises(Unauthenticated):
        sec.authenticate(None, None)
    assert sec.allowed("alice", "send", "orders.eu")
    assert not sec.allowed("alice", "send", "orders.secret")
    assert not sec.allowed("alice", "consume", "orders.eu")
    assert sec.allowed("root", "send", "billing")
    assert not sec.allowed("ghost", "send", "orders.eu")


def test_security_off_allows_everything():
    sec = parse_security({}, [])
    assert not sec.enabled
    assert sec.authenticate(None, None) is None
    assert sec.allowed(None, "manage", "anything")


def test_api_tokens_are_stored_hashed_and_name_their_user(tmp_path):
    from shoal.security import add_token

    path = tmp_path / "users.json"
    add_user(path, "ops", "pw", ["admin"])
    token = add_token(path, "ops")
    assert token not in path.read_text()
    sec = parse_security(load_users_file(path), [])
    assert sec.authenticate_token(token) == "ops"
    with pytest.raises(Unauthenticated):
        sec.authenticate_token(token + "x")
    add_user(path, "ops", "new-pw", ["admin"])  # changing the password keeps tokens
    assert parse_security(load_users_file(path), []).authenticate_token(token) == "ops"


def _roles(**users: list[str]) -> dict[str, dict[str, object]]:
    return {name: {"password-hash": "unused", "roles": roles} for name, roles in users.items()}


def test_destination_parameters_need_create_and_send_on_the_address_they_name():
    sec = parse_security(
        _roles(bob=["a"], carol=["a", "owner"]),
        [
            {"match": "A", "send": ["a"], "consume": ["a"], "create": ["owner"]},
            {"match": "B", "send": ["owner"]},
        ],
    )
    sec.check_destination("bob", "consume", "/queue/A")
    sec.check_destination("bob", "consume", "/queue/A?exclusive=true")  # not a queue setting
    with pytest.raises(Forbidden, match="may not create on 'A'"):
        sec.check_destination("bob", "consume", "/queue/A?max-delivery-attempts=1")
    sec.check_destination("carol", "send", "/queue/A?dead-letter-address=B")
    for setting in ("dead-letter-address", "default-expiry-address"):
        with pytest.raises(Forbidden, match="may not send to 'C'"):
            sec.check_destination("carol", "send", f"/queue/A?{setting}=C")
    with pytest.raises(Forbidden, match="may not consume on 'B'"):
        sec.check_destination("carol", "consume", "/queue/B")


def test_allowed_somewhere_looks_at_every_rule_of_the_action():
    sec = parse_security(
        _roles(writer=["w"], reader=["r"]),
        [{"match": "logs.#", "send": ["w"]}, {"match": "#", "browse": ["r", "w"]}],
    )
    assert sec.allowed_somewhere("writer", "send")
    assert not sec.allowed_somewhere("reader", "send")
    assert not sec.allowed_somewhere("ghost", "send")
    assert parse_security({}, []).allowed_somewhere(None, "send")  # security off
