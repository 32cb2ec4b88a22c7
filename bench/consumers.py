"""Many consumers on one queue: the cost of subscribing, dispatching and closing.

    python -m bench.consumers --consumers 10000            # in-process core
    python -m bench.consumers --consumers 2000 --e2e       # also a real broker over STOMP

Core: one :class:`~shoal.broker.core.Broker`, N consumers subscribed to one
queue (``--per-conn`` per connection, prefetch 1, client-individual), then
``--messages`` messages over ``--groups`` groups sent and acked in batches
(each new group is assigned by G6's "fewest groups" rule, so this times
``pick_for_group`` with N consumers), then every consumer unsubscribed.
Wall-clock seconds of each phase; all of it runs on one thread, as the event
loop would.

E2E (``--e2e``): ``shoal serve`` on loopback; N SUBSCRIBE frames sent over a
few raw STOMP connections (``--per-conn`` each, the server's
``max-subscriptions-per-connection`` default is 1,000), a RECEIPT awaited on
each connection; meanwhile another thread times ``GET /health`` every 50 ms.
Then the connections close and the broker is asked until its queue has no
consumers. Reported: seconds to subscribe and to close, and the worst
``/health`` latency seen in each phase.
"""

from __future__ import annotations

import argparse
import gc
import http.client
import json
import shlex
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from shoal.broker.core import Broker
from shoal.broker.settings import AddressSettings


def core_run(n: int, per_conn: int, messages: int, groups: int) -> dict[str, Any]:
    b = Broker(AddressSettings(), 0.0)
    b.connect(1, 0.0)
    subs = []
    for i in range(n):
        conn = 100 + i // per_conn
        if i % per_conn == 0:
            b.connect(conn, 0.0)
        subs.append((conn, f"s{i}"))
    prefetch = {"prefetch-count": "1"}
    gc.collect()
    t0 = time.perf_counter()
    for conn, sub in subs:
        b.subscribe(conn, sub, "/queue/many", "client-individual", prefetch, 1.0)
    t_sub = time.perf_counter() - t0
    b.take_effects()

    body = b"x" * 100
    hdrs = [{"JMSXGroupID": f"g{g}"} for g in range(groups)]
    t0 = time.perf_counter()
    delivered = 0
    for j in range(messages):
        b.send(1, "/queue/many", hdrs[j % groups], body, 1.0)
        if j % 100 == 99 or j == messages - 1:
            for e in b.take_effects():
                b.ack(e.conn_id, e.ack_id, 1.0)
                delivered += 1
    for e in b.take_effects():  # what the acks let through
        b.ack(e.conn_id, e.ack_id, 1.0)
        delivered += 1
    t_dispatch = time.perf_counter() - t0
    q = b.queue("many")
    busiest = max(len(q.groups.groups_of(c)) for c in q.consumers)

    t0 = time.perf_counter()
    for conn, sub in subs:
        b.unsubscribe(conn, sub, 2.0)
    t_unsub = time.perf_counter() - t0
    assert not q.consumers and q.depth == 0, (len(q.consumers), q.depth)
    return {
        "consumers": n,
        "subscribe_s": round(t_sub, 3),
        "messages": messages,
        "groups": groups,
        "delivered": delivered,
        "dispatch_s": round(t_dispatch, 3),
        "most_groups_per_consumer": busiest,
        "unsubscribe_s": round(t_unsub, 3),
    }


# -- e2e -------------------------------------------------------------------------------


def _frame(command: str, headers: dict[str, str]) -> bytes:
    head = "".join(f"{k}:{v}\n" for k, v in headers.items())
    return f"{command}\n{head}\n".encode() + b"\0"


def _read_until(sock: socket.socket, marker: bytes, timeout: float) -> bytes:
    sock.settimeout(timeout)
    buf = b""
    while marker not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed before {marker!r}: {buf[-200:]!r}")
        buf += chunk
    return buf


