"""Network namespaces for partition tests (iproute2, as root).

``NetnsLab(["zk", "n1", "n2", "n3"])`` makes one namespace per member and a
hub namespace holding a bridge; each member has one veth pair to the hub
(``eth0`` inside it, ``v-<member>`` on the bridge) and an address in
10.213.0.0/24, which exists only inside these namespaces: the host's own
interfaces and routes are never touched. ``cut(member)`` sets the member's
hub end down, so the member sees silence, not errors (a real partition);
``heal(member)`` sets it up again.

Processes and sockets enter a member with ``inside(member)``: it moves the
calling thread alone into the namespace (``setns``), so a socket made or a
process started there belongs to it, and other threads are unaffected.
``close()`` deletes every namespace (a process still inside keeps its
namespace, unnamed, until it exits: stop them first); fixtures call it even
when the test failed.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager

CLONE_NEWNET = 0x40000000
SUBNET = "10.213.0"  # /24, inside the lab's namespaces only

_libc = ctypes.CDLL(None, use_errno=True)


def unavailable() -> str | None:
    """Why a lab cannot be built here, or None (worded as tests/skips.py words skips)."""
    if shutil.which("ip") is None:
        return "missing: ip (make sysdeps)"
    if os.geteuid() != 0:
        return "kernel: network namespaces need root"
    return None


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


class NetnsLab:
    def __init__(self, members: list[str], prefix: str | None = None) -> None:
        self.prefix = prefix or f"shoal{os.getpid()}"
        self.members = list(members)
        self.hub = f"{self.prefix}-hub"
        self.address = {m: f"{SUBNET}.{10 + i}" for i, m in enumerate(self.members)}
        self.created: list[str] = []

    def ns(self, member: str) -> str:
        return f"{self.prefix}-{member}"

    def _ip(self, *args: str) -> None:
        subprocess.run(["ip", *args], check=True, capture_output=True, timeout=20)

    def open(self) -> NetnsLab:
        try:
            for name in [self.hub, *(self.ns(m) for m in self.members)]:
                self._ip("netns", "add", name)
                self.created.append(name)
                self._ip("-n", name, "link", "set", "lo", "up")
            self._ip("-n", self.hub, "link", "add", "br0", "type", "bridge")
            self._ip("-n", self.hub, "link", "set", "br0", "up")
            for m in self.members:
                ns, end = self.ns(m), f"v-{m}"
                self._ip("-n", self.hub, "link", "add", end, "type", "veth", "peer", "name",
                         "eth0", "netns", ns)  # fmt: skip
                self._ip("-n", self.hub, "link", "set", end, "master", "br0", "up")
                self._ip("-n", ns, "addr", "add", f"{self.address[m]}/24", "dev", "eth0")
                self._ip("-n", ns, "link", "set", "eth0", "up")
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        for name in reversed(self.created):
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=20)
        self.created = []

    def cut(self, member: str) -> None:
        self._ip("-n", self.hub, "link", "set", f"v-{member}", "down")

    def heal(self, member: str) -> None:
        self._ip("-n", self.hub, "link", "set", f"v-{member}", "up")

    @contextmanager
    def inside(self, member: str) -> Iterator[None]:
        """The calling thread in ``member``'s namespace for the block."""
        with (
            open(f"/var/run/netns/{self.ns(member)}") as target,
            open(f"/proc/{os.getpid()}/task/{threading.get_native_id()}/ns/net") as home,
        ):
            _setns(target.fileno())
            try:
                yield
            finally:
                _setns(home.fileno())

    def __enter__(self) -> NetnsLab:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()
