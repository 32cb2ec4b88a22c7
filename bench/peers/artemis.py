"""Apache Artemis 2.40 from Maven Central, as a private instance on free loopback ports.

    h = start_artemis(workdir)       # polls until a STOMP CONNECT succeeds
    h.stomp_port, h.ports["amqp"], h.ports["core"], h.pid   # pid is the JVM's
    h.stop()                         # SIGTERM (clean broker stop), then SIGKILL the group

The distribution (`org.apache.activemq:apache-artemis:2.40.0:tar.gz:bin`) is fetched
with Maven into ~/.m2 and unpacked once under ~/.cache/shoal-bench. Each start makes a
new broker instance in `workdir` (`artemis create`: anonymous access, no web console,
a 1 GiB heap, the NIO journal with fsync, as created), then replaces its acceptors with
three on free ports: STOMP and AMQP (both with `/queue/` and `/topic/` as the anycast and
multicast prefixes, as Shoal and ActiveMQ read destinations) and the core protocol.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

from bench.peers.common import BrokerHandle, free_ports, popen, wait_stomp_ready

VERSION = "2.40.0"
ARTIFACT = f"org.apache.activemq:apache-artemis:{VERSION}:tar.gz:bin"
M2_FILE = (
    Path.home()
    / ".m2/repository/org/apache/activemq/apache-artemis"
    / VERSION
    / f"apache-artemis-{VERSION}-bin.tar.gz"
)
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "shoal-bench"
HOME = CACHE / f"apache-artemis-{VERSION}"
# What one of the load generator's messages takes in Artemis' STOMP window beyond its
# payload: its headers (JMSXGroupID, bench-*) and Artemis' own, about 300 bytes.
WINDOW_OVERHEAD = 300


def ensure_installed() -> Path:
    """The unpacked distribution, fetched with Maven and unpacked when missing."""
    if (HOME / "bin" / "artemis").exists():
        return HOME
    if not M2_FILE.exists():
        mvn = shutil.which("mvn")
        if mvn is None:
            raise RuntimeError("Maven (mvn) is needed to fetch Apache Artemis")
        subprocess.run(
            [mvn, "-B", "-q", "dependency:get", f"-Dartifact={ARTIFACT}", "-Dtransitive=false"],
            check=True,
            stdin=subprocess.DEVNULL,
        )
    CACHE.mkdir(parents=True, exist_ok=True)
    partial = CACHE / f".unpack-{os.getpid()}"
    shutil.rmtree(partial, ignore_errors=True)
    with tarfile.open(M2_FILE) as tar:
        tar.extractall(partial, filter="tar")
    try:
        (partial / f"apache-artemis-{VERSION}").rename(HOME)
    except OSError:  # another process unpacked it first
        if not (HOME / "bin" / "artemis").exists():
            raise
    shutil.rmtree(partial, ignore_errors=True)
    return HOME


def acceptors(stomp: int, amqp: int, core: int) -> str:
    """The instance's acceptors: one protocol each, on loopback."""
    return f"""<acceptors>
         <acceptor name="stomp">tcp://127.0.0.1:{stomp}?protocols=STOMP;anycastPrefix=/queue/;multicastPrefix=/topic/;useEpoll=true;stompEnableMessageId=true</acceptor>
         <acceptor name="amqp">tcp://127.0.0.1:{amqp}?protocols=AMQP;anycastPrefix=/queue/;multicastPrefix=/topic/;useEpoll=true;saslMechanisms=PLAIN,ANONYMOUS</acceptor>
         <acceptor name="core">tcp://127.0.0.1:{core}?protocols=CORE;useEpoll=true</acceptor>
      </acceptors>"""


# Group settings for the side-by-side scenarios (tests/sidebyside), by queue name, as
# bench/peers/activemq/activemq.xml has its policy entries.
ADDRESS_SETTINGS = """<address-settings>
         <address-setting match="GROUPS.BUCKETS.#"><default-group-buckets>1</default-group-buckets></address-setting>
         <address-setting match="GROUPS.REBALANCE.#"><default-group-rebalance>true</default-group-rebalance></address-setting>"""


def create_instance(home: Path, instance: Path, heap: str) -> None:
    subprocess.run(
        [
            str(home / "bin" / "artemis"),
            "create",
            str(instance),
            "--user",
            "bench",
            "--password",
            "bench",
            "--allow-anonymous",
            "--no-web",
            "--silent",
            "--force",
            "--no-autotune",
            "--java-memory",
            heap,
        ],
        check=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def start_artemis(
    workdir: Path | str,
    *,
    heap: str = "1G",
    timeout: float = 120.0,
    install: bool = True,
) -> BrokerHandle:
    home = ensure_installed() if install else HOME
    base = Path(workdir).resolve()
    base.mkdir(parents=True, exist_ok=True)
    instance = base / "instance"
    create_instance(home, instance, heap)
    stomp_port, amqp_port, core_port = free_ports(3)
    broker_xml = instance / "etc" / "broker.xml"
    text = broker_xml.read_text()
    text, n = re.subn(
        r"<acceptors>.*?</acceptors>",
        acceptors(stomp_port, amqp_port, core_port),
        text,
        count=1,
        flags=re.S,
    )
    text, m = re.subn(r"<address-settings>", ADDRESS_SETTINGS, text, count=1)
    if n != 1 or m != 1:
        raise RuntimeError(f"no <acceptors> or <address-settings> in {broker_xml}")
    broker_xml.write_text(text)
    out_path = base / "artemis.out"
    out = open(out_path, "ab")  # noqa: SIM115 - the child owns it from here
    try:
        # bin/artemis execs the JVM, so the child's pid is the broker's.
        proc = popen(
            [str(instance / "bin" / "artemis"), "run"],
            cwd=instance,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    finally:
        out.close()
    handle = BrokerHandle(
        name="artemis",
        version=f"Artemis {VERSION}",
        proc=proc,
        stomp_port=stomp_port,
        workdir=base,
        log_path=out_path,
        ports={"stomp": stomp_port, "amqp": amqp_port, "core": core_port},
        connect_headers={},
        # consumer-window-size counts bytes; without it Artemis' STOMP consumers hold
        # only a couple of the load generator's messages at a time
        window_overhead=WINDOW_OVERHEAD,
    )
    try:
        wait_stomp_ready(proc, stomp_port, timeout, out_path, what="Artemis")
    except BaseException:
        handle.stop()
        raise
    return handle


if __name__ == "__main__":  # manual check: python -m bench.peers.artemis
    import tempfile
    import time

    with tempfile.TemporaryDirectory(prefix="artemis-") as d:
        t0 = time.monotonic()
        h = start_artemis(d)
        print(
            f"Artemis ready on 127.0.0.1:{h.stomp_port} (amqp {h.ports['amqp']}) pid {h.pid} in "
            f"{time.monotonic() - t0:.1f} s; rss {h.rss_bytes() >> 20} MiB cpu {h.cpu_s():.1f} s"
        )
        print("stop ->", h.stop())