class HealthProbe(threading.Thread):
    """GET /health every ``interval`` s; keeps the worst latency since the last ``take``."""

    def __init__(self, port: int, interval: float = 0.05) -> None:
        super().__init__(daemon=True)
        self.port = port
        self.interval = interval
        self.worst = 0.0
        self.count = 0
        self.busy = False
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            t0 = time.perf_counter()
            self.busy = True
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
                c.request("GET", "/health")
                c.getresponse().read()
                c.close()
            except OSError:
                pass
            dt = time.perf_counter() - t0
            self.worst = max(self.worst, dt)
            self.count += 1
            self.busy = False
            self.stop.wait(self.interval)

    def take(self) -> tuple[float, int]:
        """Worst latency and probes since the last call, the one in flight included."""
        while self.busy and self.is_alive():
            time.sleep(0.005)
        out = (self.worst, self.count)
        self.worst = 0.0
        self.count = 0
        return out


def _consumers_of(port: int, queue: str) -> int:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    c.request("GET", f"/api/queues/{queue}")
    r = c.getresponse()
    data = r.read()
    c.close()
    if r.status == 404:
        return 0
    return int(json.loads(data)["consumers"])


def e2e_run(n: int, per_conn: int) -> dict[str, Any]:
    from bench.peers.shoal import start_shoal

    with tempfile.TemporaryDirectory(prefix="shoal-consumers-") as d:
        h = start_shoal(d, persistent_data=False)
        http_port = h.ports["http"]
        probe = HealthProbe(http_port)
        socks: list[socket.socket] = []
        try:
            probe.start()
            time.sleep(0.3)
            probe.take()
            t0 = time.perf_counter()
            for start in range(0, n, per_conn):
                s = socket.create_connection(("127.0.0.1", h.stomp_port))
                s.sendall(_frame("CONNECT", {"accept-version": "1.2", "host": "localhost"}))
                _read_until(s, b"\0", 30)
                frames = [
                    _frame(
                        "SUBSCRIBE",
                        {
                            "id": f"s{i}",
                            "destination": "/queue/many",
                            "ack": "client-individual",
                            "prefetch-count": "1",
                        },
                    )
                    for i in range(start, min(n, start + per_conn))
                ]
                # a receipted SEND after them: answered once they all went through
                frames.append(_frame("SEND", {"destination": "/queue/other", "receipt": "done"}))
                s.sendall(b"".join(frames))
                socks.append(s)
            for s in socks:
                _read_until(s, b"receipt-id:done", 600)
            t_sub = time.perf_counter() - t0
            worst_sub, probes_sub = probe.take()
            seen = _consumers_of(http_port, "many")
            t0 = time.perf_counter()
            for s in socks:
                s.close()
            socks.clear()
            while _consumers_of(http_port, "many"):
                time.sleep(0.02)
            t_close = time.perf_counter() - t0
            worst_close, probes_close = probe.take()
        finally:
            probe.stop.set()
            for s in socks:
                s.close()
            h.stop()
    return {
        "consumers": n,
        "per_connection": per_conn,
        "consumers_seen": seen,
        "subscribe_s": round(t_sub, 3),
        "health_worst_subscribe_ms": round(worst_sub * 1000, 1),
        "health_probes_subscribe": probes_sub,
        "close_s": round(t_close, 3),
        "health_worst_close_ms": round(worst_close * 1000, 1),
        "health_probes_close": probes_close,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument(
        "--consumers",
        type=int,
        action="append",
        help="consumers on the queue (repeatable; default 500, 2000, 10000)",
    )
    ap.add_argument("--per-conn", type=int, default=500, help="subscriptions per connection")
    ap.add_argument("--messages", type=int, default=20_000)
    ap.add_argument("--groups", type=int, default=5_000)
    ap.add_argument("--e2e", action="store_true", help="also against a real `shoal serve`")
    ap.add_argument("--json", action="store_true", help="print JSON lines")
    ap.add_argument(
        "--out",
        help="also write the results to this JSON file "
        "(bench/recorded/consumers-*.json are shown in docs/benchmarks.md)",
    )
    ap.add_argument("--label", default="", help="what was measured (e.g. the git revision)")
    args = ap.parse_args()
    results: list[dict[str, Any]] = []
    for n in args.consumers or [500, 2000, 10_000]:
        r = core_run(n, args.per_conn, args.messages, args.groups)
        results.append({"kind": "core", **r})
        if args.json:
            print(json.dumps({"kind": "core", **r}))
        else:
            print(
                f"core {n:>6,} consumers: subscribe {r['subscribe_s']:.3f} s, "
                f"{r['messages']:,} msgs / {r['groups']:,} groups dispatched+acked "
                f"{r['dispatch_s']:.3f} s (most groups on one consumer "
                f"{r['most_groups_per_consumer']}), unsubscribe {r['unsubscribe_s']:.3f} s"
            )
        if args.e2e:
            r = e2e_run(n, args.per_conn)
            results.append({"kind": "e2e", **r})
            if args.json:
                print(json.dumps({"kind": "e2e", **r}))
            else:
                print(
                    f"e2e  {n:>6,} consumers ({r['per_connection']}/connection, "
                    f"{r['consumers_seen']} seen): subscribe {r['subscribe_s']:.3f} s "
                    f"(worst /health {r['health_worst_subscribe_ms']:.0f} ms), close "
                    f"{r['close_s']:.3f} s (worst /health {r['health_worst_close_ms']:.0f} ms)"
                )
    if args.out:
        doc = {
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "command": "python -m bench.consumers " + shlex.join(sys.argv[1:]),
            "label": args.label,
            "results": results,
        }
        with open(args.out, "w") as f:
            json.dump(doc, f, indent=1)


def markdown(docs: list[dict[str, Any]]) -> str:
    """The docs/benchmarks.md table of recorded runs (bench/report.py)."""
    out = [
        "| run | consumers | core subscribe s | core dispatch s (msgs / groups) "
        "| core unsubscribe s | e2e subscribe s (worst /health ms) "
        "| e2e close s (worst /health ms) |",
        "|---|---|---|---|---|---|---|",
    ]
    for doc in docs:
        e2e = {r["consumers"]: r for r in doc["results"] if r["kind"] == "e2e"}
        for r in doc["results"]:
            if r["kind"] != "core":
                continue
            e = e2e.get(r["consumers"])
            sub = f"{e['subscribe_s']:g} ({e['health_worst_subscribe_ms']:g})" if e else "–"
            close = f"{e['close_s']:g} ({e['health_worst_close_ms']:g})" if e else "–"
            out.append(
                f"| {doc['label']} | {r['consumers']:,} | {r['subscribe_s']:g} | "
                f"{r['dispatch_s']:g} ({r['messages']:,} / {r['groups']:,}) | "
                f"{r['unsubscribe_s']:g} | {sub} | {close} |"
            )
    return "\n".join(out)


def section(_path: Path, _latest: dict[str, Any]) -> list[str]:
    """docs/benchmarks.md's section body: every recorded run."""
    from bench.report import recorded_runs

    docs = [d for _p, d in recorded_runs("consumers-*.json", "results")]
    runs = "; ".join(f"{d['label']}: `{d['command']}` ({d['date']})" for d in docs)
    return [
        f"Runs {runs}. Core: N consumers (prefetch 1, client-individual) subscribed to "
        "one queue in process, then 20,000 messages over 5,000 groups sent and acked "
        "(every new group assigned by the fewest-groups rule), then every consumer "
        "unsubscribed; wall seconds of each phase on one thread, as on the event loop. "
        "E2E: the same subscriptions over raw STOMP connections (500 each) to `shoal "
        "serve`, then the connections closed, while another thread timed `GET /health` "
        "every 50 ms (the worst latency in each phase).",
        "",
        markdown(docs),
        *(line for d in docs if d.get("note") for line in ("", d["note"])),
    ]


if __name__ == "__main__":
    main()
