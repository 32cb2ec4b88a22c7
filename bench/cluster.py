"""Cluster figures (docs/cluster.md, docs/benchmarks.md "Cluster"): one run.

    .venv/bin/python -m bench.cluster [--groups 300] [--reps 3] [--messages 100000]
                                      [--out bench/recorded/cluster-cw-DATE.json]

1. Decisions: one producer sends the first message of ``--groups`` new
   groups, one at a time with a receipt, then one more message of each
   (bound by then): SEND-to-RECEIPT latency p50/p99 of both, and new groups
   per second through the ``zookeeper`` handler.
2. CW1: W1's shape in the W1 harness (bench/loadgen: 256 B non-persistent,
   100 groups, 4 client-individual consumers, prefetch 1000) on three nodes,
   the producer on node 1, consumers on nodes 2 and 3 alternately (so every
   message is forwarded), against W1 on one node without a cluster, in the
   same run: msg/s, broker CPU per message summed over the nodes (and per
   node), order violations, loss, duplicates.
3. CW2 (locality): two producers, each connected to the node whose
   consumers hold its groups (producer p's groups are g with g mod 2 = p;
   node p+1 has consumers, so it proposes itself and nothing is forwarded),
   two consumers per node, against the same load on one node: msg/s, broker
   CPU and the bench clients' own CPU.

Each part on fresh nodes with a short warm-up, ``--reps`` repetitions on
their own queues. Starts its own ZooKeeper (Debian's package); every
process on free loopback ports, in-memory stores.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import tempfile
import time
import urllib.request
from dataclasses import replace
from pathlib import Path

from tests.support import RawStomp, free_port

from bench.loadgen.runner import LoadSpec, run_load
from bench.machine import wait_idle
from bench.peers.common import BrokerHandle
from bench.peers.shoal import shoal_version, start_shoal
from bench.workloads import W1_SPEC
from shoal.server.cluster.zkserver import ZooKeeperServer

BODY = b"x" * 256


def connect(port: int) -> RawStomp:
    c = RawStomp(port, timeout=60)
    assert c.connect()[0] == "CONNECTED"
    return c


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * p))]


def decisions(node: BrokerHandle, groups: int) -> dict[str, float]:
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


class Nodes:
    """The nodes of one measurement as one bench target: CPU and RSS summed,
    and the CPU of each node at every reading (the harness reads twice)."""

    def __init__(self, handles: list[BrokerHandle], name: str) -> None:
        self.handles = handles
        self.name = name
        self.version = shoal_version()
        self.stomp_port = handles[0].stomp_port
        self.pid = handles[0].pid
        self.groups = True
        self.readings: list[list[float]] = []

    def cpu_s(self) -> float:
        per_node = [h.cpu_s() for h in self.handles]
        self.readings.append(per_node)
        return sum(per_node)

    def rss_bytes(self) -> int:
        return sum(h.rss_bytes() for h in self.handles)

    def alive(self) -> bool:
        return all(h.proc.poll() is None for h in self.handles)

    def node_cpu_s(self) -> list[float]:
        """CPU seconds of each node over the last measurement window."""
        first, last = self.readings[-2], self.readings[-1]
        return [b - a for a, b in zip(first, last, strict=True)]

    def stop(self) -> None:
        for h in self.handles:
            h.stop()


def start_nodes(root: Path, count: int, zk: ZooKeeperServer | None) -> Nodes:
    handles = []
    root.mkdir(parents=True, exist_ok=True)
    for i in range(1, count + 1):
        config = None
        if zk is not None:
            config = root / f"n{i}.toml"
            config.write_text(
                f'[cluster]\nname = "bench"\nnode = "n{i}"\nlink = "127.0.0.1:0"\n'
                f'zookeeper = "{zk.connect_string}"\n'
            )
        handles.append(start_shoal(root / f"n{i}", config=config, persistent_data=False))
    return Nodes(handles, f"shoal x{count}" if zk is not None else "shoal")


def cluster_status(node: BrokerHandle) -> dict:
    url = f"http://127.0.0.1:{node.ports['http']}/api/cluster"
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.load(r)


def wait_consumers_seen(origin: BrokerHandle, nodes: list[str], queue: str) -> None:
    """Until ``origin``'s membership shows ``queue``'s consumers on ``nodes``
    (its proposals go round robin over them)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        seen = {
            n["node"]
            for n in cluster_status(origin)["nodes"]
            if queue in n.get("queues_with_consumers", [])
        }
        if seen >= set(nodes):
            return
        time.sleep(0.05)
    raise TimeoutError(f"node 1 never saw consumers of {queue} on {nodes}")


