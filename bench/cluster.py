"""Cluster figures (docs/cluster.md, docs/benchmarks.md "Cluster"): one run.

    .venv/bin/python -m bench.cluster [--groups 300] [--messages 20000] [--out F.json]

1. Decisions: one producer sends the first message of ``--groups`` new
   groups, one at a time with a receipt, then one more message of each
   (bound by then): SEND-to-RECEIPT latency p50/p99 of both, and new groups
   per second through the ``zookeeper`` handler.
2. CW1-lite: ``--messages`` x 256 B non-persistent in 100 groups, producer on
   node 1, one consumer (client-individual) on node 2 and one on node 3 (so
   every message is forwarded), against the same load on one node without a
   cluster: msg/s, broker CPU per message summed over the nodes, order
   violations. The raw-socket Python clients are part of the machine's load.

Starts its own ZooKeeper (Debian's package) and nodes on free loopback ports.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import tempfile
import threading
import time
from pathlib import Path

from tests.support import RawStomp, ShoalProcess, free_port

from shoal.cluster.zkserver import ZooKeeperServer

BODY = b"x" * 256


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def connect(port: int) -> RawStomp:
    c = RawStomp(port, timeout=60)
    assert c.connect()[0] == "CONNECTED"
    return c


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * p))]


def decisions(node: ShoalProcess, groups: int) -> dict[str, float]:
    p = connect(node.stomp_port)
    rows: dict[str, list[float]] = {"new": [], "bound": []}
    start = time.perf_counter()
    for kind in ("new", "bound"):
        for g in range(groups):
            t = time.perf_counter()
            p.frame(
                "SEND",
                {"destination": "/queue/decide", "JMSXGroupID": f"g{g}", "receipt": "r"},
                b"x",
            )
            assert p.read_frame()[0] == "RECEIPT"
            rows[kind].append((time.perf_counter() - t) * 1000)
        if kind == "new":
            new_rate = groups / (time.perf_counter() - start)
    p.close()
    return {
        "new_p50_ms": pct(rows["new"], 0.5),
        "new_p99_ms": pct(rows["new"], 0.99),
        "bound_p50_ms": pct(rows["bound"], 0.5),
        "bound_p99_ms": pct(rows["bound"], 0.99),
        "new_groups_per_s": new_rate,
    }


def load(
    producer_node: ShoalProcess,
    consumer_nodes: list[ShoalProcess],
    all_nodes: list[ShoalProcess],
    messages: int,
) -> dict[str, float]:
    received: list[list[tuple[int, int]]] = [[] for _ in consumer_nodes]
    ready = threading.Barrier(len(consumer_nodes) + 1)

    consumers: list[RawStomp] = []

    def consume(i: int, node: ShoalProcess) -> None:
        c = connect(node.stomp_port)
        consumers.append(c)
        c.frame(
            "SUBSCRIBE",
            {
                "id": "s",
                "destination": "/queue/cw1",
                "ack": "client-individual",
                "prefetch-count": "1000",
                "receipt": "sub",
            },
        )
        assert c.read_frame()[0] == "RECEIPT"
        ready.wait()
        # RawStomp.read_frame copies its buffer per frame: too slow for this
        buf = c.buf
        sock = c.sock
        while sum(len(r) for r in received) < messages:
            try:
                chunk = sock.recv(1 << 20)
            except OSError:
                return
            if not chunk:
                return
            buf += chunk
            *frames, buf = buf.split(b"\x00")
            acks = []
            for frame in frames:
                head = frame.lstrip(b"\r\n").split(b"\n\n", 1)[0].decode().split("\n")
                if head[0] != "MESSAGE":
                    continue
                h = dict(line.split(":", 1) for line in head[1:])
                received[i].append((int(h["bench-group"]), int(h["bench-seq"])))
                acks.append(f"ACK\nid:{h['ack']}\n\n\x00".encode())
            if acks:
                sock.sendall(b"".join(acks))

    threads = [
        threading.Thread(target=consume, args=(i, n), daemon=True)
        for i, n in enumerate(consumer_nodes)
    ]
    for t in threads:
        t.start()
    ready.wait()
    time.sleep(1.5)  # membership: the producer's node sees the consumers' nodes
    cpu0 = sum(cpu_seconds(n.proc.pid) for n in all_nodes)
    t0 = time.perf_counter()
    p = connect(producer_node.stomp_port)
    for k in range(messages):
        g = k % 100
        headers = {
            "destination": "/queue/cw1",
            "JMSXGroupID": f"g{g}",
            "bench-group": str(g),
            "bench-seq": str(k),
        }
        if k % 1000 == 999:
            headers["receipt"] = str(k)
        p.frame("SEND", headers, BODY)
        if k % 1000 == 999:
            assert p.read_frame()[0] == "RECEIPT"
    deadline = time.monotonic() + 300
    while sum(len(r) for r in received) < messages and time.monotonic() < deadline:
        time.sleep(0.005)
    elapsed = time.perf_counter() - t0
    cpu = sum(cpu_seconds(n.proc.pid) for n in all_nodes) - cpu0
    last: dict[int, int] = {}
    violations = 0
    for rows in received:
        for g, k in rows:
            if last.get(g, -1) > k:
                violations += 1
            last[g] = k
    for c in consumers:
        c.sock.shutdown(2)  # ends the reader blocked in recv
    for t in threads:
        t.join(10)
    owners = {g for rows in received for g, _k in rows}
    return {
        "msg_per_s": messages / elapsed,
        "broker_cpu_us_per_msg": cpu / messages * 1e6,
        "order_violations": violations,
        "received": sum(len(r) for r in received),
        "groups": len(owners),
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--groups", type=int, default=300)
    ap.add_argument("--messages", type=int, default=20_000)
    ap.add_argument("--out", type=Path, help="write the figures as JSON (bench/recorded/)")
    args = ap.parse_args()
    doc: dict = {
        "date": datetime.date.today().isoformat(),
        "command": f"python -m bench.cluster --groups {args.groups} --messages {args.messages}",
    }
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        zk = ZooKeeperServer(root / "zk", free_port()).start()
        nodes: list[ShoalProcess] = []
        try:
            for i in (1, 2, 3):
                cfg = root / f"n{i}.toml"
                cfg.write_text(
                    f'[cluster]\nnode = "n{i}"\nlink = "127.0.0.1:0"\n'
                    f'zookeeper = "{zk.connect_string}"\n'
                )
                nodes.append(ShoalProcess(data=None, config=cfg).start())
            time.sleep(1.5)
            doc["decisions"] = decisions(nodes[0], args.groups)
            print("decisions:", doc["decisions"], flush=True)
            doc["cluster"] = load(nodes[0], nodes[1:], nodes, args.messages)
            print("CW1-lite, 3 nodes (producer n1, consumers n2 n3):", doc["cluster"], flush=True)
        finally:
            for n in nodes:
                n.stop()
            zk.stop()
        single = ShoalProcess(data=None).start()
        try:
            doc["single"] = load(single, [single, single], [single], args.messages)
            print("same load, one node:", doc["single"], flush=True)
        finally:
            single.stop()
    if args.out is not None:
        args.out.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


def markdown(doc: dict) -> str:
    """The docs/benchmarks.md table of one run (bench/report.py)."""
    d, c, s = doc["decisions"], doc["cluster"], doc["single"]
    n = c["received"]
    rows = [
        (
            "new group, SEND to RECEIPT through the `zookeeper` handler, p50 / p99",
            f"{d['new_p50_ms']:.2f} ms / {d['new_p99_ms']:.2f} ms",
        ),
        (
            "bound group, SEND to RECEIPT (no decision), p50 / p99",
            f"{d['bound_p50_ms']:.3f} ms / {d['bound_p99_ms']:.3f} ms",
        ),
        ("new groups per second, one producer, one at a time", f"{d['new_groups_per_s']:,.0f}"),
        (
            f"CW1-lite, 3 nodes: {n:,} x 256 B, 100 groups, producer on n1, consumers on n2 "
            "and n3 (every message forwarded)",
            f"{c['msg_per_s']:,.0f} msg/s, {c['broker_cpu_us_per_msg']:.1f} µs broker CPU/msg "
            f"summed over the nodes, {c['order_violations']} order violations",
        ),
        (
            "same load, one node without a cluster",
            f"{s['msg_per_s']:,.0f} msg/s, {s['broker_cpu_us_per_msg']:.1f} µs broker CPU/msg, "
            f"{s['order_violations']} order violations",
        ),
    ]
    return "\n".join(
        ["| figure | measured |", "|---|---|", *(f"| {name} | {value} |" for name, value in rows)]
    )


if __name__ == "__main__":
    raise SystemExit(main())
