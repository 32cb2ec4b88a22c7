"""Fault runs on a real three-node cluster under load: kill -9 of a node, and
a network partition of one node (network namespaces, tests/netns.py).

Producers on every node send persistent messages of nine groups with a
receipt each; each node holds three groups (it proposed itself for them);
one auto-ack consumer per node. ``analyse`` turns what was receipted and
what was delivered into the figures docs/cluster.md promises: messages lost,
duplicates without ``redelivered``, order violations per producer and
group, groups consumed on two nodes, seconds to recover. Shared by
tests/cluster/test_partition_e2e.py and bench/cluster_faults.py.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

from tests.netns import NetnsLab
from tests.support import RawStomp, ShoalProcess, free_port, wait_for

from shoal.server.cluster.zkserver import ZooKeeperServer

NODES = ("n1", "n2", "n3")
GROUPS = 9  # node i holds g(3i)..g(3i+2)
QUEUE = "/queue/orders"


def groups_of(node: str) -> set[str]:
    i = NODES.index(node)
    return {f"g{k}" for k in range(3 * i, 3 * i + 3)}


@dataclass
class Delivery:
    node: str
    headers: dict[str, str]
    body: bytes
    at: float  # time.monotonic() when read


class Reader(threading.Thread):
    def __init__(self, node: str, consumer: RawStomp, out: list[Delivery]) -> None:
        super().__init__(daemon=True)
        self.node, self.consumer, self.out = node, consumer, out

    def run(self) -> None:
        self.consumer.sock.settimeout(120)
        try:
            while True:
                _cmd, headers, body = self.consumer.read_frame()
                self.out.append(Delivery(self.node, headers, body, time.monotonic()))
        except (OSError, ConnectionError):
            pass


class Producer(threading.Thread):
    """Persistent grouped SENDs, one receipt awaited at a time, until stopped
    or its node dies: (body, receipt time) of each receipted message."""

    def __init__(self, name: str, conn: RawStomp, pause: float = 0.005) -> None:
        super().__init__(daemon=True)
        self.name_, self.conn, self.pause = name, conn, pause
        self.receipted: list[tuple[bytes, float]] = []
        self.refused: list[tuple[str, dict[str, str], bytes]] = []  # any frame but a RECEIPT
        self.stop = threading.Event()

    def run(self) -> None:
        k = 0
        try:
            while not self.stop.is_set():
                g = f"g{k % GROUPS}"
                body = f"{self.name_}:{g}:{k}"
                self.conn.frame(
                    "SEND",
                    {
                        "destination": QUEUE,
                        "JMSXGroupID": g,
                        "receipt": str(k),
                        "persistent": "true",
                    },
                    body.encode(),
                )
                frame = self.conn.read_frame()
                if frame[0] != "RECEIPT":
                    self.refused.append(frame)
                    return
                self.receipted.append((body.encode(), time.monotonic()))
                k += 1
                time.sleep(self.pause)  # a steady load, not a flood to drain afterwards
        except (OSError, ConnectionError):
            pass  # its node was killed: only receipted messages count


class ClusterRun:
    """ZooKeeper and three nodes, on loopback or each in its own namespace of ``lab``."""

    def __init__(self, tmp: Path, lab: NetnsLab | None = None, grouping: str = "") -> None:
        self.tmp = tmp
        self.lab = lab
        self.grouping = grouping  # lines of [cluster.grouping]
        self.zk: ZooKeeperServer | None = None
        self.nodes: dict[str, ShoalProcess] = {}
        self.got: list[Delivery] = []
        self.readers: list[Reader] = []
        self.producers: list[Producer] = []

    def inside(self, member: str) -> AbstractContextManager[None]:
        return nullcontext() if self.lab is None else self.lab.inside(member)

    def host(self, member: str) -> str:
        return "127.0.0.1" if self.lab is None else self.lab.address[member]

    def start(self) -> None:
        port = 2181 if self.lab is not None else free_port()
        with self.inside("zk"):
            self.zk = ZooKeeperServer(self.tmp / "zookeeper", port, self.host("zk")).start()
        for node in NODES:
            cfg = self.tmp / f"{node}.toml"
            cfg.write_text(
                f'[cluster]\nname = "faults"\nnode = "{node}"\n'
                f'link = "{self.host(node)}:0"\nzookeeper = "{self.zk.connect_string}"\n'
                f"[cluster.grouping]\n{self.grouping}"
            )
            extra = [] if self.lab is None else ["--insecure"]  # the link is on the lab's net
            p = ShoalProcess(data=self.tmp / node, config=cfg, extra_args=extra)
            with self.inside(node):
                self.nodes[node] = p.start()

    def stop(self) -> None:
        for p in self.producers:
            p.stop.set()
        for p in self.nodes.values():
            p.stop()
        if self.zk is not None:
            self.zk.stop()

    def status(self, node: str) -> dict[str, Any]:
        with (
            self.inside(node),
            urllib.request.urlopen(self.nodes[node].http_url + "/api/cluster", timeout=5) as r,
        ):
            return json.load(r)  # type: ignore[no-any-return]

    def groups(self, node: str) -> list[dict[str, Any]]:
        with (
            self.inside(node),
            urllib.request.urlopen(
                self.nodes[node].http_url + "/api/queues/orders/groups?limit=1000", timeout=5
            ) as r,
        ):
            return json.load(r)["groups"]  # type: ignore[no-any-return]

    def connect(self, node: str) -> RawStomp:
        with self.inside(node):
            c = RawStomp(self.nodes[node].stomp_port, timeout=30)
        assert c.connect()[0] == "CONNECTED"
        return c

    def subscribe(self, node: str) -> None:
        c = self.connect(node)
        c.frame("SUBSCRIBE", {"id": "s", "destination": QUEUE, "ack": "auto", "receipt": "sub"})
        assert c.read_frame()[0] == "RECEIPT"
        reader = Reader(node, c, self.got)
        self.readers.append(reader)
        reader.start()

    def produce(self, node: str, name: str) -> Producer:
        p = Producer(name, self.connect(node))
        self.producers.append(p)
        p.start()
        return p

    def load(self) -> None:
        """Consumers on every node, each node bound to its three groups, producers."""
        for node in NODES:
            self.subscribe(node)

        def everyone_sees_every_consumer() -> bool:
            for node in NODES:
                seen = {
                    n["node"]
                    for n in self.status(node)["nodes"]
                    if "orders" in n["queues_with_consumers"]
                }
                if seen != set(NODES):
                    return False
            return True

        wait_for(everyone_sees_every_consumer, timeout=30, interval=0.2)
        for node in NODES:  # each proposes itself for its groups (C2)
            c = self.connect(node)
            for g in sorted(groups_of(node)):
                c.frame("SEND", {"destination": QUEUE, "JMSXGroupID": g, "receipt": g}, b"pre")
                assert c.read_frame()[0] == "RECEIPT"
            c.sock.close()
        for node in NODES:
            self.produce(node, node)

    def receipted(self, before: float | None = None) -> dict[bytes, float]:
        return {
            b: t
            for p in self.producers
            for b, t in list(p.receipted)
            if before is None or t <= before
        }

    def drained(self, timeout: float = 90.0) -> None:
        """Stop the producers; wait until everything receipted was delivered."""
        for p in self.producers:
            p.stop.set()
            p.join(30)
        want = set(self.receipted())
        try:
            wait_for(
                lambda: want <= {d.body for d in list(self.got)}, timeout=timeout, interval=0.1
            )
        except AssertionError:
            pass  # ``analyse`` counts what is missing


@dataclass
class Figures:
    receipted: int
    delivered: int
    lost: int
    duplicates_unflagged: int
    redelivered: int
    order_violations: int
    groups_on_two_nodes: int
    recover_s: float | None  # fault end -> the last message receipted before it delivered
    sends_refused: int
    extra: dict[str, Any] = field(default_factory=dict)


def analyse(run: ClusterRun, fault_end: float) -> Figures:
    receipted = run.receipted()
    seen: set[bytes] = set()
    dup_unflagged = redelivered = violations = 0
    nodes_of: dict[str, set[str]] = defaultdict(set)
    last_k: dict[tuple[str, str], int] = {}
    first_at: dict[bytes, float] = {}
    for d in list(run.got):
        if d.body == b"pre":
            continue
        producer, group, k = d.body.decode().split(":")
        nodes_of[group].add(d.node)
        if d.body in seen:
            if d.headers.get("redelivered") == "true":
                redelivered += 1
            else:
                dup_unflagged += 1
            continue
        seen.add(d.body)
        first_at[d.body] = d.at
        key = (producer, group)
        if int(k) < last_k.get(key, -1):
            violations += 1
        last_k[key] = max(int(k), last_k.get(key, -1))
    lost = [b for b in receipted if b not in seen]
    before = [first_at[b] for b, t in receipted.items() if t <= fault_end and b in first_at]
    recover = max(0.0, max(before) - fault_end) if before and not lost else None
    return Figures(
        receipted=len(receipted),
        delivered=len(seen),
        lost=len(lost),
        duplicates_unflagged=dup_unflagged,
        redelivered=redelivered,
        order_violations=violations,
        groups_on_two_nodes=sum(1 for ns in nodes_of.values() if len(ns) > 1),
        recover_s=None if recover is None else round(recover, 2),
        sends_refused=sum(len(p.refused) for p in run.producers),
    )


def overlaps(run: ClusterRun) -> list[str]:
    """Groups delivered on two nodes at once: per group and node the span from
    its first to its last delivery there; spans of two nodes must not meet."""
    spans: dict[str, dict[str, list[float]]] = defaultdict(dict)
    for d in list(run.got):
        if d.body == b"pre":
            continue
        group = d.body.split(b":")[1].decode()
        span = spans[group].setdefault(d.node, [d.at, d.at])
        span[0], span[1] = min(span[0], d.at), max(span[1], d.at)
    out = []
    for group, by_node in sorted(spans.items()):
        ordered = sorted(by_node.values())
        if any(b[0] <= a[1] for a, b in pairwise(ordered)):
            out.append(group)
    return out


@contextmanager
def cluster_run(tmp: Path, lab: NetnsLab | None = None, grouping: str = "") -> Iterator[ClusterRun]:
    run = ClusterRun(tmp, lab, grouping)
    try:
        run.start()
        yield run
    finally:
        run.stop()


def kill9_run(tmp: Path, down_s: float = 3.0, log: Callable[[str], None] = print) -> Figures:
    """kill -9 of n1 under load; restarted after ``down_s``."""
    with cluster_run(tmp) as run:
        run.load()
        wait_for(lambda: all(len(p.receipted) >= 100 for p in run.producers), timeout=60)
        victim = run.nodes["n1"]
        victim.kill9()
        killed = time.monotonic()
        log("n1 killed")
        time.sleep(down_s)
        with run.inside("n1"):
            victim.start()
        restarted = time.monotonic()
        run.subscribe("n1")
        run.produce("n1", "n1b")  # a new producer: its own order
        wait_for(lambda: len(run.producers[-1].receipted) >= 100, timeout=60)
        run.drained()
        f = analyse(run, restarted)
        f.extra = {"down_s": round(restarted - killed, 2)}
        return f


def partition_run(tmp: Path, lab: NetnsLab, log: Callable[[str], None] = print) -> Figures:
    """n3 cut off from ZooKeeper and the other nodes (its clients still reach
    it) until ZooKeeper expired its session, then healed."""
    with cluster_run(tmp, lab) as run:
        run.load()
        wait_for(lambda: all(len(p.receipted) >= 100 for p in run.producers), timeout=60)
        lab.cut("n3")
        cut = time.monotonic()
        log("n3 cut off")
        wait_for(lambda: run.status("n3")["fenced"], timeout=20, interval=0.1)
        fenced = time.monotonic()
        log(f"n3 fenced after {fenced - cut:.1f} s")
        # the other side sees n3's session expire: only now could its groups move
        wait_for(
            lambda: not any(n["node"] == "n3" and n["member"] for n in run.status("n1")["nodes"]),
            timeout=30,
            interval=0.2,
        )
        expired = time.monotonic()
        n3_receipts_at_fence = len(run.producers[2].receipted)
        time.sleep(2.0)
        n3_receipts_while_fenced = len(run.producers[2].receipted) - n3_receipts_at_fence
        lab.heal("n3")
        healed = time.monotonic()
        log("n3 healed")
        wait_for(lambda: not run.status("n3")["fenced"], timeout=30, interval=0.1)
        unfenced = time.monotonic()
        log(f"n3 delivering again after {unfenced - healed:.1f} s")
        time.sleep(2.0)
        run.drained()
        f = analyse(run, healed)
        # after the fence (a margin for frames already on their way to the
        # reader) nothing of n3's groups is delivered anywhere until the heal
        held = groups_of("n3")
        fenced_deliveries = sum(
            1
            for d in list(run.got)
            if fenced + 0.5 < d.at < healed
            and d.body != b"pre"
            and d.body.split(b":")[1].decode() in held
        )
        others_during = sum(1 for d in list(run.got) if fenced < d.at < healed and d.node != "n3")
        f.extra = {
            "fence_after_s": round(fenced - cut, 2),
            "session_expired_after_s": round(expired - cut, 2),
            "unfence_after_heal_s": round(unfenced - healed, 2),
            "cut_s": round(healed - cut, 2),
            "delivered_of_cut_groups_while_fenced": fenced_deliveries,
            "delivered_elsewhere_while_fenced": others_during,
            "sends_accepted_by_cut_node_while_fenced": n3_receipts_while_fenced,
            "fences_of_cut_node": run.status("n3")["fences"],
        }
        return f


def partition_rebind_run(
    tmp: Path, lab: NetnsLab, log: Callable[[str], None] = print
) -> tuple[Figures, dict[str, Any]]:
    """As ``partition_run``, with ``rebind-after = 500``: once ZooKeeper has
    expired n3's session, n1 and n2 forget it and its groups get new holders
    while n3 is still cut off. The fence is what keeps n3 from serving them
    at the same time; after the heal n3 finds them bound elsewhere and sends
    what it holds of them to their new holders (C6)."""
    with cluster_run(tmp, lab, grouping="rebind-after = 500\n") as run:
        run.load()
        wait_for(lambda: all(len(p.receipted) >= 100 for p in run.producers), timeout=60)
        lab.cut("n3")
        cut = time.monotonic()
        log("n3 cut off")
        wait_for(lambda: run.status("n3")["fenced"], timeout=20, interval=0.1)
        fenced = time.monotonic()
        wait_for(
            lambda: any(
                f["node"] == "n3" and f["state"] == "done" for f in run.status("n1")["forgets"]
            ),
            timeout=30,
            interval=0.2,
        )
        forgotten = time.monotonic()
        log(f"n3 fenced after {fenced - cut:.1f} s, forgotten after {forgotten - cut:.1f} s")
        held = groups_of("n3")
        # the new holders serve n3's groups while n3 is cut off
        wait_for(
            lambda: (
                {
                    d.body.split(b":")[1].decode()
                    for d in list(run.got)
                    if d.at > forgotten and d.node != "n3" and d.body != b"pre"
                }
                >= held
            ),
            timeout=30,
            interval=0.2,
        )
        lab.heal("n3")
        healed = time.monotonic()
        log("n3 healed")
        wait_for(lambda: not run.status("n3")["fenced"], timeout=30, interval=0.1)
        time.sleep(2.0)
        run.drained(timeout=20)  # what n3 parked would never come: bounded wait
        f = analyse(run, healed)
        parked = {g["group"]: g["backlog"] for g in run.groups("n3") if g["state"] == "parked"}
        lost_groups = {
            b.split(b":")[1].decode() for b in run.receipted() if b not in {d.body for d in run.got}
        }
        facts = {
            "fence_after_s": round(fenced - cut, 2),
            "forgotten_after_s": round(forgotten - cut, 2),
            "overlapping_groups": overlaps(run),
            "delivered_of_cut_groups_on_n3_after_fence": sum(
                1
                for d in list(run.got)
                if d.node == "n3"
                and d.at > fenced + 0.5
                and d.body != b"pre"
                and d.body.split(b":")[1].decode() in held
            ),
            "parked_on_n3": parked,
            "stranded_sent_by_n3": run.status("n3").get("stranded_sent", 0),
            "lost_groups": sorted(lost_groups),
            "held_by_n3_before": sorted(held),
        }
        return f, facts
