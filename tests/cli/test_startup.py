"""`shoal serve` starting up: the build it names, and the one-line refusals
(a taken port, a missing extra) instead of a traceback."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from tests.support import free_port, get_json, parse_ready_line

from shoal._native import running_build

pytestmark = pytest.mark.e2e

OFF_DEFAULTS = ["--stomp", "127.0.0.1:0", "--http", "127.0.0.1:0", "--amqp", "127.0.0.1:0"]


def serve(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """A `shoal serve` expected to refuse to start."""
    proc = subprocess.run(
        [sys.executable, "-m", "shoal.cli", "serve", "--data", "", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def ready_line(env: dict[str, str]) -> tuple[str, subprocess.Popen[str]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "shoal.cli", "serve", "--data", "", *OFF_DEFAULTS],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    return proc.stdout.readline(), proc


@pytest.mark.parametrize("pure", [False, True], ids=["as-installed", "SHOAL_PURE"])
def test_ready_line_and_health_name_the_running_build(pure):
    env = dict(os.environ)
    if pure:
        env["SHOAL_PURE"] = "1"
        expected = ("pure", "SHOAL_PURE is set")
    else:
        expected = running_build()  # this process decided under the same environment
        if os.environ.get("SHOAL_EXPECT_IMPL"):
            assert expected[0] == os.environ["SHOAL_EXPECT_IMPL"]
    line, proc = ready_line(env)
    try:
        label = expected[0] + (f": {expected[1]}" if expected[1] else "")
        assert line.startswith(f"shoal {__import__('shoal').__version__} ({label}) ready: "), line
        ports = parse_ready_line(line)  # the tests' parser still reads it
        health = get_json(f"http://127.0.0.1:{ports['http']}/health")
        assert health["build"] == expected[0]
        assert health.get("build_reason", "") == expected[1]
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.parametrize("listener", ["stomp", "amqp", "http", "ws"])
def test_second_broker_on_a_taken_port_prints_one_line_and_exits_2(shoal_server, listener):
    first = shoal_server(data=None, args=["--ws", "127.0.0.1:0"])
    taken = first.ports[listener]
    proc = serve(*OFF_DEFAULTS, f"--{listener}", f"127.0.0.1:{taken}")
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith(f"shoal: error: broker.{listener}: the {listener} listener ")
    assert f"127.0.0.1:{taken}" in proc.stderr and "already in use" in proc.stderr
    assert f"--{listener}" in proc.stderr
    assert get_json(first.http_url + "/health")["status"] == "ok"  # the first one is untouched


def test_cluster_link_on_a_taken_port_prints_one_line_and_exits_2(shoal_server, tmp_path):
    first = shoal_server(data=None)
    taken = first.ports["stomp"]
    config = tmp_path / "node.toml"
    config.write_text(
        f'[cluster]\nnode = "n1"\nlink = "127.0.0.1:{taken}"\nzookeeper = "127.0.0.1:{free_port()}"\n'
    )
    proc = serve(*OFF_DEFAULTS, "--config", str(config))
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("shoal: error: cluster.link: the link listener ")
    assert f"127.0.0.1:{taken}" in proc.stderr and "already in use" in proc.stderr


def test_two_listeners_given_one_port_clash_before_the_journal_opens(tmp_path):
    port = free_port()
    proc = subprocess.run(
        [sys.executable, "-m", "shoal.cli", "serve", "--data", str(tmp_path / "data")]
        + ["--http", "127.0.0.1:0", "--stomp", f"127.0.0.1:{port}", "--amqp", f"127.0.0.1:{port}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert f"broker.amqp: the amqp listener cannot bind 127.0.0.1:{port}" in proc.stderr
    assert not (tmp_path / "data").exists()  # refused before anything was written


def test_cluster_node_without_kazoo_names_the_extra(tmp_path):
    shadow = tmp_path / "shadow" / "kazoo"  # kazoo as if not installed
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'kazoo'\")\n")
    config = tmp_path / "node.toml"
    config.write_text(
        '[cluster]\nnode = "n1"\nlink = "127.0.0.1:0"\nzookeeper = "127.0.0.1:2181"\n'
    )
    env = dict(os.environ, PYTHONPATH=str(tmp_path / "shadow"))
    proc = serve(*OFF_DEFAULTS, "--config", str(config), env=env)
    assert proc.returncode == 1
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert "kazoo" in proc.stderr and "shoal[cluster]" in proc.stderr
