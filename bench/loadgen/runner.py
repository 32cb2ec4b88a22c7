"""Run one load against a running broker: start the worker processes, watch, measure, check.

    result = run_load(target, LoadSpec(messages=100_000, groups=100), workdir)

`target` is anything with .stomp_port, .connect_headers, .pid and .cpu_s()/.rss_bytes()
(a bench.peers BrokerHandle), or a bare Target(port) for a broker we did not start (then
broker CPU and RSS are read from `pid` if given).

Measurement window: from the moment producers are released until the last expected
message has been received. Broker CPU (utime+stime of every process in the broker's
session, reaped children included) and the machine's busy CPU (/proc/stat) are read at
both ends; bench CPU is the controller plus its workers; other_cpu = machine - broker
- bench, so a run disturbed by other work on the machine shows it.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import resource
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from bench.loadgen import analyze as an
from bench.loadgen import worker as w
from bench.loadgen.plan import write_plan
from bench.peers.common import machine_busy_s, proc_cpu_s, proc_rss_bytes


@dataclass
class LoadSpec:
    messages: int = 100_000
    groups: int = 100
    dist: str = "rr"  # rr | random | hot
    hot_groups: int = 1
    hot_fraction: float = 0.5
    size: int = 256
    persistent: bool = False
    consumers: int = 4
    producers: int = 1
    ack: str = "client-individual"  # client-individual | client | auto
    prefetch: int | None = 1000  # None: broker default (header not sent)
    receipts: bool = False  # a RECEIPT per SEND (synchronous producer)
    rate: float = 0.0  # msg/s over all producers; 0 = as fast as possible
    batch: int = 64  # SEND frames per write (pipelined)
    max_in_flight: int = 0  # producers pause while sent - received >= this (0: off)
    group_header: str | None = "JMSXGroupID"  # None: no group header (bench-group only)
    content_length: bool = True
    slow_consumers: int = 0  # the first N consumers sleep slow_ms per message
    slow_ms: float = 0.0
    preload: int = 0  # messages of one extra group sent before the run...
    preload_group: int = -1  # ...in this group (default: index `groups`)
    preload_consumers: int = 0  # ...while only the first N consumers are subscribed
    destination: str = "/queue/BENCH"
    seed: int = 1
    accept_version: str = "1.0,1.1,1.2"
    idle_timeout: float = 30.0  # after the producers finish: give up if nothing arrives
    deadline_after_send: float = 0.0  # after the producers finish: stop after this (0: off)
    timeout: float = 1800.0  # whole run
    sample_rss_every: float = 0.1

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Target:
    """A broker we did not start: port (and optionally the pid to measure)."""

    stomp_port: int
    pid: int = 0
    connect_headers: dict[str, str] = field(default_factory=dict)
    name: str = "external"
    version: str = "?"
    groups: bool = True

    def cpu_s(self) -> float:
        return proc_cpu_s(self.pid) if self.pid else 0.0

    def rss_bytes(self) -> int:
        return proc_rss_bytes(self.pid) if self.pid else 0


def _bench_cpu(pids: list[int]) -> float:
    ru_self = resource.getrusage(resource.RUSAGE_SELF)
    ru_ch = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = ru_self.ru_utime + ru_self.ru_stime + ru_ch.ru_utime + ru_ch.ru_stime
    for pid in pids:
        total += proc_cpu_s(pid, children=False)  # 0 once reaped (then in RUSAGE_CHILDREN)
    return total


class _Workers:
    def __init__(self, ctx, ctl) -> None:
        self.ctx = ctx
        self.ctl = ctl
        self.procs: list[tuple[str, int, mp.Process]] = []

    def start(self, role: str, index: int, cfg: dict) -> None:
        target = w.consumer_main if role == "consumer" else w.producer_main
        p = self.ctx.Process(
            target=target, args=(cfg, self.ctl), name=f"bench-{role}{index}", daemon=True
        )
        p.start()
        self.procs.append((role, index, p))

    def pids(self) -> list[int]:
        return [p.pid for _, _, p in self.procs if p.pid and p.exitcode is None]

    def wait_state(
        self, base: int, indexes: list[int], want: int, timeout: float, what: str
    ) -> None:
        deadline = time.monotonic() + timeout
        while True:
            states = [self.ctl[base + i] for i in indexes]
            if any(s == -1 for s in states):
                raise RuntimeError(f"{what} failed (see worker summaries)")
            if all(s >= want for s in states):
                return
            dead = [p for _, _, p in self.procs if p.exitcode not in (None, 0)]
            if dead:
                raise RuntimeError(f"{what}: worker {dead[0].name} exited {dead[0].exitcode}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what}: not ready within {timeout} s (states {states})")
            time.sleep(0.01)

    def stop_all(self, timeout: float = 30.0) -> None:
        self.ctl[w.STOP] = 1
        self.ctl[w.ABORT] = 1
        deadline = time.monotonic() + timeout
        for _, _, p in self.procs:
            p.join(max(0.1, deadline - time.monotonic()))
        for _, _, p in self.procs:
            if p.is_alive():
                p.terminate()
                p.join(5)
            if p.is_alive():
                p.kill()
                p.join(5)


def _read_summaries(outdir: Path) -> tuple[list[dict], list[dict]]:
    prods, conss = [], []
    for path in sorted(outdir.glob("*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        (prods if data.get("role") == "producer" else conss).append(data)
    return prods, conss


def window_headers(target, spec: LoadSpec) -> dict[str, str]:
    """A byte-counted consumer window for ``spec.prefetch`` messages, for a broker whose
    STOMP window counts bytes (Artemis): its handle's ``window_overhead`` is the bytes a
    message takes beyond its payload (headers, as that broker encodes them)."""
    overhead = getattr(target, "window_overhead", 0)
    if not overhead or not spec.prefetch:
        return {}
    return {"consumer-window-size": str(spec.prefetch * (spec.size + overhead))}


def run_load(
    target,
    spec: LoadSpec,
    workdir: Path | str,
    *,
    keep_records: bool = False,
    progress=None,
    producer_ports: list[int] | None = None,
    consumer_ports: list[int] | None = None,
    after_consumers=None,
) -> dict:
    """Run `spec` against `target`; returns the result dict (see analyze.analyze).

    Several brokers (a cluster): producer i connects to producer_ports[i % len], consumer
    i to consumer_ports[i % len] (default: target.stomp_port), and `after_consumers()`
    runs once every consumer has subscribed, before the producers start."""
    outdir = Path(workdir)
    if outdir.exists():
        shutil.rmtree(outdir)
    outdir.mkdir(parents=True)
    if spec.consumers + 1 > w.MAXW or spec.producers > w.MAXW:
        raise ValueError(f"at most {w.MAXW} consumers and producers")
    ctx = mp.get_context("spawn")
    ctl = ctx.RawArray("q", w.CTL_SIZE)
    workers = _Workers(ctx, ctl)
    base_cfg = {
        "port": target.stomp_port,
        "connect_headers": dict(getattr(target, "connect_headers", {}) or {}),
        "accept_version": spec.accept_version,
        "destination": spec.destination,
        "outdir": str(outdir),
    }
    plans = write_plan(
        outdir,
        spec.messages,
        spec.groups,
        spec.producers,
        dist=spec.dist,
        seed=spec.seed,
        hot_groups=spec.hot_groups,
        hot_fraction=spec.hot_fraction,
    )
    expected = np.concatenate([np.fromfile(p["plan_seq"], dtype=np.int64) for p in plans])
    count_limit = spec.messages  # main-run seqs are 0..messages-1; preload seqs are above
    errors: list[str] = []
    result: dict = {"spec": spec.to_dict(), "errors": errors}
    t_start = time.time()

    def cons_cfg(i: int) -> dict:
        return {
            **base_cfg,
            **({"port": consumer_ports[i % len(consumer_ports)]} if consumer_ports else {}),
            "index": i,
            "ack": spec.ack,
            "prefetch": spec.prefetch,
            "subscribe_headers": window_headers(target, spec),
            "slow_ms": spec.slow_ms if i < spec.slow_consumers else 0,
            "group_header": spec.group_header or "JMSXGroupID",
            "count_limit": count_limit,
        }

    def prod_cfg(i: int, plan: dict, **over) -> dict:
        return {
            **base_cfg,
            **({"port": producer_ports[i % len(producer_ports)]} if producer_ports else {}),
            **plan,
            "index": i,
            "size": spec.size,
            "persistent": spec.persistent,
            "group_header": spec.group_header,
            "receipts": spec.receipts,
            "rate": (spec.rate / spec.producers) if spec.rate else 0,
            "batch": spec.batch,
            "max_in_flight": spec.max_in_flight,
            "content_length": spec.content_length,
            "n_consumers": spec.consumers,
            "n_producers": spec.producers,
            **over,
        }

    try:
        first_wave = list(range(spec.preload_consumers)) if spec.preload else []
        for i in first_wave:
            workers.start("consumer", i, cons_cfg(i))
        if first_wave:
            workers.wait_state(w.C_STATE, first_wave, 1, 60, "consumers (preload)")
        if spec.preload:
            pg = spec.preload_group if spec.preload_group >= 0 else spec.groups
            pplan = write_plan(
                outdir, spec.preload, 1, 1, seq_base=10**12, group_base=pg, tag="preload"
            )[0]
            pidx = w.MAXW - 1  # a producer slot the main producers never use
            workers.start(
                "producer",
                pidx,
                prod_cfg(pidx, pplan, rate=0, receipts=False, max_in_flight=0, n_producers=0),
            )
            workers.wait_state(w.P_STATE, [pidx], 1, 60, "preload producer")
            ctl[w.GO] = 1
            workers.wait_state(w.P_STATE, [pidx], 2, spec.timeout, "preload producer")
            ctl[w.GO] = 0
            ctl[w.P_SENT + pidx] = 0
            result["preload_sent"] = spec.preload
        rest = [i for i in range(spec.consumers) if i not in first_wave]
        for i in rest:
            workers.start("consumer", i, cons_cfg(i))
        workers.wait_state(w.C_STATE, list(range(spec.consumers)), 1, 60, "consumers")
        if after_consumers is not None:
            after_consumers()
        for i, plan in enumerate(plans):
            workers.start("producer", i, prod_cfg(i, plan))
        workers.wait_state(w.P_STATE, list(range(spec.producers)), 1, 60, "producers")

        rss_before = target.rss_bytes()
        cpu0 = target.cpu_s()
        busy0 = machine_busy_s()
        bench0 = _bench_cpu(workers.pids())
        t0 = time.monotonic()
        ctl[w.GO] = 1

        rss_peak = rss_before
        last_rss = 0.0
        last_progress = t0
        last_total = -1
        send_done_at = None
        stalled = False
        cons_idx = range(spec.consumers)
        prod_idx = range(spec.producers)
        while True:
            time.sleep(0.02)
            now = time.monotonic()
            if now - last_rss >= spec.sample_rss_every:
                rss_peak = max(rss_peak, target.rss_bytes())
                last_rss = now
            total = sum(ctl[w.C_COUNT + i] for i in cons_idx)
            pstates = [ctl[w.P_STATE + i] for i in prod_idx]
            cstates = [ctl[w.C_STATE + i] for i in cons_idx]
            if total != last_total:
                last_total = total
                last_progress = now
            if progress:
                progress(total, sum(ctl[w.P_SENT + i] for i in prod_idx))
            if send_done_at is None and all(s in (2, -1) for s in pstates):
                send_done_at = now
            if any(s == -1 for s in pstates):
                errors.append("a producer failed")
                break
            if any(s == -1 for s in cstates):
                errors.append("a consumer failed")
                break
            if hasattr(target, "alive") and not target.alive():
                errors.append("broker exited during the run")
                break
            if send_done_at is not None and total >= spec.messages:
                break
            if send_done_at is not None and now - last_progress > spec.idle_timeout:
                stalled = True
                errors.append(
                    f"stalled: nothing received for {spec.idle_timeout:.0f} s "
                    f"({total} of {spec.messages})"
                )
                break
            if (
                send_done_at is not None
                and spec.deadline_after_send
                and now - send_done_at > spec.deadline_after_send
            ):
                stalled = True
                errors.append(
                    f"deadline: {spec.deadline_after_send:.0f} s after the last send, "
                    f"{total} of {spec.messages} received"
                )
                break
            if now - t0 > spec.timeout:
                stalled = True
                errors.append(f"timeout after {spec.timeout:.0f} s")
                break
        t1 = time.monotonic()
        cpu1 = target.cpu_s()
        busy1 = machine_busy_s()
        bench1 = _bench_cpu(workers.pids())
        rss_end = target.rss_bytes()
        rss_peak = max(rss_peak, rss_end)
    finally:
        workers.stop_all()
    prods, conss = _read_summaries(outdir)
    for s in prods + conss:
        if s.get("error"):
            errors.append(f"{s['role']}{s['index']}: {s['error']}")
    rec = an.load_records(outdir, spec.consumers)
    main_mask = rec["seq"] < count_limit
    res = an.analyze(an.subset(rec, main_mask), expected)
    if spec.preload:
        res["preload_received"] = int(np.count_nonzero(~main_mask))
    wall = t1 - t0
    broker_cpu = cpu1 - cpu0
    bench_cpu = bench1 - bench0
    busy = busy1 - busy0
    n = res["received"]
    res.update(
        {
            "broker": getattr(target, "name", "?"),
            "broker_version": getattr(target, "version", "?"),
            "broker_groups": getattr(target, "groups", True),
            "started_at": t_start,
            "wall_s": wall,
            "stalled": stalled,
            "broker_cpu_s": broker_cpu,
            "broker_cpu_us_per_msg": broker_cpu / n * 1e6 if n else None,
            "broker_cores": broker_cpu / wall if wall else None,
            "bench_cpu_s": bench_cpu,
            "client_cpu_us_per_msg": bench_cpu / n * 1e6 if n else None,
            "machine_busy_s": busy,
            "other_cpu_s": busy - broker_cpu - bench_cpu,
            "other_cores": (busy - broker_cpu - bench_cpu) / wall if wall else None,
            "loadavg": os.getloadavg(),
            "broker_rss_before": rss_before,
            "broker_rss_peak": rss_peak,
            "broker_rss_end": rss_end,
            "stomp_version": conss[0].get("version") if conss else None,
            "group_header_echoed": sum(s.get("group_header_echoed", 0) for s in conss),
            "producer_send_s": max((s.get("send_s", 0) for s in prods), default=None),
        }
    )
    result.update(res)
    if not keep_records:
        for p in outdir.iterdir():
            if p.suffix not in (".json",):
                p.unlink()
    return result
