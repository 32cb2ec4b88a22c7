"""Set-up times of a fresh clone, as a newcomer gets them: `make run` without
pip's cache until the ready line (venv and install, compile, start), and with
``--install`` then `make install` (the test, Spark, bench and cluster extras).

    python -m bench.setup_times [--repo .] [--install] [--out bench/recorded]

Clones the repository's committed HEAD into a temp dir, so what is measured
is what a clone gets. `make run` serves on the default ports (STOMP 61613,
AMQP 5672, HTTP 8161): they must be free. Writes
``setup-<UTC time>.json`` with the commands, the phases and the machine.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.machine import machine_info

DEFAULT_PORTS = (61613, 5672, 8161)  # what `make run` serves on
# `make run`'s output lines that start each phase (Makefile "run", "compile")
PHASES = (
    ("install", "test -x .venv/bin/python"),
    ("compile", "'mypy>="),
    ("start", ".venv/bin/shoal serve"),
)


def ports_taken() -> list[int]:
    taken = []
    for port in DEFAULT_PORTS:
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                taken.append(port)
    return taken


def time_make_run(clone: Path, env: dict[str, str], timeout: float) -> dict[str, Any]:
    """`make run` until its ready line: the phases' start times and the line."""
    started = time.monotonic()
    proc = subprocess.Popen(
        ["make", "run"],
        cwd=clone,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None
    marks: dict[str, float] = {}
    output: list[str] = []
    ready = ""
    try:
        for line in proc.stdout:
            at = time.monotonic() - started
            output.append(line.rstrip())
            for phase, marker in PHASES:
                if phase not in marks and marker in line:
                    marks[phase] = at
            if " ready: " in line:
                marks["ready"] = at
                ready = line.strip()
                break
            if at > timeout:
                break
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)
    if not ready:
        raise SystemExit("make run did not print a ready line:\n" + "\n".join(output[-30:]))
    order = [p for p, _ in PHASES if p in marks] + ["ready"]
    phases = {
        name: round(marks[after] - marks[name], 2) for name, after in itertools.pairwise(order)
    }
    return {
        "what": "make run on a fresh clone without pip's cache, until the ready line",
        "command": "git clone <repo> fresh && cd fresh && PIP_NO_CACHE_DIR=1 make run",
        "seconds": round(marks["ready"], 2),
        "phases_s": phases,
        "ready_line": ready,
        "venv_mb": du_mb(clone / ".venv"),
        "packages": package_count(clone),
    }


def time_make_install(clone: Path, env: dict[str, str]) -> dict[str, Any]:
    started = time.monotonic()
    subprocess.run(["make", "install"], cwd=clone, env=env, check=True, capture_output=True)
    return {
        "what": "make install after make run (test, Spark, bench and cluster extras)",
        "command": "PIP_NO_CACHE_DIR=1 make install",
        "seconds": round(time.monotonic() - started, 2),
        "venv_mb": du_mb(clone / ".venv"),
        "packages": package_count(clone),
    }


def du_mb(path: Path) -> int:
    out = subprocess.run(["du", "-sm", str(path)], capture_output=True, text=True, check=True)
    return int(out.stdout.split()[0])


def package_count(clone: Path) -> int:
    out = subprocess.run(
        [str(clone / ".venv/bin/python"), "-m", "pip", "list", "--format=json"],
        capture_output=True,
        text=True,
        check=True,
    )
    return len(json.loads(out.stdout))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", type=Path, default=Path("."))
    parser.add_argument("--install", action="store_true", help="then time make install too")
    parser.add_argument("--out", type=Path, default=Path("bench/recorded"))
    parser.add_argument("--timeout", type=float, default=1800.0, help="s for make run")
    args = parser.parse_args()
    taken = ports_taken()
    if taken:
        print(f"setup_times: ports {taken} are taken; make run serves on them", file=sys.stderr)
        return 2
    commit = subprocess.run(
        ["git", "-C", str(args.repo), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHOAL_", "VIRTUAL_ENV"))}
    env["PIP_NO_CACHE_DIR"] = "1"
    with tempfile.TemporaryDirectory(prefix="shoal-setup-") as tmp:
        clone = Path(tmp) / "fresh"
        subprocess.run(["git", "clone", "-q", str(args.repo.resolve()), str(clone)], check=True)
        measurements = [time_make_run(clone, env, args.timeout)]
        print(json.dumps(measurements[-1]), flush=True)
        if args.install:
            measurements.append(time_make_install(clone, env))
            print(json.dumps(measurements[-1]), flush=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    record = {
        "date": stamp,
        "commit": commit,
        "command": "python -m bench.setup_times" + (" --install" if args.install else ""),
        "pip_env": {k: v for k, v in env.items() if k.startswith("PIP_")},
        "machine": machine_info(),
        # other work on the machine stretches every phase: the load when it ended
        "load_avg_1_5_15": list(os.getloadavg()),
        "measurements": measurements,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"setup-{stamp}.json"
    path.write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
