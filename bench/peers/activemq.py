"""ActiveMQ 5.17 from the Debian package, as a private instance on free loopback ports.

    h = start_activemq(workdir)      # polls until a STOMP CONNECT succeeds
    h.stomp_port, h.pid              # pid is the JVM's: CPU and RSS are read from it
    h.stop()                         # SIGTERM (clean broker stop), then SIGKILL the group

The instance lives in `workdir`: conf/ (activemq.xml and log4j.properties copied from
bench/peers/activemq/), data/ (KahaDB, activemq.log) and tmp/. The JVM is started the
way /usr/bin/activemq starts it (same -jar launcher, same --add-opens, same system
properties), but in the foreground of our own process group, with a 1 GiB heap.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from bench.peers.common import (
    BrokerHandle,
    ensure_package,
    free_ports,
    package_version,
    popen,
    wait_stomp_ready,
)

HERE = Path(__file__).resolve().parent / "activemq"
ACTIVEMQ_HOME = Path("/usr/share/activemq")
LAUNCHER = ACTIVEMQ_HOME / "bin" / "activemq.jar"
PACKAGE = "activemq"

# What /usr/bin/activemq passes on JDK 9+ (Debian 5.17.2), so the launcher behaves the same.
JDK_OPENS = [
    "--add-reads=java.xml=java.logging",
    "--add-opens",
    "java.base/java.security=ALL-UNNAMED",
    "--add-opens",
    "java.base/java.net=ALL-UNNAMED",
    "--add-opens",
    "java.base/java.lang=ALL-UNNAMED",
    "--add-opens",
    "java.base/java.util=ALL-UNNAMED",
    "--add-opens",
    "java.naming/javax.naming.spi=ALL-UNNAMED",
    "--add-opens",
    "java.rmi/sun.rmi.transport.tcp=ALL-UNNAMED",
    "--add-opens",
    "java.base/java.util.concurrent=ALL-UNNAMED",
    "--add-opens",
    "java.base/java.util.concurrent.atomic=ALL-UNNAMED",
    "--add-exports=java.base/sun.net.www.protocol.http=ALL-UNNAMED",
    "--add-exports=java.base/sun.net.www.protocol.https=ALL-UNNAMED",
    "--add-exports=java.base/sun.net.www.protocol.jar=ALL-UNNAMED",
    "--add-exports=jdk.xml.dom/org.w3c.dom.html=ALL-UNNAMED",
    "--add-exports=jdk.naming.rmi/com.sun.jndi.url.rmi=ALL-UNNAMED",
]


def java_binary() -> str:
    for cand in ("/usr/lib/jvm/default-java/bin/java", shutil.which("java")):
        if cand and os.access(cand, os.X_OK):
            return cand
    raise RuntimeError("no java binary (install openjdk-17-jre-headless)")


def ensure_installed() -> None:
    """Install the Debian package only when it is missing."""
    ensure_package(PACKAGE)
    if not LAUNCHER.exists():
        raise RuntimeError(f"{LAUNCHER} missing although package {PACKAGE} is installed")


def start_activemq(
    workdir: Path | str,
    *,
    heap: str = "1G",
    timeout: float = 90.0,
    install: bool = True,
    extra_jvm_args: list[str] | None = None,
) -> BrokerHandle:
    if install:
        ensure_installed()
    base = Path(workdir).resolve()
    conf, data, tmp = base / "conf", base / "data", base / "tmp"
    for d in (conf, data, tmp):
        d.mkdir(parents=True, exist_ok=True)
    for name in ("activemq.xml", "log4j.properties"):
        shutil.copy(HERE / name, conf / name)
    stomp_port, openwire_port = free_ports(2)
    cmd = [
        java_binary(),
        f"-Xms{heap}",
        f"-Xmx{heap}",
        # as /usr/share/activemq/activemq-options (the Debian package's defaults)
        "-Dorg.apache.activemq.UseDedicatedTaskRunner=true",
        "-Djava.util.logging.config.file=logging.properties",
        f"-Djava.io.tmpdir={tmp}",
        *JDK_OPENS,
        f"-Dactivemq.classpath={conf}",
        f"-Dactivemq.home={ACTIVEMQ_HOME}",
        f"-Dactivemq.base={base}",
        f"-Dactivemq.conf={conf}",
        f"-Dactivemq.data={data}",
        f"-Dbench.stomp.port={stomp_port}",
        f"-Dbench.openwire.port={openwire_port}",
        *(extra_jvm_args or []),
        "-jar",
        str(LAUNCHER),
        "start",
        f"xbean:file:{conf / 'activemq.xml'}",
    ]
    out_path = base / "activemq.out"
    out = open(out_path, "ab")  # noqa: SIM115 - the child owns it from here
    try:
        proc = popen(
            cmd,
            cwd=base,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={
                **os.environ,
                "ACTIVEMQ_BASE": str(base),
                "ACTIVEMQ_CONF": str(conf),
                "ACTIVEMQ_DATA": str(data),
                "ACTIVEMQ_HOME": str(ACTIVEMQ_HOME),
            },
        )
    finally:
        out.close()
    handle = BrokerHandle(
        name="activemq",
        version=f"ActiveMQ {package_version(PACKAGE)}",
        proc=proc,
        stomp_port=stomp_port,
        workdir=base,
        log_path=out_path,
        ports={"stomp": stomp_port, "openwire": openwire_port},
        connect_headers={},
    )
    try:
        wait_stomp_ready(proc, stomp_port, timeout, out_path, what="ActiveMQ")
    except BaseException:
        handle.stop()
        raise
    return handle


if __name__ == "__main__":  # manual check: python -m bench.peers.activemq
    import tempfile
    import time

    with tempfile.TemporaryDirectory(prefix="amq-") as d:
        t0 = time.monotonic()
        h = start_activemq(d)
        print(
            f"ActiveMQ ready on 127.0.0.1:{h.stomp_port} pid {h.pid} in "
            f"{time.monotonic() - t0:.1f} s; rss {h.rss_bytes() >> 20} MiB cpu {h.cpu_s():.1f} s"
        )
        print("stop ->", h.stop())
