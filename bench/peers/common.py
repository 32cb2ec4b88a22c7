"""What every peer launcher shares: free ports, readiness polling, process-group stop,
/proc readings, and installing a Debian package only when it is missing."""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench.loadgen.wire import Conn, StompError, frame

CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


_PR_SET_PDEATHSIG = 1
_LIVE: weakref.WeakSet = weakref.WeakSet()


def _die_with_parent() -> None:  # runs in the child between fork and exec
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        pass


def popen(cmd, **kw) -> subprocess.Popen:
    """Popen in a new session (so the whole group can be killed), and SIGKILLed by the
    kernel if the Python process that started it dies without stopping it."""
    return subprocess.Popen(cmd, start_new_session=True, preexec_fn=_die_with_parent, **kw)


@atexit.register
def _stop_leftovers() -> None:
    for h in list(_LIVE):
        try:
            h.stop()
        except Exception:
            pass


def free_ports(n: int) -> list[int]:
    """`n` distinct free loopback ports (all sockets held open until every port is chosen)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def free_port() -> int:
    return free_ports(1)[0]


def stomp_connect_ok(
    port: int, headers: dict[str, str] | None = None, timeout: float = 2.0
) -> bool:
    """True if a STOMP CONNECT on 127.0.0.1:port gets CONNECTED back."""
    try:
        conn = Conn(port, timeout=timeout)
    except OSError:
        return False
    try:
        conn.connect(headers)
    except (OSError, ConnectionError, StompError, ValueError):
        return False
    else:
        with contextlib.suppress(OSError):
            conn.sock.sendall(frame("DISCONNECT"))
        return True
    finally:
        conn.close()


def wait_stomp_ready(
    proc: subprocess.Popen,
    port: int,
    timeout: float,
    log: Path | None,
    headers: dict[str, str] | None = None,
    what: str = "broker",
) -> None:
    """Poll until a STOMP CONNECT succeeds; raise (with the log's tail) if the process dies."""
    poll_ready(proc, lambda: stomp_connect_ok(port, headers), timeout, log, what, "STOMP", port)


def poll_ready(
    proc: subprocess.Popen,
    ready: Callable[[], bool],
    timeout: float,
    log: Path | None,
    what: str,
    service: str,
    port: int,
) -> None:
    """Poll ``ready()`` until it is true; raise (with the log's tail) if the process dies."""
    deadline = time.monotonic() + timeout
    delay = 0.05
    while True:
        if proc.poll() is not None:
            raise RuntimeError(
                f"{what} exited with {proc.returncode} before {service} was ready\n" + log_tail(log)
            )
        if ready():
            return
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"{what}: {service} on 127.0.0.1:{port} not ready within {timeout} s\n"
                + log_tail(log)
            )
        time.sleep(delay)
        delay = min(delay * 1.5, 0.5)


def log_tail(path: Path | None, n: int = 40) -> str:
    if path is None or not Path(path).exists():
        return ""
    lines = Path(path).read_text(errors="replace").splitlines()
    return "\n".join(lines[-n:])


def stop_process_group(proc: subprocess.Popen, term_timeout: float = 20.0) -> int | None:
    """SIGTERM the process (clean shutdown), wait, then SIGKILL its whole process group.

    The group is killed at the end in every case, so helpers the broker spawned
    (erl_child_setup, epmd, ...) never outlive it.
    """
    pgid = proc.pid  # started with start_new_session=True: pgid == pid
    if proc.poll() is None:
        try:
            proc.send_signal(signal.SIGTERM)
            proc.wait(term_timeout)
        except subprocess.TimeoutExpired:
            pass
        except ProcessLookupError:
            pass
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        pass
    return proc.returncode


