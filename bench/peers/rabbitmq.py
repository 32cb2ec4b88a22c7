"""RabbitMQ from the Debian package, with rabbitmq_stomp, as a private node on free ports.

    h = start_rabbitmq(workdir)   # polls until a STOMP CONNECT (guest/guest) succeeds
    h.stomp_port, h.pid           # pid is beam.smp's
    h.stop()                      # SIGTERM (clean stop), then SIGKILL the process groups

RabbitMQ has no message groups: with it the benchmark shows what users get without
them (every group spread over all consumers). The node is private: its own node
name, Mnesia and log directories, config and plugins file under `workdir`, its own
epmd on a free port (so nothing clashes with another Erlang node on this machine),
and HOME=workdir so the Erlang cookie is written there. AMQP, STOMP, distribution
and epmd all listen on 127.0.0.1.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

from bench.peers.common import (
    BrokerHandle,
    ensure_package,
    free_ports,
    package_version,
    popen,
    session_pids,
    stop_process_group,
    wait_stomp_ready,
)

HERE = Path(__file__).resolve().parent / "rabbitmq"
PACKAGE = "rabbitmq-server"
SERVER = Path("/usr/lib/rabbitmq/bin/rabbitmq-server")
CONNECT_HEADERS = {"login": "guest", "passcode": "guest", "host": "/"}


class RabbitHandle(BrokerHandle):
    epmd: subprocess.Popen | None = None

    def stop(self) -> int | None:
        rc = super().stop()
        if self.epmd is not None:
            stop_process_group(self.epmd, term_timeout=5)
        return rc


def ensure_installed() -> None:
    ensure_package(PACKAGE)
    if not SERVER.exists():
        raise RuntimeError(f"{SERVER} missing although package {PACKAGE} is installed")


def _wait_port(port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"nothing listening on 127.0.0.1:{port} after {timeout} s"
                ) from None
            time.sleep(0.05)


def start_rabbitmq(
    workdir: Path | str,
    *,
    timeout: float = 120.0,
    install: bool = True,
    plugins: tuple[str, ...] = ("rabbitmq_stomp",),
) -> RabbitHandle:
    """``plugins``: the enabled plugins (STOMP is always needed: readiness is a STOMP
    CONNECT); AW1 adds ``rabbitmq_amqp1_0``, which serves AMQP 1.0 on ``ports["amqp"]``."""
    if install:
        ensure_installed()
    base = Path(workdir).resolve()
    for d in ("mnesia", "log", "etc"):
        (base / d).mkdir(parents=True, exist_ok=True)
    stomp_port, amqp_port, dist_port, epmd_port = free_ports(4)
    conf = (
        (HERE / "rabbitmq.conf")
        .read_text()
        .replace("{amqp_port}", str(amqp_port))
        .replace("{stomp_port}", str(stomp_port))
    )
    (base / "etc" / "rabbitmq.conf").write_text(conf)
    if tuple(plugins) == ("rabbitmq_stomp",):
        shutil.copy(HERE / "enabled_plugins", base / "etc" / "enabled_plugins")
    else:
        (base / "etc" / "enabled_plugins").write_text(f"[{','.join(plugins)}].\n")
    cookie = base / ".erlang.cookie"
    if not cookie.exists():
        cookie.write_text(os.urandom(16).hex().upper())
        cookie.chmod(0o400)
    node = f"bench{stomp_port}@localhost"
    env = {
        **os.environ,
        "HOME": str(base),
        "ERL_EPMD_PORT": str(epmd_port),
        "ERL_EPMD_ADDRESS": "127.0.0.1",
        "RABBITMQ_NODENAME": node,
        "RABBITMQ_USE_LONGNAME": "false",
        "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
        "RABBITMQ_NODE_PORT": str(amqp_port),
        "RABBITMQ_DIST_PORT": str(dist_port),
        "RABBITMQ_BASE": str(base),
        "RABBITMQ_CONFIG_FILE": str(base / "etc" / "rabbitmq.conf"),
        "RABBITMQ_ENABLED_PLUGINS_FILE": str(base / "etc" / "enabled_plugins"),
        "RABBITMQ_MNESIA_BASE": str(base / "mnesia"),
        "RABBITMQ_LOG_BASE": str(base / "log"),
        "RABBITMQ_PID_FILE": str(base / "rabbitmq.pid"),
        "RABBITMQ_CONF_ENV_FILE": str(base / "etc" / "rabbitmq-env.conf"),  # none: ignore /etc's
        "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": "-start_epmd false",
    }
    out_path = base / "rabbitmq.out"
    out = open(out_path, "ab")  # noqa: SIM115
    try:
        epmd = popen(
            [shutil.which("epmd") or "epmd", "-port", str(epmd_port), "-address", "127.0.0.1"],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
        )
        try:
            _wait_port(epmd_port, 10)
            proc = popen(
                [str(SERVER)],
                cwd=base,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
            )
        except BaseException:
            stop_process_group(epmd, term_timeout=2)
            raise
    finally:
        out.close()
    handle = RabbitHandle(
        name="rabbitmq",
        version=f"RabbitMQ {package_version(PACKAGE)}",
        proc=proc,
        stomp_port=stomp_port,
        workdir=base,
        log_path=out_path,
        ports={"stomp": stomp_port, "amqp": amqp_port, "dist": dist_port, "epmd": epmd_port},
        connect_headers=dict(CONNECT_HEADERS),
        groups=False,
        notes="no message groups (rabbitmq_stomp)",
    )
    handle.epmd = epmd
    try:
        wait_stomp_ready(
            proc, stomp_port, timeout, out_path, headers=CONNECT_HEADERS, what="RabbitMQ"
        )
        handle.pid = _beam_pid(proc.pid) or proc.pid
    except BaseException:
        handle.stop()
        raise
    return handle


def _beam_pid(sid: int) -> int | None:
    for pid in session_pids(sid):
        try:
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            continue
        if comm.startswith("beam"):
            return pid
    return None


if __name__ == "__main__":  # manual check: python -m bench.peers.rabbitmq
    import tempfile

    with tempfile.TemporaryDirectory(prefix="rmq-") as d:
        t0 = time.monotonic()
        h = start_rabbitmq(d)
        print(
            f"RabbitMQ ready on 127.0.0.1:{h.stomp_port} pid {h.pid} in "
            f"{time.monotonic() - t0:.1f} s; rss {h.rss_bytes() >> 20} MiB cpu {h.cpu_s():.1f} s"
        )
        print("stop ->", h.stop())
