"""The cluster link's shared secret: its config, its proofs, the origin's handshake (no sockets)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.cluster.test_link_runs import Origin, Wire

from shoal.errors import ConfigError
from shoal.protocol.stomp import frames as f
from shoal.server.cluster.link import (
    ACCEPTING,
    AUTH_DESTINATION,
    AUTH_RECEIPT,
    CONNECTING,
    NONCE_HEADER,
    PROOF_HEADER,
    link_proof,
    new_nonce,
    proof_matches,
)
from shoal.server.config import config_from_dict

SECRET = b"sixteen-bytes-at-least"


def _cluster(**keys: object) -> dict[str, object]:
    return {"cluster": {"node": "n1", "zookeeper": "127.0.0.1:2181", **keys}}


def test_secret_from_the_config_or_the_first_line_of_a_file(tmp_path: Path) -> None:
    cfg = config_from_dict(_cluster(secret="s" * 16))
    assert cfg.cluster is not None and cfg.cluster.secret == b"s" * 16
    (tmp_path / "secret").write_text("f" * 20 + "\nignored\n")
    cfg = config_from_dict(_cluster(**{"secret-file": "secret"}), tmp_path)
    assert cfg.cluster is not None and cfg.cluster.secret == b"f" * 20
    assert "f" * 20 not in repr(cfg)  # never printed with the config
    cfg = config_from_dict(_cluster())
    assert cfg.cluster is not None and cfg.cluster.secret is None


@pytest.mark.parametrize(
    ("keys", "named", "says"),
    [
        ({"secret": "short"}, "cluster.secret", "at least 16 bytes, got 5"),
        ({"secret": 12345678901234567}, "cluster.secret", "must be a string"),
        ({"secret-file": "missing"}, "cluster.secret-file", "cannot read"),
        ({"secret-file": "short"}, "cluster.secret-file", "at least 16 bytes, got 3"),
        ({"secret-file": "empty"}, "cluster.secret-file", "at least 16 bytes, got 0"),
        ({"secret": "s" * 16, "secret-file": "short"}, "cluster.secret-file", "not both"),
    ],
)
def test_a_bad_secret_refuses_to_start_naming_the_key(
    tmp_path: Path, keys: dict[str, object], named: str, says: str
) -> None:
    (tmp_path / "short").write_text("abc\n")
    (tmp_path / "empty").write_text("")
    with pytest.raises(ConfigError, match=named) as err:
        config_from_dict(_cluster(**keys), tmp_path)
    assert says in str(err.value)


def test_a_link_off_loopback_needs_a_secret_or_insecure() -> None:
    raw = _cluster(link="10.1.2.3:61617")
    with pytest.raises(ConfigError, match="cluster.secret"):
        config_from_dict(raw).check_exposure()
    config_from_dict(raw).replace(insecure=True).check_exposure()
    config_from_dict(_cluster(link="10.1.2.3:61617", secret="s" * 16)).check_exposure()


def test_a_proof_covers_the_nonce_the_cluster_both_nodes_and_which_end_made_it() -> None:
    nonce = new_nonce()
    assert len(nonce) == 64 and nonce != new_nonce()
    proof = link_proof(SECRET, CONNECTING, nonce, "test", "n2", "n1")
    assert proof_matches(proof, link_proof(SECRET, CONNECTING, nonce, "test", "n2", "n1"))
    others = [
        link_proof(b"another-secret-16", CONNECTING, nonce, "test", "n2", "n1"),
        link_proof(SECRET, ACCEPTING, nonce, "test", "n2", "n1"),  # reflected from the target
        link_proof(SECRET, CONNECTING, new_nonce(), "test", "n2", "n1"),  # replayed
        link_proof(SECRET, CONNECTING, nonce, "other", "n2", "n1"),
        link_proof(SECRET, CONNECTING, nonce, "test", "n3", "n1"),
        link_proof(SECRET, CONNECTING, nonce, "test", "n1", "n2"),
    ]
    assert not any(proof_matches(other, proof) for other in others)
    assert not proof_matches("", proof)
    assert not proof_matches("é" * 64, proof)  # not ASCII: refused, no TypeError


def _handshake(o: Origin, proof_of: bytes) -> tuple[Wire, str]:
    """The origin n1 connects to n2, which answers CONNECTED proven with ``proof_of``."""
    wire = Wire()
    o.link.connection_made(wire)  # type: ignore[arg-type]
    connect = wire.frames[0]
    assert isinstance(connect, f.Connect)
    proof = link_proof(proof_of, ACCEPTING, connect.headers[NONCE_HEADER], "test", "n2", "n1")
    challenge = new_nonce()
    wire.target.send(f.Connected(version="1.2"))  # the target's side to OPEN
    o.link.data_received(
        f"CONNECTED\nversion:1.2\nheart-beat:0,0\n{NONCE_HEADER}:{challenge}\n"
        f"{PROOF_HEADER}:{proof}\n\n\x00".encode()
    )
    return wire, challenge


def test_the_origin_answers_only_a_target_that_proved_the_secret(caplog) -> None:
    o = Origin()
    o.link.secret = SECRET
    try:
        for _ in range(2):  # a target with another secret: closed, nothing sent, logged once
            wire, _challenge = _handshake(o, b"another-secret-16")
            assert wire.closed and len(wire.frames) == 1 and o.link.state != "up"
            o.link.connection_lost(None)
        assert caplog.text.count("did not prove the cluster secret") == 1
        wire, challenge = _handshake(o, SECRET)
        auth = wire.frames[-1]
        assert isinstance(auth, f.Send) and auth.destination == AUTH_DESTINATION
        expected = link_proof(SECRET, CONNECTING, challenge, "test", "n1", "n2")
        assert proof_matches(auth.headers[PROOF_HEADER], expected)
        assert o.link.state == "authenticating" and not o.link.conn_id  # nothing forwarded yet
        o.receipt(AUTH_RECEIPT)
        assert o.link.state == "up" and o.link.conn_id
    finally:
        o.close()
