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


class ZooKeeperServer:
    """One standalone server on ``host:port`` keeping its files in ``data``."""

    def __init__(self, data: Path, port: int, host: str = "127.0.0.1") -> None:
        self.data = Path(data)
        self.port = port
        self.host = host
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
            "4lw.commands.whitelist=ruok\n"
            # the default 20-tick floor: sessions of a few seconds are allowed
            "minSessionTimeout=1000\n"
        )
        return cfg

    def start(self, timeout: float = 30.0) -> ZooKeeperServer:
        cfg = self.write_config()
        log = open(self.data / "zookeeper.log", "ab")  # noqa: SIM115 - the child keeps it
        self.proc = subprocess.Popen(
            ["java", "-Xmx128m", "-cp", ZOOKEEPER_JAR, MAIN_CLASS, str(cfg)],
            stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while not self.is_ok():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"ZooKeeper did not start on {self.connect_string}; see "
                                   f"{self.data / 'zookeeper.log'}")
            time.sleep(0.1)
        return self

    def is_ok(self) -> bool:
        """The four-letter ``ruok`` answered ``imok``."""
        try:
            with socket.create_connection((self.host, self.port), timeout=1.0) as s:
                s.sendall(b"ruok")
                return s.recv(4) == b"imok"
        except OSError:
            return False

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)


def main() -> int:
    parser = argparse.ArgumentParser(description="a standalone ZooKeeper for a local cluster")
    parser.add_argument("--port", type=int, default=2181)
    parser.add_argument("--data", type=Path, default=Path("data/zookeeper"))
    args = parser.parse_args()
    if not available():
        raise SystemExit(f"{ZOOKEEPER_JAR} is missing: install Debian's zookeeper "
                         "(`make sysdeps`)")
    # SIGTERM (make, a supervisor) stops ZooKeeper too: it runs in its own session
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    server = ZooKeeperServer(args.data, args.port).start()
    print(f"zookeeper ready: {server.connect_string} (data in {args.data}); Ctrl-C stops it",
          flush=True)
    try:
        assert server.proc is not None
        server.proc.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
