from __future__ import annotations

import pytest

from shoal.errors import Unauthenticated
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
