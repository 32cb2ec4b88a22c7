"""Apache Kafka 4.1 in KRaft mode from Maven Central: one broker on free loopback ports.

    h = start_kafka(workdir)         # polls until a Metadata request lists the broker
    h.ports["kafka"], bootstrap(h)   # the client listener, "127.0.0.1:<port>"
    list_topics(h.ports["kafka"])    # {topic: partitions}, over Kafka's own protocol
    create_topics(h.ports["kafka"], ["orders"])   # and wait for their leaders
    h.stop()                         # SIGTERM (controlled shutdown), then SIGKILL the group

The broker's jars (``org.apache.kafka:kafka_2.13`` and its runtime dependencies,
``bench/peers/kafka/pom.xml``) are copied with Maven into ~/.cache/shoal-bench once.
Each start writes a ``server.properties`` in ``workdir`` (one node with the broker
and controller roles, PLAINTEXT listeners on two free ports, the log in
``workdir``), formats the storage with Kafka's StorageTool and runs
``java -cp ... kafka.Kafka server.properties``. New topics get ``partitions``
partitions (``num.partitions``); a producer that keys each record by its group
keeps each group in one partition, in order: how Kafka users get per-group order.
"""

from __future__ import annotations

import base64
import os
import shutil
import socket
import struct
import subprocess
import time
import uuid
from pathlib import Path

from bench.peers.common import BrokerHandle, free_ports, poll_ready, popen

VERSION = "4.1.1"
POM = Path(__file__).with_name("kafka") / "pom.xml"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "shoal-bench"
LIBS = CACHE / f"kafka_2.13-{VERSION}" / "libs"
JARS = (f"kafka_2.13-{VERSION}.jar", "log4j-slf4j-impl-2.24.3.jar")  # all there: installed


def java() -> str | None:
    """The ``java`` to run the broker with (Kafka 4 needs 17 or newer): JAVA_HOME's, or PATH's."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return str(Path(home) / "bin" / "java")
    return shutil.which("java")


def _complete(libs: Path) -> bool:
    return all((libs / jar).exists() for jar in JARS)


def ensure_installed() -> Path:
    """The directory of the broker's jars, copied from Maven Central when missing."""
    if _complete(LIBS):
        return LIBS
    mvn = shutil.which("mvn")
    if mvn is None:
        raise RuntimeError("Maven (mvn) is needed to fetch Apache Kafka")
    partial = LIBS.with_name(f".libs-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    subprocess.run(
        [
            mvn,
            "-B",
            "-q",
            "-f",
            str(POM),
            f"-Dkafka.version={VERSION}",
            "dependency:copy-dependencies",
            f"-DoutputDirectory={partial}",
            "-DincludeScope=runtime",
        ],
        check=True,
        stdin=subprocess.DEVNULL,
    )
    if LIBS.exists() and not _complete(LIBS):  # from an older pom
        shutil.rmtree(LIBS)
    try:
        partial.rename(LIBS)
    except OSError:  # another process copied them first
        if not _complete(LIBS):
            raise
    shutil.rmtree(partial, ignore_errors=True)
    return LIBS


def server_properties(data: Path, port: int, controller: int, partitions: int) -> str:
    """One node, broker and controller, replication factor 1 everywhere."""
    return f"""process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:{controller}
listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}
advertised.listeners=PLAINTEXT://127.0.0.1:{port}
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs={data}
num.partitions={partitions}
auto.create.topics.enable=true
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
log.message.timestamp.type=LogAppendTime
"""


def _cluster_id() -> str:
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


# --- just enough of Kafka's protocol to ask a broker for its metadata ----------------------


def _string(b: bytes, pos: int) -> tuple[str | None, int]:
    (n,) = struct.unpack_from(">h", b, pos)
    pos += 2
    if n < 0:
        return None, pos
    return b[pos : pos + n].decode(), pos + n


