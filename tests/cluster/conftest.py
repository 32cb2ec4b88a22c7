"""Real ZooKeeper servers and real Shoal nodes for the cluster tests.

``zookeeper``: a standalone server from Debian's ``zookeeper`` package in a
temp dir on a free loopback port, stopped after the test. ``cluster``: a
factory that starts N ``shoal serve`` processes with a ``[cluster]`` section
pointing at it; every listener (STOMP, HTTP, link) binds port 0 and the
ports come back on the ready line.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support import ShoalProcess, free_port

from shoal.server.cluster.zkserver import ZooKeeperEnsemble, ZooKeeperServer, available

pytestmark = pytest.mark.cluster


@pytest.fixture
def zookeeper(tmp_path: Path) -> Iterator[ZooKeeperServer]:
    if not available():
        pytest.fail("Debian's zookeeper package is missing: run `make sysdeps`")
    server = ZooKeeperServer(tmp_path / "zookeeper", free_port()).start()
    try:
        yield server
    finally:
        server.stop()


class Cluster:
    def __init__(self, tmp_path: Path, zk: ZooKeeperServer) -> None:
        self.tmp_path = tmp_path
        self.zk = zk
        self.nodes: list[ShoalProcess] = []

    def config(self, node: str, timeout_ms: int = 5000, extra: str = "", cluster: str = "") -> Path:
        path = self.tmp_path / f"{node}.toml"
        path.write_text(
            "[cluster]\n"
            'name = "test"\n'
            f'node = "{node}"\n'
            'link = "127.0.0.1:0"\n'
            f'zookeeper = "{self.zk.connect_string}"\n'
            f"{cluster}"
            "[cluster.grouping]\n"
            f"timeout = {timeout_ms}\n" + extra
        )
        return path

    def start(
        self,
        count: int,
        *,
        timeout_ms: int = 5000,
        persistent_data: bool = True,
        grouping: str = "",
        cluster: str = "",
        handler: str = "zookeeper",
    ) -> list[ShoalProcess]:
        """``grouping``: more ``[cluster.grouping]`` lines (e.g. ``group-timeout = 500``);
        ``cluster``: more ``[cluster]`` lines; ``handler = "local"``: n1 runs the
        local grouping handler, the others remote."""
        for i in range(len(self.nodes) + 1, len(self.nodes) + count + 1):
            node = f"n{i}"
            data = self.tmp_path / node if persistent_data else None
            kind = handler if handler == "zookeeper" else ("local" if i == 1 else "remote")
            extra = grouping + f'type = "{kind}"\n'
            p = ShoalProcess(data=data, config=self.config(node, timeout_ms, extra, cluster))
            if data is None:
                p.log_path = self.tmp_path / f"{node}.log"
            self.nodes.append(p.start())
        return self.nodes

    def stop(self) -> None:
        for p in self.nodes:
            p.stop()


@pytest.fixture
def cluster(tmp_path: Path, zookeeper: ZooKeeperServer) -> Iterator[Cluster]:
    c = Cluster(tmp_path, zookeeper)
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture
def zookeeper_ensemble(tmp_path: Path) -> Iterator[ZooKeeperEnsemble]:
    """Three ZooKeeper servers: a quorum that survives the loss of one."""
    if not available():
        pytest.fail("Debian's zookeeper package is missing: run `make sysdeps`")
    ports = [(free_port(), free_port(), free_port()) for _ in range(3)]
    ensemble = ZooKeeperEnsemble(tmp_path / "ensemble", ports).start()
    try:
        yield ensemble
    finally:
        ensemble.stop()


@pytest.fixture
def ensemble_cluster(tmp_path: Path, zookeeper_ensemble: ZooKeeperEnsemble) -> Iterator[Cluster]:
    c = Cluster(tmp_path, zookeeper_ensemble)  # type: ignore[arg-type]
    try:
        yield c
    finally:
        c.stop()
