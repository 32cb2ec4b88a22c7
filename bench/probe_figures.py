"""Figures for the hostile-input probes: what a broker keeps and how long it stalls.

    python -m bench.probe_figures [--out bench/recorded/probes-<stamp>.json]

Starts a real ``shoal serve`` per probe (as tests/probes do, with their raw
AMQP frames) and measures, while a STOMP bystander on another connection
sends and receives:

* the broker's RSS growth (MiB) after an 80 MB multi-frame AMQP transfer
  past a 1 MiB limit, after 20 links each with 3.6 MB of partial transfers,
  and after one connection asks for 32,767 sessions; with the close or
  detach condition the client got;
* how long the bystander's round trip takes while a consumer's LIKE
  selector (``%a%a%a%a%a%a%a%a%b``) meets a value of 48 'a's: the event
  loop's stall.

The tests in tests/probes assert bounds; this records the numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))  # the probes' raw AMQP frames and test broker

from probes.wire import (  # noqa: E402
    DETACH,
    FLOW,
    Bystander,
    RawAmqp,
    attach_sender,
    begin,
    error_conditions,
    open_frame,
    rss_kib,
    transfer,
)
from support import ShoalProcess, compiled_build_problem  # noqa: E402

MIB = 1024 * 1024


def _broker(tmp: Path, name: str, limits: dict[str, int] | None = None) -> ShoalProcess:
    config = None
    if limits:
        config = tmp / f"{name}.toml"
        config.write_text("[limits]\n" + "".join(f'"{k}" = {v}\n' for k, v in limits.items()))
    return ShoalProcess(tmp / name, config).start()


def _attached(client: RawAmqp, links: int) -> None:
    seen = 0
    while seen < links:
        for code, _ in client.until(FLOW):
            seen += code == FLOW


def _growth(srv: ShoalProcess, before: int) -> float:
    assert srv.proc is not None
    return round((rss_kib(srv.proc.pid) - before) / 1024, 1)


def oversize_transfer(tmp: Path) -> dict[str, Any]:
    srv = _broker(tmp, "oversize", {"max-frame-bytes": MIB})
    try:
        assert srv.proc is not None
        bystander, before = Bystander(srv.stomp_port), rss_kib(srv.proc.pid)
        client = RawAmqp(srv.amqp_port)
        client.open()
        client.send(attach_sender(0, 0, "big"))
        _attached(client, 1)
        chunk = os.urandom(1000 * 1000)
        for _ in range(80):
            client.send(transfer(0, 0, 0, chunk, more=True))
        conditions = error_conditions(client.until(DETACH), DETACH)
        bystander.round_trip()
        return {"sent_mb": 80, "rss_growth_mib": _growth(srv, before), "detach": conditions}
    finally:
        srv.stop(check=False)


def partial_transfers(tmp: Path) -> dict[str, Any]:
    srv = _broker(tmp, "partials", {"max-amqp-partial-bytes-per-connection": 4 * MIB})
    try:
        assert srv.proc is not None
        bystander, before = Bystander(srv.stomp_port), rss_kib(srv.proc.pid)
        client = RawAmqp(srv.amqp_port)
        client.open()
        client.send(b"".join(attach_sender(0, h, f"part{h}") for h in range(20)))
        _attached(client, 20)
        chunk = os.urandom(900 * 1000)
        try:
            for _ in range(4):
                for handle in range(20):
                    client.send(transfer(0, handle, handle, chunk, more=True))
        except OSError:
            pass  # closed by the broker, as it should be
        condition = client.close_condition()
        bystander.round_trip()
        return {
            "links": 20,
            "sent_mb": 72,
            "rss_growth_mib": _growth(srv, before),
            "close": condition,
        }
    finally:
        srv.stop(check=False)


def many_sessions(tmp: Path) -> dict[str, Any]:
    srv = _broker(tmp, "sessions")
    try:
        assert srv.proc is not None
        bystander, before = Bystander(srv.stomp_port), rss_kib(srv.proc.pid)
        client = RawAmqp(srv.amqp_port)
        client.send(open_frame() + b"".join(begin(c) for c in range(1, 32768)))
        condition = client.close_condition()
        bystander.round_trip()
        return {"sessions_asked": 32767, "rss_growth_mib": _growth(srv, before), "close": condition}
    finally:
        srv.stop(check=False)


def like_selector_stall(tmp: Path) -> dict[str, Any]:
    import stomp

    srv = _broker(tmp, "selector")
    try:
        bystander = Bystander(srv.stomp_port)
        bystander.round_trip()
        t0 = time.perf_counter()
        bystander.round_trip()
        idle_s = time.perf_counter() - t0
        evil = stomp.Connection12([("127.0.0.1", srv.stomp_port)])
        evil.connect(wait=True)
        evil.subscribe(
            "/queue/evil", id="1", ack="auto", headers={"selector": "x LIKE '%a%a%a%a%a%a%a%a%b'"}
        )
        evil.send("/queue/evil", "m", headers={"x": "a" * 48, "receipt": "r1"})
        t0 = time.perf_counter()
        bystander.round_trip()
        stalled_s = time.perf_counter() - t0
        evil.disconnect()
        bystander.close()
        return {
            "value": "48 x 'a'",
            "bystander_round_trip_s": round(stalled_s, 4),
            "idle_round_trip_s": round(idle_s, 4),
        }
    finally:
        srv.stop(check=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", help="write the record here (JSON)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="shoal-probes-") as tmp:
        figures = {
            probe.__name__: probe(Path(tmp))
            for probe in (oversize_transfer, partial_transfers, many_sessions, like_selector_stall)
        }
    record = {
        "date": time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()),
        "command": "python -m bench.probe_figures" + (f" --out {args.out}" if args.out else ""),
        "build": "pure"
        if os.environ.get("SHOAL_PURE") == "1" or compiled_build_problem() is not None
        else "compiled",
        "loadavg": Path("/proc/loadavg").read_text().split()[:3],
        "figures": figures,
    }
    text = json.dumps(record, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