def metadata(
    port: int, topics: list[str] | None = None, create: bool = False, timeout: float = 2.0
) -> tuple[int, dict[str, list[int]]]:
    """A Metadata (v4) request: (brokers, {topic: each partition's leader, -1 for none}).

    ``topics`` None asks for every topic; ``create`` lets the broker create the
    named ones. Raises OSError when nothing answers, ValueError on an answer it
    cannot read.
    """
    client = b"shoal-bench"
    body = struct.pack(">hhih", 3, 4, 1, len(client)) + client
    if topics is None:
        body += struct.pack(">i", -1)
    else:
        body += struct.pack(">i", len(topics))
        for t in topics:
            name = t.encode()
            body += struct.pack(">h", len(name)) + name
    body += struct.pack(">b", int(create))
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(struct.pack(">i", len(body)) + body)
        head = _read(s, 4)
        (size,) = struct.unpack(">i", head)
        b = _read(s, size)
    try:
        corr, _throttle, nbrokers = struct.unpack_from(">iii", b, 0)
        if corr != 1:
            raise ValueError(f"correlation id {corr}")
        pos = 12
        for _ in range(nbrokers):
            pos += 4  # node id
            _host, pos = _string(b, pos)
            pos += 4  # port
            _rack, pos = _string(b, pos)
        _cluster, pos = _string(b, pos)
        pos += 4  # controller id
        (ntopics,) = struct.unpack_from(">i", b, pos)
        pos += 4
        found: dict[str, list[int]] = {}
        for _ in range(ntopics):
            (error,) = struct.unpack_from(">h", b, pos)
            name, pos = _string(b, pos + 2)
            pos += 1  # is internal
            (nparts,) = struct.unpack_from(">i", b, pos)
            pos += 4
            leaders = []
            for _ in range(nparts):
                _perror, _part, leader = struct.unpack_from(">hii", b, pos)
                leaders.append(leader)
                pos += 2 + 4 + 4
                for _ in range(2):  # replicas, in-sync replicas
                    (n,) = struct.unpack_from(">i", b, pos)
                    pos += 4 + 4 * max(n, 0)
            if name is not None and error == 0:
                found[name] = leaders
    except struct.error as exc:
        raise ValueError(f"short Metadata response: {exc}") from None
    return nbrokers, found


def _read(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("Kafka closed the connection")
        buf += chunk
    return bytes(buf)


def list_topics(port: int) -> dict[str, int]:
    """The broker's topics and their partition counts."""
    return {name: len(leaders) for name, leaders in metadata(port)[1].items()}


def create_topics(port: int, topics: list[str], timeout: float = 60.0) -> None:
    """Create ``topics`` (``num.partitions`` each) and wait until every partition has a leader.

    A producer that starts writing while a new topic's partitions have no leader
    yet can wait out its whole delivery timeout on a busy machine.
    """
    deadline = time.monotonic() + timeout
    while True:
        found = metadata(port, topics, create=True)[1]
        if all(found.get(t) and min(found[t]) >= 0 for t in topics):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"Kafka topics {topics} have no leaders within {timeout} s: {found}")
        time.sleep(0.2)


def bootstrap(handle: BrokerHandle) -> str:
    """``kafka.bootstrap.servers`` for ``handle``."""
    return f"127.0.0.1:{handle.ports['kafka']}"


def broker_listed(port: int) -> bool:
    """True once a Metadata request on ``port`` lists a broker."""
    try:
        return metadata(port)[0] >= 1
    except (OSError, ValueError):
        return False


def start_kafka(
    workdir: Path | str,
    *,
    partitions: int = 8,
    heap: str = "1G",
    timeout: float = 180.0,
) -> BrokerHandle:
    jvm = java()
    if jvm is None:
        raise RuntimeError("Java (17 or newer) is needed to run Apache Kafka")
    libs = ensure_installed()
    base = Path(workdir).resolve()
    base.mkdir(parents=True, exist_ok=True)
    port, controller = free_ports(2)
    props = base / "server.properties"
    props.write_text(server_properties(base / "data", port, controller, partitions))
    classpath = str(libs / "*")
    out_path = base / "kafka.out"
    with open(out_path, "ab") as out:
        subprocess.run(
            [jvm, "-cp", classpath, "kafka.tools.StorageTool", "format"]
            + ["-t", _cluster_id(), "-c", str(props)],
            check=True,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        proc = popen(
            [jvm, f"-Xmx{heap}", f"-Xms{heap}", "-XX:+UseG1GC", "-Djava.awt.headless=true"]
            + ["-cp", classpath, "kafka.Kafka", str(props)],
            cwd=base,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    handle = BrokerHandle(
        name="kafka",
        version=f"Kafka {VERSION}",
        proc=proc,
        stomp_port=0,  # no STOMP: clients speak Kafka's protocol on ports["kafka"]
        workdir=base,
        log_path=out_path,
        ports={"kafka": port, "controller": controller},
        groups=False,
        notes="KRaft, one node; per-key order within a partition",
    )
    try:
        poll_ready(proc, lambda: broker_listed(port), timeout, out_path, "Kafka", "Kafka", port)
    except BaseException:
        handle.stop()
        raise
    return handle


if __name__ == "__main__":  # manual check: python -m bench.peers.kafka
    import tempfile

    with tempfile.TemporaryDirectory(prefix="kafka-") as d:
        t0 = time.monotonic()
        h = start_kafka(d)
        print(
            f"Kafka ready on {bootstrap(h)} pid {h.pid} in {time.monotonic() - t0:.1f} s; "
            f"topics {list_topics(h.ports['kafka'])}; rss {h.rss_bytes() >> 20} MiB"
        )
        print("stop ->", h.stop())