def session_pids(sid: int) -> list[int]:
    """Every live pid whose session id is `sid` (a broker started with start_new_session)."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        if int(fields[3]) == sid:
            out.append(int(name))
    return out


def proc_cpu_s(pid: int, children: bool = True) -> float:
    """utime+stime (+ cutime+cstime) of `pid`, in seconds; 0 if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return 0.0
    fields = stat[stat.rfind(b")") + 2 :].split()
    # fields[0] is field 3 (state); utime=14, stime=15, cutime=16, cstime=17
    ticks = int(fields[11]) + int(fields[12])
    if children:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / CLK_TCK


def proc_rss_bytes(pid: int, field: str = "VmRSS") -> int:
    """Resident memory of ``pid``; ``field="VmHWM"`` gives its peak so far."""
    prefix = field + ":"
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(prefix):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def machine_busy_s() -> float:
    """CPU seconds the whole machine spent not idle (all cores), from /proc/stat."""
    with open("/proc/stat") as f:
        parts = f.readline().split()
    user, nice, system, idle, iowait, irq, softirq, steal = (int(x) for x in parts[1:9])
    return (user + nice + system + irq + softirq + steal) / CLK_TCK


@dataclass
class BrokerHandle:
    """A running broker: where to connect and which pid to measure."""

    name: str
    version: str
    proc: subprocess.Popen
    stomp_port: int
    workdir: Path
    log_path: Path | None = None
    pid: int = 0  # the process whose CPU and RSS are the broker's (java, beam.smp, python)
    connect_headers: dict[str, str] = field(default_factory=dict)  # login, host, ...
    ports: dict[str, int] = field(default_factory=dict)
    groups: bool = True  # does this broker implement message groups?
    # A broker whose STOMP consumer window counts bytes (Artemis): the bytes a message
    # takes beyond its payload, so the load generator's window holds `prefetch` messages.
    window_overhead: int = 0
    notes: str = ""
    _stopped: bool = False

    def __post_init__(self) -> None:
        if not self.pid:
            self.pid = self.proc.pid
        _LIVE.add(self)

    def __hash__(self) -> int:
        return id(self)

    @property
    def session(self) -> int:
        return self.proc.pid

    def cpu_s(self) -> float:
        """Broker CPU seconds so far: every process in its session, plus reaped children."""
        total = 0.0
        for pid in session_pids(self.session):
            total += proc_cpu_s(pid, children=(pid == self.proc.pid or pid == self.pid))
        return total

    def rss_bytes(self) -> int:
        return proc_rss_bytes(self.pid)

    def peak_rss_bytes(self) -> int:
        return proc_rss_bytes(self.pid, "VmHWM")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> int | None:
        if self._stopped:
            return self.proc.returncode
        self._stopped = True
        return stop_process_group(self.proc)

    def __enter__(self) -> BrokerHandle:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def have_package(pkg: str) -> bool:
    r = subprocess.run(["dpkg-query", "-W", "-f=${Status}", pkg], capture_output=True, text=True)
    return r.returncode == 0 and "install ok installed" in r.stdout


def package_version(pkg: str) -> str:
    r = subprocess.run(["dpkg-query", "-W", "-f=${Version}", pkg], capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else "?"


def ensure_package(pkg: str) -> None:
    """apt-get install `pkg` only if it is missing (needs root or sudo)."""
    if have_package(pkg):
        return
    apt = ["apt-get", "-y", "-q", "-o", "Dpkg::Use-Pty=0"]
    prefix: list[str] = []
    if os.geteuid() != 0:
        if shutil.which("sudo") is None:
            raise RuntimeError(f"Debian package {pkg} is missing and we are not root (no sudo)")
        prefix = ["sudo", "-n"]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(prefix + apt + ["update"], check=True, env=env, stdout=subprocess.DEVNULL)
    subprocess.run(
        prefix + apt + ["install", "--no-install-recommends", pkg],
        check=True,
        env=env,
        stdout=subprocess.DEVNULL,
    )
    if not have_package(pkg):
        raise RuntimeError(f"apt-get install {pkg} did not install it")
