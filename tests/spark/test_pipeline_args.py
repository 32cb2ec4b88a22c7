"""`shoal pipeline matching|audit` argument parsing and error handling (no Spark session)."""

from __future__ import annotations

import argparse

import pytest

from shoal.spark import pipeline


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="shoal")
    pipeline.add_pipeline_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["pipeline", *argv])


def test_matching_defaults_and_overrides() -> None:
    a = parse("matching")
    assert a.func is pipeline.run_matching
    assert (a.http, a.stomp, a.orders, a.symbols, a.master) == (
        "http://127.0.0.1:8161",
        "127.0.0.1:61613",
        1_000_000,
        1000,
        "local[2]",
    )
    assert a.generate and a.archive and a.max_rows_per_batch == 250_000
    a = parse(
        "matching",
        "--master",
        "spark://m:7077",
        "--orders",
        "5",
        "--no-generate",
        "--no-archive",
        "--available-now",
    )
    assert a.master == "spark://m:7077" and a.orders == 5
    assert not a.generate and not a.archive and a.available_now


def test_audit_defaults() -> None:
    a = parse("audit", "--output", "/x", "--json")
    assert a.func is pipeline.run_audit and a.orders is None and a.json and a.output == "/x"


def test_a_job_is_required() -> None:
    with pytest.raises(SystemExit):
        parse()


def test_unreachable_broker_is_one_line_and_exit_1(capsys, monkeypatch) -> None:
    from shoal.spark.client import BrokerHttp
    from support import free_port

    a = parse("matching", "--http", f"http://127.0.0.1:{free_port()}", "--orders", "1")
    monkeypatch.setattr(
        pipeline, "broker_http", lambda args: BrokerHttp(args.http, retry_seconds=0.5)
    )
    assert pipeline.run_matching(a) == 1
    err = capsys.readouterr().err
    assert err.startswith("shoal pipeline: ") and err.count("\n") == 1


def test_audit_without_archive_fails_cleanly(tmp_path, capsys) -> None:
    assert pipeline.run_audit(parse("audit", "--output", str(tmp_path / "none"))) == 1
    assert "no archive" in capsys.readouterr().err
