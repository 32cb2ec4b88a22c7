"""The CLI's pure parts: argument parsing and formatting, no broker."""

from __future__ import annotations

import argparse

import pytest

from shoal.cli import admin, build_parser, journal, main, messaging, output
from shoal.cli.common import CliError
from shoal.client.admin import Admin
from shoal.client.errors import InvalidURL, ManagementError


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(list(argv))


def test_commands_are_registered_with_their_defaults(monkeypatch):
    monkeypatch.delenv("SHOAL_URL", raising=False)
    args = parse("send", "orders", "--body", "x", "-H", "a=b=c", "--header", "k=")
    assert args.func is messaging.cmd_send and args.count == 1 and not args.no_receipt
    assert args.header == [("a", "b=c"), ("k", "")]
    assert args.url == "stomp://127.0.0.1:61613"
    args = parse("receive", "orders")
    assert args.ack == "client-individual" and args.count == 1 and args.timeout is None
    args = parse("groups", "list", "q", "--state", "owned, parked")
    assert args.state == "owned,parked" and args.http == "http://127.0.0.1:8161"
    assert parse("groups", "park", "q", "--group", "G").group == "G"
    assert parse("queue", "create", "q", "--shared-groups").shared_groups


def test_environment_supplies_defaults(monkeypatch):
    monkeypatch.setenv("SHOAL_URL", "stomp://h:1")
    monkeypatch.setenv("SHOAL_HTTP", "http://h:2")
    monkeypatch.setenv("SHOAL_USER", "u")
    assert parse("send", "q").url == "stomp://h:1"
    args = parse("queues")
    assert args.http == "http://h:2" and args.user == "u"


@pytest.mark.parametrize(
    "argv",
    [
        ["send", "q", "--body", "x", "--file", "f"],  # one body source
        ["send", "q", "--group", "g", "--auto-group"],
        ["send", "q", "--count", "-1"],
        ["receive", "q", "--timeout", "soon"],
        ["groups", "list", "q", "--state", "sleeping"],
        ["groups", "park", "q"],  # --group is required
        ["queue", "create", "q", "--group-mode", "loose"],
    ],
)
def test_bad_arguments_exit_2_with_usage(argv, capsys):
    with pytest.raises(SystemExit) as info:
        parse(*argv)
    assert info.value.code == 2
    assert "usage: shoal" in capsys.readouterr().err


def test_setting_values_become_json_types():
    assert admin._setting_value("true") is True and admin._setting_value("false") is False
    assert admin._setting_value("10") == 10 and admin._setting_value("-1") == -1
    assert admin._setting_value("null") is None
    assert admin._setting_value("park") == "park" and admin._setting_value("1.5") == "1.5"
    assert admin._setting_value('"quoted"') == '"quoted"'


def test_ages_read_like_people_write_them():
    assert output.age(None) is None
    assert [output.age(ms) for ms in (0, 999, 1500, 61_000, 7_380_000)] == [
        "0ms",
        "999ms",
        "1.5s",
        "1m01s",
        "2h03m",
    ]


def test_destinations_and_queue_names():
    assert messaging._destination("orders") == "/queue/orders"
    assert messaging._destination("/topic/t") == "/topic/t"
    assert (
        admin._queue_name("/queue/orders") == "orders" and admin._queue_name("orders") == "orders"
    )


def test_journal_dir_accepts_the_data_directory(tmp_path):
    (tmp_path / "journal").mkdir()
    assert journal._journal_dir(str(tmp_path)) == tmp_path / "journal"
    assert journal._journal_dir(str(tmp_path / "journal")) == tmp_path / "journal"
    with pytest.raises(CliError, match="no such directory"):
        journal._journal_dir(str(tmp_path / "missing"))


def test_table_aligns_numbers_right(capsys):
    output.table([("a", 1, None), ("bbb", 100, "x")], ("NAME", "N", "S"))
    assert capsys.readouterr().out.splitlines() == [
        "NAME    N  S",
        "a       1  -",
        "bbb   100  x",
    ]


def test_admin_errors_name_the_address():
    from support import free_port

    port = free_port()
    with pytest.raises(ManagementError, match=f"127.0.0.1:{port}: connection refused"):
        Admin(f"http://127.0.0.1:{port}").queues()
    with pytest.raises(InvalidURL):
        Admin("ftp://x")
    assert Admin("127.0.0.1:8161").url == "http://127.0.0.1:8161"


def test_main_prints_one_line_for_shoal_errors(capsys):
    from support import free_port

    port = free_port()
    assert main(["queues", "--http", f"http://127.0.0.1:{port}"]) == 1
    err = capsys.readouterr().err
    assert err == (
        f"shoal: error: cannot reach the management API at "
        f"http://127.0.0.1:{port}: connection refused\n"
    )
