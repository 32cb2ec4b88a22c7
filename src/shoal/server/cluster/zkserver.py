"""Run a standalone ZooKeeper from Debian's ``zookeeper`` package.

For the cluster tests and a cluster on one machine (``make zookeeper``):
not a production deployment. Debian's ``zkServer.sh`` reads the system-wide
``/etc/zookeeper`` configuration, so this starts the server class itself
with the package's jar (its manifest names every dependency) and a config
of our own in ``data``.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

ZOOKEEPER_JAR = "/usr/share/java/zookeeper.jar"
MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"


def available() -> bool:
    return Path(ZOOKEEPER_JAR).exists()


QUORUM_MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"


class ZooKeeperServer:
    """One server on ``host:port`` keeping its files in ``data``: standalone,
    or server ``myid`` of an ensemble whose ``peers`` are ``(host, quorum
    port, election port)`` by id (``ZooKeeperEnsemble`` builds them)."""

    def __init__(
        self,
        data: Path,
        port: int,
        host: str = "127.0.0.1",
        *,
        myid: int = 0,
        peers: dict[int, tuple[str, int, int]] | None = None,
    ) -> None:
        self.data = Path(data)
        self.port = port
        self.host = host
        self.myid = myid
        self.peers = peers or {}
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def connect_string(self) -> str:
        return f"{self.host}:{self.port}"

    def write_config(self) -> Path:
        self.data.mkdir(parents=True, exist_ok=True)
        cfg = self.data / "zoo.cfg"
        cfg.write_text(
            "tickTime=500\n"
            f"dataDir={self.data.resolve()}\n"
            f"clientPort={self.port}\n"
            f"clientPortAddress={self.host}\n"
            "admin.enableServer=false\n"
            "4lw.commands.whitelist=ruok,srvr\n"
            # the default 20-tick floor: sessions of a few seconds are allowed
            "minSessionTimeout=1000\n"
            + "".join(f"server.{i}={h}:{q}:{e}\n" for i, (h, q, e) in sorted(self.peers.items()))
            + ("initLimit=20\nsyncLimit=10\n" if self.peers else "")
        )
        if self.peers:
            (self.data / "myid").write_text(f"{self.myid}\n")
        return cfg

    def start(self, timeout: float = 30.0, *, wait: bool = True) -> ZooKeeperServer:
        cfg = self.write_config()
        log = open(self.data / "zookeeper.log", "ab")  # noqa: SIM115 - the child keeps it
        self.proc = subprocess.Popen(
            [
                "java",
                "-Xmx128m",
                "-cp",
                ZOOKEEPER_JAR,
                QUORUM_MAIN_CLASS if self.peers else MAIN_CLASS,
                str(cfg),
            ],
            stdout=log,
            stderr=log,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()
        if wait:
            self.wait_serving(timeout)
        return self

    def wait_serving(self, timeout: float = 30.0) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while not self.is_ok():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(
                    f"ZooKeeper did not start on {self.connect_string}; see "
                    f"{self.data / 'zookeeper.log'}"
                )
            time.sleep(0.1)

    def is_ok(self) -> bool:
        """Serving requests (an ensemble member out of quorum is not)."""
        return self.mode() != ""

    def mode(self) -> str:
        """``standalone``, ``leader`` or ``follower`` from the ``srvr`` command;
        "" when not serving or unreachable."""
        try:
            with socket.create_connection((self.host, self.port), timeout=1.0) as s:
                s.sendall(b"srvr")
                answer = b""
                while chunk := s.recv(4096):
                    answer += chunk
        except OSError:
            return ""
        for line in answer.decode(errors="replace").splitlines():
            if line.startswith("Mode:"):
                return line.split(":", 1)[1].strip()
        return ""

    def kill9(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)


class ZooKeeperEnsemble:
    """``size`` servers on loopback, each with its own data dir under ``data``;
    ``ports`` gives each one (client, quorum, election) port."""

    def __init__(
        self, data: Path, ports: list[tuple[int, int, int]], host: str = "127.0.0.1"
    ) -> None:
        peers = {i + 1: (host, q, e) for i, (_c, q, e) in enumerate(ports)}
        self.servers = [
            ZooKeeperServer(Path(data) / f"zk{i + 1}", c, host, myid=i + 1, peers=peers)
            for i, (c, _q, _e) in enumerate(ports)
        ]

    @property
    def connect_string(self) -> str:
        return ",".join(s.connect_string for s in self.servers)

    def start(self, timeout: float = 60.0) -> ZooKeeperEnsemble:
        for s in self.servers:
            s.start(wait=False)
        try:
            for s in self.servers:
                s.wait_serving(timeout)
        except RuntimeError:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for s in self.servers:
            s.stop()


PID_FILE = "zookeeper.pid"  # in the data directory, for --detach and --stop


def main() -> int:
    parser = argparse.ArgumentParser(description="a standalone ZooKeeper for a local cluster")
    parser.add_argument("--port", type=int, default=2181)
    parser.add_argument("--data", type=Path, default=Path("data/zookeeper"))
    parser.add_argument(
        "--detach", action="store_true", help="return once it answers; it runs on (--stop ends it)"
    )
    parser.add_argument("--stop", action="store_true", help="stop the one --detach started")
    args = parser.parse_args()
    if args.stop:
        return stop_detached(args.data)
    if not available():
        raise SystemExit(f"{ZOOKEEPER_JAR} is missing: install Debian's zookeeper (`make sysdeps`)")
    # SIGTERM (make, a supervisor) stops ZooKeeper too: it runs in its own session
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    server = ZooKeeperServer(args.data, args.port)
    try:
        server.start()
    except RuntimeError as exc:  # the port taken, Java missing: the log says which
        raise SystemExit(f"zookeeper: {exc}") from None
    assert server.proc is not None
    if args.detach:
        (args.data / PID_FILE).write_text(f"{server.proc.pid}\n")
        print(
            f"zookeeper ready: {server.connect_string} (data and log in {args.data}); "
            "runs in the background until `make zookeeper-stop`",
            flush=True,
        )
        return 0
    print(
        f"zookeeper ready: {server.connect_string} (data in {args.data}); Ctrl-C stops it",
        flush=True,
    )
    try:
        server.proc.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


def stop_detached(data: Path) -> int:
    """End the server ``--detach`` left running (its process group), and wait for it."""
    pid_file = data / PID_FILE
    try:
        pid = int(pid_file.read_text())
        os.killpg(pid, signal.SIGTERM)
    except (OSError, ValueError):
        print(f"zookeeper: none running from {data}", file=sys.stderr)
        return 1
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        os.killpg(pid, signal.SIGKILL)
    pid_file.unlink()
    print(f"zookeeper stopped (data kept in {data})", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