def summary(r: dict, nodes: Nodes) -> dict:
    n = r["received"] or 1
    return {
        "msg_per_s": r["throughput"],
        "broker_cpu_us_per_msg": r["broker_cpu_us_per_msg"],
        "node_cpu_us_per_msg": [c / n * 1e6 for c in nodes.node_cpu_s()],
        "client_cpu_us_per_msg": r["client_cpu_us_per_msg"],
        "broker_cores": r["broker_cores"],
        "client_cores": r["bench_cpu_s"] / r["wall_s"] if r["wall_s"] else None,
        "other_cores": r["other_cores"],
        "latency_p50_ms": r["latency_ms"]["p50"],
        "latency_p99_ms": r["latency_ms"]["p99"],
        "received": r["received"],
        "missing": r["missing"],
        "duplicates": r["duplicates"],
        "order_violations": r["order_violations_per_consumer"]
        + r["order_violations_cross_consumer"],
        "groups_on_many_consumers": r["groups_on_many_consumers"],
        "errors": r["errors"],
    }


def measure(
    nodes: Nodes,
    spec: LoadSpec,
    work: Path,
    label: str,
    reps: int,
    *,
    producer_nodes: list[int],
    consumer_nodes: list[int],
    settle: bool,
) -> list[dict]:
    """A warm-up (a fifth of the messages, not recorded), then ``reps`` runs,
    each on its own queue. ``*_nodes``: node index per producer / consumer
    (round robin). ``settle``: wait until node 1 sees the consumers first."""
    h = nodes.handles
    pports = [h[i].stomp_port for i in producer_nodes]
    cports = [h[i].stomp_port for i in consumer_nodes]
    names = sorted({f"n{i + 1}" for i in consumer_nodes})
    out = []
    for rep in range(reps + 1):
        queue = f"{label}-{rep}"
        run_spec = replace(spec, destination=f"/queue/{queue}")
        if rep == 0:
            run_spec = replace(run_spec, messages=spec.messages // 5)
        else:  # other engineers share this machine: start in a quiet moment if one comes
            wait_idle(0.3, 15, log=lambda text: print(text, flush=True))
        r = run_load(
            nodes,
            run_spec,
            work / f"{label}-{rep}",
            producer_ports=pports,
            consumer_ports=cports,
            after_consumers=(lambda q=queue: wait_consumers_seen(h[0], names, q))
            if settle
            else None,
        )
        row = summary(r, nodes)
        print(f"{label} {'warm-up' if rep == 0 else f'rep {rep}'}: {row}", flush=True)
        if rep:
            out.append(row)
    return out


def median_row(rows: list[dict]) -> dict:
    """Each figure's median over the reps (figure by figure); counts are summed."""
    out: dict = {}
    for key, value in rows[0].items():
        values = [r[key] for r in rows]
        if key == "node_cpu_us_per_msg":
            out[key] = [statistics.median(v) for v in zip(*values, strict=True)]
        elif key in ("received", "missing", "duplicates", "order_violations"):
            out[key] = sum(values)
        elif key == "groups_on_many_consumers":
            out[key] = max(values)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out[key] = statistics.median(values)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--groups", type=int, default=300, help="new groups for the decision figures")
    ap.add_argument("--messages", type=int, default=W1_SPEC.messages, help="per CW1/CW2 rep")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", type=Path, help="write the figures as JSON (bench/recorded/)")
    args = ap.parse_args()
    doc: dict = {
        "date": datetime.date.today().isoformat(),
        "time": datetime.datetime.now(datetime.UTC).strftime("%H:%M UTC"),
        "command": f"python -m bench.cluster --groups {args.groups} --messages {args.messages} "
        f"--reps {args.reps}",
        "version": shoal_version(),
        "loadavg_before": os.getloadavg(),
    }
    w1 = replace(W1_SPEC, messages=args.messages)
    cw2 = replace(w1, producers=2)
    doc["spec"] = {"cw1": w1.to_dict(), "cw2": cw2.to_dict()}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        work = root / "load"
        zk = ZooKeeperServer(root / "zk", free_port()).start()
        try:
            three = start_nodes(root / "three", 3, zk)
            try:
                time.sleep(1.5)  # membership: every node sees the others
                doc["decisions"] = decisions(three.handles[0], args.groups)
                print("decisions:", doc["decisions"], flush=True)
                cpu0 = three.cpu_s()
                time.sleep(5)
                doc["idle_cpu_ms_per_s"] = (three.cpu_s() - cpu0) / 5 * 1000
                doc["cw1"] = measure(
                    three,
                    w1,
                    work,
                    "cw1",
                    args.reps,
                    producer_nodes=[0],
                    consumer_nodes=[1, 2],
                    settle=True,
                )
            finally:
                three.stop()
            two = start_nodes(root / "two", 2, zk)
            try:
                time.sleep(1.5)
                doc["cw2"] = measure(
                    two,
                    cw2,
                    work,
                    "cw2",
                    args.reps,
                    producer_nodes=[0, 1],
                    consumer_nodes=[0, 1],
                    settle=False,
                )
            finally:
                two.stop()
        finally:
            zk.stop()
        one = start_nodes(root / "one", 1, None)
        try:
            doc["w1_one_node"] = measure(
                one, w1, work, "w1", args.reps, producer_nodes=[0], consumer_nodes=[0], settle=False
            )
            doc["cw2_one_node"] = measure(
                one,
                cw2,
                work,
                "cw2-one",
                args.reps,
                producer_nodes=[0],
                consumer_nodes=[0],
                settle=False,
            )
        finally:
            one.stop()
    if args.out is not None:
        args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(markdown(doc))
    return 0


def section(_path: Path, _latest: dict) -> list[str]:
    """docs/benchmarks.md's section body: the newest recorded CW1/CW2 run."""
    from bench.report import recorded_runs

    runs = [d for _p, d in recorded_runs("cluster-*.json", "cw1")]
    d = max(runs, key=lambda r: (r["date"], r.get("time", "")))
    return [
        f"`{d['command']}` ({d['date']} {d.get('time', '')}; bench/cluster.py): "
        "ZooKeeper and the nodes on loopback, in-memory stores, the W1 harness's clients "
        "(bench/loadgen) on the same 2 shared cores. CW1 and CW2 figures are medians over "
        f"{len(d['cw1'])} reps, figure by figure; order violations and the last row count "
        "every rep.",
        "",
        markdown(d),
        "",
        forwarding_note(d),
    ]


def history(runs: list[tuple[Path, dict]]) -> list[str]:
    """docs/benchmark-history.md's lines for the CW1-lite runs (the first format)."""
    out = ["## Cluster runs", ""]
    for p, r in runs:
        c, s1 = r["cluster"], r["single"]
        out.append(
            f"- `{p.name}` (`{r['command']}`, {r['date']}): {c['msg_per_s']:,.0f} msg/s at "
            f"{c['broker_cpu_us_per_msg']:.1f} µs broker CPU/msg summed over the nodes, against "
            f"{s1['msg_per_s']:,.0f} msg/s at {s1['broker_cpu_us_per_msg']:.1f} µs on one node."
            + (f" {r['note']}" if r.get("note") else "")
        )
    return [*out, ""]


def _fig(r: dict, *, client: bool = False) -> str:
    text = f"{r['msg_per_s']:,.0f} msg/s, {r['broker_cpu_us_per_msg']:.1f} µs broker CPU/msg"
    if client:
        text += f", {r['client_cpu_us_per_msg']:.1f} µs client CPU/msg"
    return text


def markdown(doc: dict) -> str:
    """The docs/benchmarks.md table of one run (bench/report.py)."""
    d = doc["decisions"]
    if "cw1" not in doc:  # the first run's format (CW1-lite): one line
        c, s = doc["cluster"], doc["single"]
        return (
            f"| CW1-lite, {c['received']:,} x 256 B, every message forwarded, 3 nodes | "
            f"{_fig(c)} summed over the nodes, {c['order_violations']} order violations |\n"
            f"| same load, one node | {_fig(s)} |"
        )
    reps = len(doc["cw1"])
    cw1, one = median_row(doc["cw1"]), median_row(doc["w1_one_node"])
    cw2, cw2_one = median_row(doc["cw2"]), median_row(doc["cw2_one_node"])
    n1, n2, n3 = cw1["node_cpu_us_per_msg"]
    bad = {
        k: sum(r[k] for rows in ("cw1", "w1_one_node", "cw2", "cw2_one_node") for r in doc[rows])
        for k in ("order_violations", "missing", "duplicates", "groups_on_many_consumers")
    }
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
            "CW1, 3 nodes: W1's shape, producer on n1, consumers on n2 and n3 (every message "
            "forwarded)",
            f"{_fig(cw1)} summed over the nodes (n1 {n1:.1f}, n2 {n2:.1f}, n3 {n3:.1f}), "
            f"{cw1['order_violations']} order violations",
        ),
        ("W1 on one node (same run)", f"{_fig(one)}, {one['order_violations']} order violations"),
        (
            "CW1 / W1 on one node",
            f"{cw1['msg_per_s'] / one['msg_per_s']:.2f}x throughput, "
            f"{cw1['broker_cpu_us_per_msg'] / one['broker_cpu_us_per_msg']:.2f}x broker CPU/msg",
        ),
        (
            "CW2, 2 nodes: 2 producers, each on the node holding its groups (2 consumers "
            "per node, nothing forwarded)",
            f"{_fig(cw2, client=True)}; broker {cw2['broker_cores']:.2f} cores, clients "
            f"{cw2['client_cores']:.2f} cores",
        ),
        (
            "the same load on one node",
            f"{_fig(cw2_one, client=True)}; broker {cw2_one['broker_cores']:.2f} cores, clients "
            f"{cw2_one['client_cores']:.2f} cores",
        ),
        (
            "CW2 / one node",
            f"{cw2['msg_per_s'] / cw2_one['msg_per_s']:.2f}x throughput",
        ),
        (
            f"all {reps * 4} reps: order violations, messages lost, duplicates, groups on two "
            "consumers",
            f"{bad['order_violations']}, {bad['missing']}, {bad['duplicates']}, "
            f"{bad['groups_on_many_consumers']}",
        ),
    ]
    return "\n".join(
        ["| figure | measured |", "|---|---|", *(f"| {name} | {value} |" for name, value in rows)]
    )


