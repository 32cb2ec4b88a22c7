"""A Spark standalone cluster on loopback: one master and N workers, for trying and testing.

    python -m shoal.spark.cluster --workers 2          # prints the master URL, Ctrl-C stops

The pip ``pyspark`` package has no ``start-master.sh``; the daemons run with
``spark-class org.apache.spark.deploy.master.Master`` and ``...worker.Worker``.
Everything binds to 127.0.0.1 (``SPARK_LOCAL_IP``), work and log dirs live in
one temporary directory, and every process (a worker with its executors) is
its own process group, so a test can kill one worker with -9.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Self


def spark_class() -> str:
    """The ``spark-class`` script of the installed pyspark."""
    import pyspark

    path = Path(pyspark.__file__).resolve().parent / "bin" / "spark-class"
    if not path.exists():
        raise FileNotFoundError(f"no spark-class in {path.parent}: is pyspark installed whole?")
    return str(path)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Daemon:
    """One master or worker JVM, its log in ``log``."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], log: Path) -> None:
        self.name = name
        self.log = log
        self._out = open(log, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            argv, stdout=self._out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )

    def wait_for(self, text: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.log.read_text(errors="replace"):
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"spark {self.name} exited ({self.proc.returncode}); see {self.log}"
                )
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"spark {self.name} not ready within {timeout:g} s; see {self.log}"
                )
            time.sleep(0.2)

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Signal the whole process group (the worker and its executors)."""
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.kill(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.kill(signal.SIGKILL)
                self.proc.wait(10)
        self.kill(signal.SIGKILL)  # executors left in the group
        self._out.close()


class LocalCluster:
    """``with LocalCluster(workers=2) as c: ... c.master_url ...``."""

    def __init__(
        self,
        workers: int = 2,
        *,
        cores: int = 1,
        memory: str = "1g",
        directory: str | Path | None = None,
        python: str | None = None,
    ) -> None:
        self.workers_wanted = workers
        self.cores = cores
        self.memory = memory
        self.own_dir = directory is None
        self.dir = Path(directory or tempfile.mkdtemp(prefix="shoal-spark-cluster-"))
        self.python = python or sys.executable
        self.port = _free_port()
        self.master_url = f"spark://127.0.0.1:{self.port}"
        self.master: Daemon | None = None
        self.workers: list[Daemon] = []

    def env(self) -> dict[str, str]:
        return dict(
            os.environ,
            SPARK_LOCAL_IP="127.0.0.1",
            SPARK_LOG_DIR=str(self.dir / "logs"),
            SPARK_WORKER_DIR=str(self.dir / "work"),
            PYSPARK_PYTHON=self.python,
            SPARK_NO_DAEMONIZE="1",
        )

    def start(self) -> LocalCluster:
        self.dir.mkdir(parents=True, exist_ok=True)
        env = self.env()
        self.master = Daemon(
            "master",
            [
                spark_class(),
                "org.apache.spark.deploy.master.Master",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--webui-port",
                str(_free_port()),
            ],
            env,
            self.dir / "master.log",
        )
        self.master.wait_for("I have been elected leader", 120)
        for _ in range(self.workers_wanted):
            self.add_worker()
        return self

    def add_worker(self) -> Daemon:
        i = len(self.workers)
        work = self.dir / f"worker{i}"
        work.mkdir(parents=True, exist_ok=True)
        worker = Daemon(
            f"worker{i}",
            [
                spark_class(),
                "org.apache.spark.deploy.worker.Worker",
                "--host",
                "127.0.0.1",
                "--cores",
                str(self.cores),
                "--memory",
                self.memory,
                "--work-dir",
                str(work),
                "--webui-port",
                str(_free_port()),
                self.master_url,
            ],
            self.env(),
            self.dir / f"worker{i}.log",
        )
        worker.wait_for("Successfully registered with master", 120)
        self.workers.append(worker)
        return worker

    def stop(self) -> None:
        for d in [*self.workers, *([self.master] if self.master else [])]:
            d.stop()
        if self.own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m shoal.spark.cluster",
        description="A Spark standalone master and workers on 127.0.0.1.",
    )
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--cores", type=int, default=1, help="cores per worker")
    ap.add_argument("--memory", default="1g", help="memory per worker")
    ap.add_argument("--dir", default=None, help="work and log dirs (default: a temp dir, removed)")
    a = ap.parse_args(argv)
    cluster = LocalCluster(a.workers, cores=a.cores, memory=a.memory, directory=a.dir)
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # stop the daemons on TERM too
    try:
        cluster.start()
        print(
            f"master {cluster.master_url}  ({a.workers} workers; logs in {cluster.dir})", flush=True
        )
        print(
            f"e.g.: SPARK_LOCAL_IP=127.0.0.1 shoal pipeline matching --master {cluster.master_url}",
            flush=True,
        )
        signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
