"""`python -m shoal.cli ...` subprocesses against a real `shoal serve`."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import shoal.client

pytestmark = pytest.mark.e2e

GROUP_KEYS = {"group", "owner", "backlog", "in_flight", "oldest_age_ms", "state", "node"}


def shoal_cli(*args: str, input: bytes | str | None = None, check: bool = True):  # noqa: A002
    data = input.encode() if isinstance(input, str) else input
    proc = subprocess.run(
        [sys.executable, "-m", "shoal.cli", *args],
        input=data if data is not None else b"",
        capture_output=True,
        timeout=60,
    )
    out, err = proc.stdout.decode(), proc.stderr.decode()
    assert "Traceback" not in err, err
    if check:
        assert proc.returncode == 0, f"exit {proc.returncode}: {err}"
    return proc.returncode, out, err


def stomp(srv) -> list[str]:
    return ["--url", f"stomp://127.0.0.1:{srv.stomp_port}"]


def http(srv) -> list[str]:
    return ["--http", srv.http_url]


def test_send_then_receive_round_trip(shoal_server):
    srv = shoal_server()
    _, _, err = shoal_cli(
        "send", "orders", "--body", "buy 10", "--group", "AAPL", "--persistent", *stomp(srv)
    )
    assert "1 message stored to /queue/orders in group AAPL" in err
    shoal_cli(
        "send",
        "/queue/orders",
        "--lines",
        "--header",
        "x-app=cli",
        *stomp(srv),
        input="a\nb\n\nc\n",
    )
    _, out, _ = shoal_cli("receive", "orders", *stomp(srv))
    assert out == "buy 10\n"
    _, out, _ = shoal_cli("receive", "orders", "--count", "3", "--json", *stomp(srv))
    lines = [json.loads(x) for x in out.splitlines()]
    assert [x["body"] for x in lines] == ["a", "b", "c"]
    assert all(
        x["headers"]["x-app"] == "cli" and x["destination"] == "/queue/orders" for x in lines
    )
    assert set(lines[0]) >= {"destination", "message_id", "group", "redelivered", "headers"}


def test_send_count_file_and_auto_group(shoal_server, tmp_path):
    srv = shoal_server()
    body = tmp_path / "order.bin"
    body.write_bytes(b"\x00\xffbinary")
    shoal_cli("send", "bin", "--file", str(body), "--count", "2", "--auto-group", *stomp(srv))
    _, out, _ = shoal_cli("receive", "bin", "--count", "2", "--json", *stomp(srv))
    a, b = (json.loads(x) for x in out.splitlines())
    assert a["body_base64"] == b["body_base64"] == "AP9iaW5hcnk="
    assert a["group"] == b["group"] and len(a["group"]) == 32


def test_receive_count_zero_drains_until_timeout_and_short_counts_fail(shoal_server):
    srv = shoal_server()
    shoal_cli("send", "drain", "--lines", *stomp(srv), input="1\n2\n")
    _, out, _ = shoal_cli("receive", "drain", "--count", "0", "--timeout", "0.5", *stomp(srv))
    assert out.split() == ["1", "2"]
    code, out, err = shoal_cli(
        "receive", "drain", "--count", "1", "--timeout", "0.2", *stomp(srv), check=False
    )
    assert code == 1 and out == ""
    assert err.strip() == "shoal: error: no message arrived on /queue/drain within 0.2 s"


def test_receive_only_takes_count_messages_whatever_the_ack_mode(shoal_server):
    srv = shoal_server()
    shoal_cli("send", "modes", "--lines", *stomp(srv), input="1\n2\n3\n4\n")
    for mode, expected in (("auto", "1"), ("client", "2"), ("client-individual", "3")):
        _, out, _ = shoal_cli("receive", "modes", "--ack", mode, *stomp(srv))
        assert out.strip() == expected
    _, out, _ = shoal_cli("receive", "modes", *stomp(srv))
    assert out.strip() == "4"


def test_queues_and_groups_list_json_shape(shoal_server):
    srv = shoal_server()
    shoal_cli("send", "shape", "--group", "G1", "--body", "x", *stomp(srv))
    shoal_cli("send", "shape", "--group", "G2", "--body", "y", "--count", "2", *stomp(srv))
    _, out, _ = shoal_cli("queues", "--json", *http(srv))
    queues = json.loads(out)
    assert isinstance(queues, list)
    q = next(q for q in queues if q["name"] == "shape")
    assert q["depth"] == 3
    _, out, _ = shoal_cli("groups", "list", "shape", "--json", *http(srv))
    groups = json.loads(out)
    assert isinstance(groups, list) and all(set(g) == GROUP_KEYS for g in groups)
    by_name = {g["group"]: g for g in groups}
    assert by_name["G1"]["backlog"] == 1 and by_name["G2"]["backlog"] == 2
    assert by_name["G1"]["state"] == "ready" and by_name["G1"]["owner"] is None
    assert by_name["G1"]["in_flight"] == 0 and isinstance(by_name["G1"]["oldest_age_ms"], int)
    _, out, _ = shoal_cli("queues", *http(srv))
    assert out.splitlines()[0].split()[:3] == ["NAME", "TYPE", "DEPTH"] and "shape" in out
    _, out, _ = shoal_cli("groups", "list", "shape", *http(srv))
    assert "G1" in out and "G2" in out and "STATE" in out.splitlines()[0]


def test_queue_create_with_group_settings(shoal_server):
    srv = shoal_server()
    _, out, _ = shoal_cli(
        "queue",
        "create",
        "quotes",
        "--group-header",
        "symbol",
        "--shared-groups",
        "--group-buckets",
        "64",
        "--setting",
        "max-delivery-attempts=3",
        "--setting",
        "group-rebalance=true",
        *http(srv),
    )
    assert out.startswith("created queue quotes")
    _, out, _ = shoal_cli("queues", "--json", *http(srv))
    settings = next(q for q in json.loads(out) if q["name"] == "quotes")["settings"]
    assert settings["group-header"] == "symbol" and settings["group-mode"] == "shared"
    assert settings["group-buckets"] == 64 and settings["max-delivery-attempts"] == 3
    assert settings["group-rebalance"] is True
    # The queue reads its group id from the configured header.
    shoal_cli("send", "quotes", "--body", "x", "-H", "symbol=IBM", *stomp(srv))
    _, out, _ = shoal_cli("groups", "list", "quotes", "--json", *http(srv))
    assert len(json.loads(out)) == 1
    code, _, err = shoal_cli("queue", "create", "quotes", *http(srv), check=False)
    assert code == 1 and "already exists" in err and err.count("\n") == 1


def test_groups_reset_park_resume(shoal_server):
    srv = shoal_server()
    with shoal.client.connect(f"stomp://127.0.0.1:{srv.stomp_port}") as c:
        for i in range(2):
            c.send("/queue/steer", f"m{i}", group="G", receipt=True)
        sub = c.subscribe("/queue/steer", ack="client-individual", prefetch=1)
        held = sub.receive(10)
        assert held is not None
        _, out, _ = shoal_cli("groups", "list", "steer", "--json", *http(srv))
        [g] = json.loads(out)
        assert g["state"] == "owned" and g["owner"] and g["in_flight"] == 1
        _, out, _ = shoal_cli("groups", "list", "steer", "--json", "--state", "parked", *http(srv))
        assert json.loads(out) == []
        _, out, _ = shoal_cli("groups", "reset", "steer", "--group", "G", *http(srv))
        assert "reset requested" in out
        _, out, _ = shoal_cli("groups", "list", "steer", "--json", *http(srv))
        assert json.loads(out)[0]["state"] == "draining"  # moves once m0 is settled
        held.ack(receipt=True)
        shoal_cli("groups", "park", "steer", "--group", "G", *http(srv))
        _, out, _ = shoal_cli("groups", "list", "steer", "--json", "--state", "parked", *http(srv))
        assert [g["group"] for g in json.loads(out)] == ["G"]
        shoal_cli("groups", "resume", "steer", "--group", "G", *http(srv))
        nxt = sub.receive(10)
        assert nxt is not None and nxt.body == b"m1"
        nxt.ack(receipt=True)
    shoal_cli("groups", "reset", "steer", *http(srv))


def test_queue_purge_and_delete(shoal_server):
    srv = shoal_server()
    shoal_cli("send", "trash", "--body", "x", "--count", "3", *stomp(srv))
    _, out, _ = shoal_cli("queue", "purge", "trash", *http(srv))
    assert out.strip() == "purged 3 messages from trash"
    _, out, _ = shoal_cli("queue", "delete", "trash", *http(srv))
    assert out.strip() == "deleted queue trash"
    code, _, err = shoal_cli("queue", "delete", "trash", *http(srv), check=False)
    assert code == 1 and err.strip() == "shoal: error: no queue 'trash' (HTTP 404 not-found)"


def test_user_add_then_authenticated_cli(shoal_server, tmp_path):
    users = tmp_path / "users.json"
    shoal_cli("user", "add", "alice", "--role", "app", "--users-file", str(users), input="s3cret\n")
    assert "alice" in json.loads(users.read_text())
    srv = shoal_server(
        config=(
            f'[broker]\nusers-file = "{users}"\n'
            '[[permissions]]\nmatch = "#"\nsend = ["app"]\nconsume = ["app"]\nbrowse = ["app"]\n'
            'manage = ["app"]\ncreate = ["app"]\n'
        )
    )
    creds = ["--user", "alice", "--password", "s3cret"]
    shoal_cli("send", "secure", "--body", "x", *stomp(srv), *creds)
    _, out, _ = shoal_cli("receive", "secure", *stomp(srv), *creds)
    assert out == "x\n"
    shoal_cli("queues", "--json", *http(srv), *creds)
    code, _, err = shoal_cli(
        "send",
        "secure",
        "--body",
        "x",
        *stomp(srv),
        "--user",
        "alice",
        "--password",
        "nope",
        check=False,
    )
    assert code == 1 and "wrong login or passcode" in err
    code, _, err = shoal_cli("queues", *http(srv), check=False)
    assert code == 1 and "HTTP 401" in err


def test_bad_input_gets_one_clear_line_and_a_non_zero_exit(shoal_server, tmp_path):
    from support import free_port

    srv = shoal_server()
    dead = free_port()
    cases = [
        (
            ["send", "q", "--body", "x", "--url", f"stomp://127.0.0.1:{dead}"],
            f"cannot connect to 127.0.0.1:{dead}: connection refused",
        ),
        (
            ["queues", "--http", f"http://127.0.0.1:{dead}"],
            f"cannot reach the management API at http://127.0.0.1:{dead}: connection refused",
        ),
        (["send", "q", "--body", "x", "--url", "stomp://127.0.0.1:1?nope=1"], "unknown URL option"),
        (["send", "q", "--body", "x", "-H", "JMSXGroupSeq=abc", *stomp(srv)], "JMSXGroupSeq"),
        (["send", "q?bogus-setting=1", "--body", "x", *stomp(srv)], "bogus-setting"),
        (["send", "q", "--file", str(tmp_path / "missing"), *stomp(srv)], "No such file"),
        (["send", "q", *stomp(srv)], "stdin is empty"),
        (["groups", "list", "nope", *http(srv)], "no queue 'nope'"),
        (["queue", "create", "bad name", *http(srv)], "not a valid queue name"),
        (["queue", "create", "q2", "--setting", "group-mode=wobbly", *http(srv)], "group-mode"),
        (["journal", "check", str(tmp_path / "nowhere")], "no such directory"),
    ]
    for args, words in cases:
        code, out, err = shoal_cli(*args, check=False)
        assert code == 1, (args, code, err)
        assert err.startswith("shoal: error: ") and err.count("\n") == 1, (args, err)
        assert words in err, (args, err)
    code, _, err = shoal_cli("send", "q", "--header", "novalue", check=False)
    assert code == 2 and "expected K=V" in err  # argparse usage errors exit 2
    code, _, err = shoal_cli("groups", "list", "q", "--state", "owned,odd", check=False)
    assert code == 2 and "ready, owned, draining, parked" in err
    code, _, err = shoal_cli("receive", "q", "--ack", "sometimes", check=False)
    assert code == 2 and "invalid choice" in err


def test_help_everywhere():
    for args in (
        ["send"],
        ["receive"],
        ["queues"],
        ["queue", "create"],
        ["queue", "purge"],
        ["groups", "list"],
        ["groups", "reset"],
        ["groups", "park"],
        ["journal", "check"],
        ["journal", "dump"],
    ):
        _, out, _ = shoal_cli(*args, "--help")
        assert out.startswith("usage: shoal " + args[0])


def test_journal_check_and_dump(shoal_server, tmp_path):
    data = tmp_path / "jdata"
    srv = shoal_server(data=data)
    shoal_cli("send", "kept", "--body", "hello", "--persistent", *stomp(srv))
    srv.stop()
    _, out, _ = shoal_cli("journal", "check", str(data))
    assert "OK" in out.splitlines()[0]
    _, out, _ = shoal_cli("journal", "check", str(data), "--json")
    report = json.loads(out)
    assert report["ok"] is True and report["live_messages"] == 1
    _, out, _ = shoal_cli("journal", "dump", str(data / "journal"))
    records = [json.loads(x) for x in out.splitlines()]
    stored = [r for r in records if r["type"] == "MessageStored"]
    assert len(stored) == 1 and stored[0]["queue"] == "kept"


def test_send_and_receive_over_amqp_urls(shoal_server):
    srv = shoal_server()
    amqp = ["--url", f"amqp://127.0.0.1:{srv.amqp_port}"]
    _, _, err = shoal_cli(
        "send",
        "mixed",
        "--body",
        "buy 10",
        "--group",
        "AAPL",
        "--persistent",
        "-H",
        "x-app=cli",
        *amqp,
    )
    assert "1 message stored to /queue/mixed in group AAPL" in err
    shoal_cli("send", "mixed", "--lines", "--group", "IBM", *stomp(srv), input="a\nb\n")
    _, out, _ = shoal_cli("receive", "mixed", "--count", "3", "--json", *amqp)
    lines = [json.loads(x) for x in out.splitlines()]
    assert [(x["body"], x["group"]) for x in lines] == [
        ("buy 10", "AAPL"),
        ("a", "IBM"),
        ("b", "IBM"),
    ]
    assert lines[0]["headers"]["x-app"] == "cli" and lines[1]["group_seq"] == 1
    code, _, err = shoal_cli("receive", "mixed", "--timeout", "0.5", *amqp, check=False)
    assert code != 0 and "no message arrived on /queue/mixed" in err
