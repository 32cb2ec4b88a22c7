"""Shoal itself, started the way users start it: `shoal serve` on free loopback ports.

h = start_shoal(workdir)      # polls until a STOMP CONNECT succeeds
h.stomp_port, h.pid           # pid is the `shoal serve` Python process
h.stop()                      # SIGTERM (clean shutdown, journal flushed), then SIGKILL
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from bench.peers.common import BrokerHandle, free_ports, popen, wait_stomp_ready

REPO = Path(__file__).resolve().parents[2]


def shoal_command() -> list[str]:
    venv_bin = REPO / ".venv" / "bin" / "shoal"
    if venv_bin.exists():
        return [str(venv_bin)]
    found = shutil.which("shoal")
    if found:
        return [found]
    return [sys.executable, "-m", "shoal.cli"]


def shoal_version() -> str:
    try:
        r = subprocess.run(
            shoal_command() + ["--version"], capture_output=True, text=True, timeout=30
        )
        out = (r.stdout or r.stderr).strip()
        rev = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
        return f"{out} (git {rev})" if rev else out
    except (OSError, subprocess.SubprocessError):
        return "shoal ?"


def start_shoal(
    workdir: Path | str,
    *,
    timeout: float = 60.0,
    config: Path | str | None = None,
    persistent_data: bool = True,
    log_level: str = "warning",
    extra_args: list[str] | None = None,
) -> BrokerHandle:
    base = Path(workdir).resolve()
    base.mkdir(parents=True, exist_ok=True)
    stomp_port, http_port = free_ports(2)
    cmd = [
        *shoal_command(),
        "serve",
        "--stomp",
        f"127.0.0.1:{stomp_port}",
        "--http",
        f"127.0.0.1:{http_port}",
        "--amqp",
        "127.0.0.1:0",  # 5672 may be RabbitMQ's
        "--data",
        str(base / "data") if persistent_data else "",
        "--log-level",
        log_level,
        *(["--config", str(config)] if config else []),
        *(extra_args or []),
    ]
    out_path = base / "shoal.out"
    out = open(out_path, "ab")  # noqa: SIM115
    try:
        proc = popen(
            cmd,
            cwd=base,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    finally:
        out.close()
    handle = BrokerHandle(
        name="shoal",
        version=shoal_version(),
        proc=proc,
        stomp_port=stomp_port,
        workdir=base,
        log_path=out_path,
        ports={"stomp": stomp_port, "http": http_port},
    )
    try:
        wait_stomp_ready(proc, stomp_port, timeout, out_path, what="shoal serve")
    except BaseException:
        handle.stop()
        raise
    return handle


if __name__ == "__main__":  # manual check: python -m bench.peers.shoal
    import tempfile
    import time

    with tempfile.TemporaryDirectory(prefix="shoal-") as d:
        t0 = time.monotonic()
        h = start_shoal(d)
        print(
            f"{h.version} ready on 127.0.0.1:{h.stomp_port} pid {h.pid} in "
            f"{time.monotonic() - t0:.1f} s; rss {h.rss_bytes() >> 20} MiB cpu {h.cpu_s():.2f} s"
        )
        print("stop ->", h.stop())
