"""Time to recover N persistent messages after kill -9, Shoal and ActiveMQ in one run.

    .venv/bin/python -m bench.recovery [--messages 1000000] [--broker shoal --broker activemq]
                                       [--reps 3] [--out bench/recorded/recovery-DATE.json]

For each broker: start it in a private temp dir, pipeline N persistent 256 B SENDs
(100 groups) with a RECEIPT on the last one (every earlier SEND is then stored too),
SIGKILL the broker's process group, start it again on the same data and measure the
wall time from the start command to the first STOMP CONNECTED, with the broker's CPU,
RSS and peak RSS at that point. For Shoal the recovered queue depth is read back from
the management API and must equal N. The issue's goal: 1M messages in at most 10 s.

``--shoal-budget BYTES`` runs Shoal with ``[limits] global-max-size`` (a memory
budget for message bodies): its journal then recovers without reading bodies, and
the peak RSS shows what a restart costs a broker whose backlog exceeds its memory.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench.loadgen.wire import Conn, frame
from bench.peers.activemq import start_activemq
from bench.peers.shoal import start_shoal

QUEUE = "RECOVERY.BENCH"
BODY = b"x" * 256


def fill(port: int, n: int, connect_headers: dict[str, str]) -> float:
    """Pipelined persistent SENDs; returns seconds until the last one's RECEIPT."""
    conn = Conn(port, timeout=600)
    conn.connect(connect_headers)
    t0 = time.monotonic()
    batch: list[bytes] = []
    for i in range(n):
        headers = {
            "destination": f"/queue/{QUEUE}",
            "persistent": "true",
            "JMSXGroupID": f"g{i % 100}",
            "content-length": str(len(BODY)),
        }
        if i == n - 1:
            headers["receipt"] = "last"
        batch.append(frame("SEND", headers, BODY))
        if len(batch) == 256:
            conn.sock.sendall(b"".join(batch))
            batch.clear()
    if batch:
        conn.sock.sendall(b"".join(batch))
    conn.wait_receipt(b"last", timeout=600)
    took = time.monotonic() - t0
    conn.close()
    return took


def shoal_depth(http_port: int) -> int:
    with urllib.request.urlopen(
        f"http://127.0.0.1:{http_port}/api/queues/{QUEUE}", timeout=60
    ) as resp:
        return int(json.load(resp)["depth"])


def measure(broker: str, n: int, workdir: Path, shoal_budget: int = -1) -> dict:
    if broker == "shoal":
        config = None
        if shoal_budget >= 0:
            config = workdir / "budget.toml"
            config.write_text(f"[limits]\nglobal-max-size = {shoal_budget}\n")

        def start(d: Path) -> Any:
            return start_shoal(d, config=config)
    else:
        start = start_activemq
    h = start(workdir)
    try:
        fill_s = fill(h.stomp_port, n, h.connect_headers)
        os.killpg(h.proc.pid, signal.SIGKILL)
        h.proc.wait(30)
    finally:
        h.stop()
    t0 = time.monotonic()
    h = start(workdir)  # the same data directory
    ready_s = time.monotonic() - t0
    try:
        out = {
            "broker": broker,
            "messages": n,
            "fill_s": round(fill_s, 1),
            "recovery_s": round(ready_s, 2),
            "cpu_s": round(h.cpu_s(), 2),
            "rss_mib": round(h.rss_bytes() / 2**20),
            "peak_rss_mib": round(h.peak_rss_bytes() / 2**20),
        }
        if broker == "shoal" and shoal_budget >= 0:
            out["budget_bytes"] = shoal_budget
        if broker == "shoal":
            out["depth_after"] = shoal_depth(h.ports["http"])
        return out
    finally:
        h.stop()


def _spread(vals: list) -> str:
    if not vals:
        return "–"
    vals, med = sorted(vals), statistics.median(vals)
    return f"{med:g}" if len(vals) == 1 else f"{med:g} ({vals[0]:g}–{vals[-1]:g})"


def section(path: Path, data: dict) -> list[str]:
    """docs/benchmarks.md's section body for the latest recorded run."""
    from bench.report import BROKER_LABEL, md_table

    by_broker: dict[str, list[dict]] = {}
    for r in data["results"]:
        label = BROKER_LABEL.get(r["broker"], r["broker"])
        if r.get("budget_bytes", -1) >= 0:
            label += f" (global-max-size {r['budget_bytes'] / 2**20:g} MiB)"
        by_broker.setdefault(label, []).append(r)
    keys = ("fill_s", "recovery_s", "cpu_s", "rss_mib", "peak_rss_mib")
    rows = [
        [label, f"{rs[0]['messages']:,}", len(rs)]
        + [_spread([r[k] for r in rs if k in r]) for k in keys]
        + [", ".join(map(str, sorted({r["depth_after"] for r in rs if "depth_after" in r}))) or "–"]
        for label, rs in by_broker.items()
    ]
    columns = ["broker", "messages", "reps", "fill s (pipelined, persistent)", "recovery s"]
    columns += ["broker CPU s", "RSS MiB after", "peak RSS MiB", "depth after"]
    return [
        f"`bench/recorded/{path.name}`, {data.get('date', '')}: `{data.get('command')}`. "
        "Goal: 1M messages in at most 10 s. Time from the start command to the first "
        "STOMP CONNECTED after SIGKILL of a broker holding the messages; Shoal's "
        "recovered queue depth is read back from its API. Medians, min–max in brackets.",
        "",
        *md_table(columns, rows),
    ]


def history(runs: list[tuple[Path, dict]]) -> list[str]:
    """docs/benchmark-history.md's lines for every recorded run, newest first."""
    from bench.report import BROKER_LABEL

    out = ["## Recovery runs", ""]
    for p, d in reversed(runs):
        each = [
            f"{BROKER_LABEL.get(r['broker'], r['broker'])} {r['recovery_s']} s"
            for r in d["results"]
        ]
        out.append(f"- `{p.name}` ({d.get('date', '')}, `{d.get('command')}`): {', '.join(each)}.")
    return [*out, ""]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.recovery")
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--broker", action="append", choices=["shoal", "activemq"])
    ap.add_argument(
        "--reps",
        type=int,
        default=1,
        help="repetitions; the brokers take turns in each (default 1)",
    )
    ap.add_argument("--out", default=None, help="also write the results as JSON here")
    ap.add_argument(
        "--shoal-budget",
        type=int,
        action="append",
        metavar="BYTES",
        help="Shoal's global-max-size; repeat to measure Shoal once per value "
        "(default -1: no budget, every body in memory)",
    )
    a = ap.parse_args(argv)
    runs = [
        (b, budget)
        for b in a.broker or ["shoal", "activemq"]
        for budget in (a.shoal_budget or [-1] if b == "shoal" else [-1])
    ]
    results = []
    for rep in range(a.reps):
        for broker, budget in runs:
            with tempfile.TemporaryDirectory(prefix=f"bench-recovery-{broker}-") as d:
                r = measure(broker, a.messages, Path(d), budget)
            r["rep"] = rep
            print(json.dumps(r), flush=True)
            results.append(r)
    if a.out:
        Path(a.out).write_text(
            json.dumps(
                {
                    "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                    "command": "python -m bench.recovery "
                    + " ".join(sys.argv[1:] if argv is None else argv),
                    "results": results,
                },
                indent=1,
            )
            + "\n"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
