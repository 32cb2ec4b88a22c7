"""What the machine is, and whether it is quiet enough to measure on."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import time

from bench.peers.common import machine_busy_s


def machine_info() -> dict:
    info: dict = {
        "hostname": platform.node(),
        "cpus": os.cpu_count(),
        "kernel": platform.release(),
        "python": sys.version.split()[0],
    }
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu_model"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        with open("/proc/meminfo") as f:
            kb = int(f.readline().split()[1])
            info["mem_gib"] = round(kb / 1024 / 1024, 1)
    except (OSError, ValueError):
        pass
    try:
        with open("/etc/os-release") as f:
            for line in f:
                if line.startswith("PRETTY_NAME="):
                    info["os"] = line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    try:
        r = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=20)
        info["java"] = (r.stderr or r.stdout).splitlines()[0] if (r.stderr or r.stdout) else "?"
    except (OSError, subprocess.SubprocessError):
        info["java"] = None
    return info


def other_load(seconds: float = 1.0, exclude_cpu=None) -> float:
    """Cores the machine was busy over `seconds`, minus `exclude_cpu()` (our own brokers)."""
    b0 = machine_busy_s()
    e0 = exclude_cpu() if exclude_cpu else 0.0
    time.sleep(seconds)
    b1 = machine_busy_s()
    e1 = exclude_cpu() if exclude_cpu else 0.0
    return max(0.0, ((b1 - b0) - (e1 - e0)) / seconds)


def wait_idle(threshold: float, max_wait: float, exclude_cpu=None, log=print) -> dict:
    """Wait until other load stays below `threshold` cores for 3 s (at most `max_wait` s)."""
    t0 = time.monotonic()
    quiet = 0
    last = 0.0
    while True:
        last = other_load(1.0, exclude_cpu)
        quiet = quiet + 1 if last <= threshold else 0
        waited = time.monotonic() - t0
        if quiet >= 3:
            return {"waited_s": round(waited, 1), "other_cores": round(last, 2), "idle": True}
        if waited >= max_wait:
            log(f"  machine still busy after {waited:.0f} s ({last:.2f} cores); measuring anyway")
            return {"waited_s": round(waited, 1), "other_cores": round(last, 2), "idle": False}