def forwarding_note(doc: dict) -> str:
    """CW1's goal, read from the run: what forwarding adds per forwarded message."""
    cw1, one = median_row(doc["cw1"]), median_row(doc["w1_one_node"])
    cw2, cw2_one = median_row(doc["cw2"]), median_row(doc["cw2_one_node"])
    added = cw1["broker_cpu_us_per_msg"] / one["broker_cpu_us_per_msg"] - 1
    # per-rep CPU ratios, CW1 rep k against W1 rep k: how far the noise reaches
    ratios = [
        c["broker_cpu_us_per_msg"] / w["broker_cpu_us_per_msg"] - 1
        for c, w in zip(doc["cw1"], doc["w1_one_node"], strict=True)
    ]
    if max(ratios) <= 1:
        verdict = "**met**"
    elif min(ratios) > 1:
        verdict = "**missed**"
    else:
        verdict = "**at its limit** (met in some reps, missed in others)"
    other = max(
        r["other_cores"] or 0
        for rows in ("cw1", "w1_one_node", "cw2", "cw2_one_node")
        for r in doc[rows]
    )
    return (
        f"CW1's goal (forwarding adds at most 1x a local delivery's broker CPU per forwarded "
        f"message) is {verdict} in this run: forwarding added {added:.2f}x (medians: the three "
        f"nodes spent {cw1['broker_cpu_us_per_msg']:.1f} µs per message against "
        f"{one['broker_cpu_us_per_msg']:.1f} µs on one node; rep by rep "
        f"{min(ratios):.2f}x to {max(ratios):.2f}x). The origin spends about what one node "
        "spends on a whole local delivery, and so does the target. A forwarded message is handled "
        "twice by construction: the origin takes the SEND into its store-and-forward queue and "
        "delivers it to the link, the target takes it as a SEND and delivers it to its consumer; "
        "what forwarding adds beyond that is the link's SEND encoding and one RECEIPT per run. "
        f"The nodes' idle work (membership, heart-beats) was "
        f"{doc['idle_cpu_ms_per_s']:.1f} ms of CPU per second for the three. "
        f"CW2: two nodes, each serving its own producers' groups, did "
        f"{cw2['msg_per_s'] / cw2_one['msg_per_s']:.2f}x one node's throughput, with "
        f"{cw2['broker_cores']:.2f} cores of broker and {cw2['client_cores']:.2f} of bench "
        f"clients busy on a 2-core machine (one node: {cw2_one['broker_cores']:.2f} and "
        f"{cw2_one['client_cores']:.2f}); on a machine with a core per node and per client "
        "process the nodes would not share cores. Other processes on the machine used up to "
        f"{other:.2f} cores during a rep."
    )


if __name__ == "__main__":
    raise SystemExit(main())
