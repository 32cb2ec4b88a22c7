"""AW1: W1's shape over AMQP 1.0, Shoal against Artemis and RabbitMQ's AMQP 1.0 plugin, and over STOMP.

    .venv/bin/python -m bench.amqp_w1 --messages 50000 --reps 3 --record

W1 (bench/workloads.py): 256-byte non-persistent messages in 100 groups,
4 consumers acknowledging each message (AMQP: accepted), prefetch 1000
(AMQP: link credit 1000, topped up by Proton's MessagingHandler), one
producer that does not wait for answers (AMQP: pre-settled transfers, as
W1's STOMP producer sends without receipts).

Each rep runs, each on a fresh broker in a private temp dir on free ports:

- Shoal over AMQP 1.0: Proton reactor clients, each a separate process.
  Like the STOMP load generator, they do no more per message than the run
  needs: the producer sends messages encoded before the clock starts, each
  consumer decodes into one reused ``Message`` and accepts it (since
  ae699b2; before, ``Message`` objects per send and per receipt
  held the clients to about 5,000 msg/s);
- Artemis 2.40 (bench/peers/artemis.py) on its AMQP acceptor, the same
  Proton clients on ``/queue/aw1`` (the acceptor's anycast prefix: one queue
  the consumers share), anonymous. Artemis groups by the AMQP ``group-id``
  as by ``JMSXGroupID``, so its order is checked like Shoal's;
- RabbitMQ (Debian's rabbitmq-server, apt-installed here if missing) with
  its ``rabbitmq_amqp1_0`` plugin, the same Proton clients on
  ``/queue/aw1`` (the plugin's address for a queue it declares), SASL PLAIN
  guest/guest. RabbitMQ has no groups: it is a throughput reference only,
  every group goes to every consumer;
- Shoal over STOMP: the load generator (bench/loadgen) on the same shape
  and count, after a 10,000-message warm-up (as W1 runs);
- Shoal over STOMP paced (``shoal-stomp-paced``): the same, with the load
  generator held to the msg/s the AMQP run of the same rep reached. The
  Proton clients carry a few thousand messages a second; a broker that
  reads a few frames per wake-up spends more per message than one reading
  hundreds, so this row compares the protocols at the same load.

Shoal's and Artemis' AMQP runs come after warm-up passes of their own
(``--amqp-warmup`` messages each, on another queue, the same clients) that stop
once the broker's CPU per message of two passes in a row is within 10% (at most
8 passes), as ``bench.run`` warms a broker: a JVM keeps compiling for several.

Per run: msg/s (first send to last receive), broker CPU per message (the
broker process's utime+stime over the run; RabbitMQ's beam.smp), and the
per-group order at each consumer. Prints one JSON object; ``--record``
writes it to bench/recorded/amqp-w1-DATE.json, which bench/report.py shows
in docs/benchmarks.md (regenerate: ``python -m bench.run --report``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

NO_PROGRESS = 60.0  # s without a new message anywhere: the run ends short
POLL = 0.2  # s between the consumers' count reports (and the parent's look at them)
RECORDED = Path(__file__).resolve().parent / "recorded"
RABBIT_AUTH = ("guest", "guest")
WARMUP_SETTLED = 0.10  # two warm-up passes this close in CPU/msg: the broker is warm
WARMUP_PASSES = 8
BROKERS = ("shoal-amqp", "artemis-amqp", "rabbitmq-amqp", "shoal-stomp", "shoal-stomp-paced")


def _connect(container, port: int, auth: tuple[str, str] | None):
    url = f"amqp://127.0.0.1:{port}"
    if auth is None:
        return container.connect(url, reconnect=False)
    return container.connect(
        url, reconnect=False, user=auth[0], password=auth[1], allowed_mechs="PLAIN"
    )


def _consume(
    port: int, address: str, prefetch: int, count_file: str, auth: tuple[str, str] | None
) -> None:
    """Receive until the parent says stop (a file ``stop`` next to ``count_file``),
    writing the count received so far to ``count_file`` every POLL s. Consumers
    never leave on their own: one that left while a broker stalled would hand its
    in-flight messages on as redeliveries (RabbitMQ did, on this loaded machine)."""
    stop_file = os.path.join(os.path.dirname(count_file), "stop")
    from proton import Delivery, Message
    from proton.handlers import IncomingMessageHandler, MessagingHandler
    from proton.reactor import Container

    class Consumer(MessagingHandler):
        """Reads each transfer into one reused Message and accepts it, as the
        STOMP load generator's consumers parse only what they check (Proton's
        IncomingMessageHandler builds a new Message per transfer)."""

        def __init__(self) -> None:
            super().__init__(prefetch=prefetch, auto_accept=False)
            self.handlers = [h for h in self.handlers if not isinstance(h, IncomingMessageHandler)]
            self.message = Message()
            self.count = 0
            self.first = self.last = 0.0
            self.last_seq: dict[str, int] = {}
            self.out_of_order = 0

        def on_start(self, event) -> None:
            conn = _connect(event.container, port, auth)
            event.container.create_receiver(conn, address)
            event.container.schedule(POLL, self)

        def on_link_opened(self, event) -> None:
            print("ready", flush=True)

        def on_delivery(self, event) -> None:
            dlv = event.delivery
            link = dlv.link
            if not link.is_receiver or not dlv.readable or dlv.partial:
                return
            m = self.message
            m.decode(link.recv(dlv.pending))
            link.advance()
            dlv.update(Delivery.ACCEPTED)
            dlv.settle()
            now = time.time()
            if not self.count:
                self.first = now
            self.count += 1
            self.last = now
            seq = m.group_sequence
            if seq <= self.last_seq.get(m.group_id, 0):
                self.out_of_order += 1
            self.last_seq[m.group_id] = seq

        def on_timer_task(self, event) -> None:
            if os.path.exists(stop_file):
                event.container.stop()
                return
            tmp = count_file + ".tmp"
            with open(tmp, "w") as f:
                f.write(str(self.count))
            os.replace(tmp, count_file)
            event.container.schedule(POLL, self)

    c = Consumer()
    Container(c).run()
    print(
        json.dumps(
            {
                "count": c.count,
                "first": c.first,
                "last": c.last,
                "out_of_order": c.out_of_order,
                "groups": len(c.last_seq),
            }
        ),
        flush=True,
    )


def _produce(
    port: int,
    address: str,
    messages: int,
    groups: int,
    size: int,
    stop_file: str,
    auth: tuple[str, str] | None,
) -> None:
    from proton import Message
    from proton.handlers import MessagingHandler
    from proton.reactor import AtMostOnce, Container

    body = b"x" * size
    # Every message encoded before the clock starts, as the STOMP load generator
    # formats its frames: the run measures transfers, not Proton's encoder.
    seqs = [0] * groups
    encoded = []
    for i in range(messages):
        g = i % groups
        seqs[g] += 1
        encoded.append(Message(body=body, group_id=f"g{g}", group_sequence=seqs[g]).encode())

    class Producer(MessagingHandler):
        def __init__(self) -> None:
            super().__init__()
            self.sent = 0
            self.start = self.end = 0.0

        def on_start(self, event) -> None:
            conn = _connect(event.container, port, auth)
            event.container.create_sender(conn, address, options=AtMostOnce())

        def on_sendable(self, event) -> None:
            if not self.start:
                self.start = time.time()
            sender = event.sender
            while sender.credit and self.sent < messages:
                dlv = sender.delivery(sender.delivery_tag())
                sender.stream(encoded[self.sent])
                sender.advance()
                dlv.settle()  # pre-settled (AtMostOnce), as Message.send settles it
                self.sent += 1
            if self.sent == messages and not self.end:
                self.end = time.time()
                print(json.dumps({"sent": self.sent, "start": self.start, "end": self.end}))
                sys.stdout.flush()
                # The connection stays open until the consumers are done: RabbitMQ
                # dropped pre-settled transfers still queued when their connection closed.
                self.conn = event.connection
                event.container.schedule(POLL, self)

        def on_timer_task(self, event) -> None:
            if os.path.exists(stop_file):
                self.conn.close()
            else:
                event.container.schedule(POLL, self)

    Container(Producer()).run()


def _wait_received(count_files: list[Path], messages: int) -> None:
    """Until the consumers' counts add up to ``messages`` (or nothing moved for NO_PROGRESS s)."""
    total, moved = -1, time.monotonic()
    while True:
        counts = []
        for path in count_files:
            try:
                counts.append(int(path.read_text() or 0))
            except (OSError, ValueError):
                counts.append(0)
        now = time.monotonic()
        if sum(counts) != total:
            total, moved = sum(counts), now
        if total >= messages or now - moved > NO_PROGRESS:
            return
        time.sleep(POLL)


def _amqp_run(
    handle,
    port: int,
    address: str,
    auth: tuple[str, str] | None,
    messages: int,
    groups: int,
    consumers: int,
    prefetch: int,
    size: int,
) -> dict:
    """The Proton clients against a running broker; the numbers of one run."""
    me = [sys.executable, "-m", "bench.amqp_w1"]
    creds = [] if auth is None else list(auth)
    work = Path(tempfile.mkdtemp(prefix="aw1-"))
    stop_file = work / "stop"
    count_files = [work / f"count-{i}" for i in range(consumers)]
    cons = [
        subprocess.Popen(
            [*me, "consume", str(port), address, str(prefetch), str(count_files[i]), *creds],
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(consumers)
    ]
    prod: subprocess.Popen | None = None
    try:
        for c in cons:
            assert c.stdout is not None and c.stdout.readline().strip() == "ready"
        time.sleep(0.5)  # the links have their credit
        cpu0 = handle.cpu_s()
        prod = subprocess.Popen(
            [*me, "produce", str(port), address, str(messages), str(groups), str(size)]
            + [str(stop_file), *creds],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert prod.stdout is not None
        sent = json.loads(prod.stdout.readline())
        _wait_received(count_files, messages)
        cpu = handle.cpu_s() - cpu0  # up to POLL s after the last message
        stop_file.touch()
        reports = [json.loads(c.communicate(timeout=120)[0].strip().splitlines()[-1]) for c in cons]
        if prod.wait(timeout=60) != 0:
            raise RuntimeError(f"the producer failed: exit {prod.returncode}")
    finally:
        if prod is not None and prod.poll() is None:
            prod.kill()
            prod.wait()
        for c in cons:
            if c.poll() is None:
                c.kill()
                c.wait()
        stop_file.touch()
        shutil.rmtree(work, ignore_errors=True)
    received = sum(r["count"] for r in reports)
    last = max((r["last"] for r in reports if r["count"]), default=sent["start"])
    elapsed = max(1e-9, last - sent["start"])
    return {
        "received": received,  # more than sent: redeliveries (each counted)
        "msg_per_s": round(min(received, messages) / elapsed, 1),
        "broker_cpu_us_per_msg": round(cpu / max(1, received) * 1e6, 1),
        "out_of_order": sum(r["out_of_order"] for r in reports),
        "groups_per_consumer": [r["groups"] for r in reports],
    }


def _warm_then_run(h, port: int, address: str, shape: tuple, warmup: int) -> dict:
    """Warm-up passes of ``warmup`` messages on another queue until the broker's CPU per
    message settles (two passes in a row within WARMUP_SETTLED), then the measured run."""
    messages, *rest = shape
    passes: list[float] = []
    while warmup and len(passes) < WARMUP_PASSES:
        w = _amqp_run(h, port, f"{address}.WARMUP.{len(passes)}", None, warmup, *rest)
        passes.append(w["broker_cpu_us_per_msg"])
        if len(passes) > 1 and abs(passes[-1] - passes[-2]) <= WARMUP_SETTLED * passes[-2]:
            break
    row = _amqp_run(h, port, address, None, messages, *rest)
    return {**row, "warmup": warmup, "warmup_cpu_us_per_msg": passes}


def shoal_amqp(
    messages: int, groups: int, consumers: int, prefetch: int, size: int, warmup: int = 0
) -> dict:
    from bench.peers.common import free_port
    from bench.peers.shoal import start_shoal

    port = free_port()
    with tempfile.TemporaryDirectory(prefix="shoal-aw1-") as d:
        h = start_shoal(d, extra_args=["--amqp", f"127.0.0.1:{port}"])
        try:
            row = _warm_then_run(
                h, port, "aw1", (messages, groups, consumers, prefetch, size), warmup
            )
        finally:
            h.stop()
    return {"run": AMQP_RUN, "version": h.version, **row}


def artemis_amqp(
    messages: int, groups: int, consumers: int, prefetch: int, size: int, warmup: int = 0
) -> dict:
    from bench.peers.artemis import start_artemis

    with tempfile.TemporaryDirectory(prefix="artemis-aw1-") as d:
        h = start_artemis(d)
        try:
            shape = (messages, groups, consumers, prefetch, size)
            row = _warm_then_run(h, h.ports["amqp"], "/queue/aw1", shape, warmup)
        finally:
            h.stop()
    return {"run": ARTEMIS_RUN, "version": h.version, **row}


def rabbitmq_amqp(messages: int, groups: int, consumers: int, prefetch: int, size: int) -> dict:
    from bench.peers.rabbitmq import start_rabbitmq

    with tempfile.TemporaryDirectory(prefix="rabbitmq-aw1-") as d:
        h = start_rabbitmq(d, plugins=("rabbitmq_stomp", "rabbitmq_amqp1_0"))
        try:
            port = h.ports["amqp"]  # AMQP 1.0 on the AMQP listener (protocol header)
            row = _amqp_run(
                h, port, "/queue/aw1", RABBIT_AUTH, messages, groups, consumers, prefetch, size
            )
        finally:
            h.stop()
    return {"run": "RabbitMQ, AMQP 1.0 plugin (Proton clients)", "version": h.version, **row}


AMQP_RUN = "Shoal, AMQP 1.0 (Proton clients)"
ARTEMIS_RUN = "Artemis 2.40, AMQP 1.0 (Proton clients)"
STOMP_RUN = "Shoal, STOMP (load generator)"
PACED_RUN = "Shoal, STOMP at the AMQP run's msg/s (load generator)"


def shoal_stomp(
    messages: int,
    groups: int,
    consumers: int,
    prefetch: int,
    size: int,
    warmup: int,
    rate: float = 0.0,
) -> dict:
    """The load generator on AW1's shape; ``rate`` msg/s (0: as fast as it goes)
    for the measured run, the warm-up unpaced."""
    from bench.loadgen.runner import LoadSpec, run_load
    from bench.peers.shoal import start_shoal

    spec = LoadSpec(
        messages=messages,
        groups=groups,
        consumers=consumers,
        ack="client-individual",
        prefetch=prefetch,
        size=size,
        persistent=False,
    )
    with tempfile.TemporaryDirectory(prefix="shoal-aw1-stomp-") as d:
        h = start_shoal(Path(d) / "broker")
        try:
            if warmup:
                warm = dataclasses.replace(spec, messages=warmup, destination="/queue/BENCH.WARMUP")
                run_load(h, warm, Path(d) / "warmup")
            r = run_load(h, dataclasses.replace(spec, rate=rate), Path(d) / "run")
        finally:
            h.stop()
    return {
        "run": PACED_RUN if rate else STOMP_RUN,
        "version": h.version,
        "rate": rate,
        "received": r["received"],
        "msg_per_s": round(r["throughput"], 1),
        "broker_cpu_us_per_msg": round(r["broker_cpu_us_per_msg"] or 0.0, 1),
        "out_of_order": int(r["order_violations_per_consumer"]),
        "groups_per_consumer": r.get("groups_per_consumer"),
        "warmup": warmup,
    }


def _median_rows(rows: list[dict]) -> list[dict]:
    by_run: dict[str, list[dict]] = {}
    for row in rows:
        by_run.setdefault(row["run"], []).append(row)
    out = []
    for run, rs in by_run.items():
        out.append(
            {
                "run": run,
                "version": rs[0].get("version"),
                "reps": len(rs),
                "msg_per_s": [r["msg_per_s"] for r in rs],
                "msg_per_s_median": statistics.median(r["msg_per_s"] for r in rs),
                "broker_cpu_us_per_msg": [r["broker_cpu_us_per_msg"] for r in rs],
                "broker_cpu_us_per_msg_median": statistics.median(
                    r["broker_cpu_us_per_msg"] for r in rs
                ),
                "out_of_order": sum(r["out_of_order"] for r in rs),
                "groups_per_consumer": rs[-1].get("groups_per_consumer"),
            }
        )
    return out


def run(
    messages: int,
    groups: int,
    consumers: int,
    prefetch: int,
    size: int,
    reps: int,
    brokers: tuple[str, ...],
    warmup: int,
    amqp_warmup: int = 0,
) -> dict:
    shape = (messages, groups, consumers, prefetch, size)
    if "shoal-stomp-paced" in brokers and "shoal-amqp" not in brokers:
        raise ValueError("shoal-stomp-paced takes its rate from a shoal-amqp run")
    # the paced run needs its rep's AMQP rate: AMQP runs first
    brokers = tuple(sorted(brokers, key=lambda b: b != "shoal-amqp"))
    rows: list[dict] = []
    load: list[float] = []
    started = time.time()
    for rep in range(reps):
        amqp_rate = 0.0
        for broker in brokers:
            load.append(os.getloadavg()[0])
            if broker == "shoal-amqp":
                row = shoal_amqp(*shape, amqp_warmup)
                amqp_rate = row["msg_per_s"]
            elif broker == "artemis-amqp":
                row = artemis_amqp(*shape, amqp_warmup)
            elif broker == "rabbitmq-amqp":
                row = rabbitmq_amqp(*shape)
            elif broker == "shoal-stomp-paced":
                row = shoal_stomp(*shape, warmup, rate=amqp_rate)
            else:
                row = shoal_stomp(*shape, warmup)
            row["rep"] = rep
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    summary = _median_rows(rows)
    by_run = {r["run"]: r for r in summary}

    def cpu_ratio(run: str) -> float | None:
        amqp, stomp = by_run.get(AMQP_RUN), by_run.get(run)
        if not (amqp and stomp):
            return None
        return round(
            amqp["broker_cpu_us_per_msg_median"] / stomp["broker_cpu_us_per_msg_median"], 2
        )

    return {
        "workload": "AW1 (W1 over AMQP 1.0)",
        "date": time.strftime("%Y-%m-%d", time.gmtime(started)),
        "command": "python -m bench.amqp_w1 " + " ".join(sys.argv[1:]),
        "shape": {
            "messages": messages,
            "groups": groups,
            "consumers": consumers,
            "prefetch": prefetch,
            "size": size,
            "stomp_warmup": warmup,
            "amqp_warmup": amqp_warmup,
        },
        "reps": reps,
        "wall_s": round(time.time() - started, 1),
        "loadavg_1m_at_starts": load,
        "rows": rows,
        "summary": summary,
        "amqp_over_stomp_cpu": cpu_ratio(STOMP_RUN),
        "amqp_over_paced_stomp_cpu": cpu_ratio(PACED_RUN),
    }


def markdown(doc: dict) -> str:
    """The table docs/benchmarks.md shows for one recorded AW1 run."""
    lines = [
        "| run | msg/s (median; each rep) | broker CPU per message (median; each rep) "
        "| groups in order |",
        "|---|---|---|---|",
    ]
    for r in doc["summary"]:
        reps = ", ".join(f"{v:,.0f}" for v in r["msg_per_s"])
        cpu = ", ".join(f"{v:.1f}" for v in r["broker_cpu_us_per_msg"])
        if r["run"].startswith("RabbitMQ"):
            order = "n/a: no groups"
        else:
            order = "yes" if r["out_of_order"] == 0 else f"**{r['out_of_order']} out of order**"
        lines.append(
            f"| {r['run']} | {r['msg_per_s_median']:,.0f} ({reps}) "
            f"| {r['broker_cpu_us_per_msg_median']:.1f} us ({cpu}) | {order} |"
        )
    return "\n".join(lines)


INTRO = (
    "`bench/amqp_w1.py`: W1's shape (256-byte non-persistent messages, 100 groups, 4 "
    "consumers accepting each message, credit/prefetch 1000, one producer sending "
    "pre-settled transfers). Shoal, Artemis 2.40 and RabbitMQ over AMQP 1.0 with the same Qpid "
    "Proton reactor clients (Python, one process each), Shoal and Artemis after warm-up passes "
    "until their CPU per message settles; Shoal over STOMP with the load generator "
    "after a warm-up, and held to the msg/s of the same rep's AMQP run, which compares the "
    "protocols at the same load. A fresh broker per run; broker CPU counts from the first "
    "send until the consumers together have every message. RabbitMQ "
    "(`rabbitmq_amqp1_0`) has no groups: a throughput reference only. Goal: broker CPU per "
    "AMQP message at most 1.5x the STOMP figure. The AMQP msg/s are bounded by the Python "
    "Proton clients (5 processes on the same 2 cores) as much as by the brokers; broker CPU "
    "per message is the figure to compare."
)


def section(path: Path, d: dict) -> list[str]:
    """docs/benchmarks.md's section body for the latest recorded run."""
    return [INTRO, "", *run_lines(path.name, d)[:-1]]


def run_lines(name: str, d: dict) -> list[str]:
    """One recorded AW1 run as the benchmark pages show it: command, table, goal."""
    load = d.get("loadavg_1m_at_starts") or []
    lines = [
        f"`bench/recorded/{name}`, {d.get('date', '')}: `{d['command']}`, {d['reps']} reps"
        + (f"; 1-minute load average {min(load):.1f}-{max(load):.1f}." if load else "."),
        "",
        markdown(d),
        "",
    ]
    ratio, paced = d.get("amqp_over_stomp_cpu"), d.get("amqp_over_paced_stomp_cpu")
    if ratio is not None:
        met = "met" if ratio <= 1.5 else "**not met**"
        lines += [f"Broker CPU per AMQP message: {ratio:.1f}x the STOMP figure (goal {met}).", ""]
    if paced is not None:
        lines += [f"Against STOMP held to the AMQP run's msg/s (the same load): {paced:.2f}x.", ""]
    return lines


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "consume":
        auth = (sys.argv[6], sys.argv[7]) if len(sys.argv) > 7 else None
        _consume(int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5], auth)
        return 0
    if len(sys.argv) > 1 and sys.argv[1] == "produce":
        auth = (sys.argv[8], sys.argv[9]) if len(sys.argv) > 9 else None
        _produce(int(sys.argv[2]), sys.argv[3], *map(int, sys.argv[4:7]), sys.argv[7], auth)
        return 0
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--messages", type=int, default=50_000)
    p.add_argument("--groups", type=int, default=100)
    p.add_argument("--consumers", type=int, default=4)
    p.add_argument("--prefetch", type=int, default=1000)
    p.add_argument("--size", type=int, default=256)
    p.add_argument("--reps", type=int, default=1)
    p.add_argument("--stomp-warmup", type=int, default=10_000)
    p.add_argument(
        "--amqp-warmup",
        type=int,
        default=10_000,
        help="messages per warm-up pass of Shoal's and Artemis' AMQP runs",
    )
    p.add_argument(
        "--broker",
        action="append",
        choices=BROKERS,
        help="repeatable; default all five",
    )
    p.add_argument("--record", action="store_true", help="write bench/recorded/amqp-w1-DATE.json")
    a = p.parse_args()
    brokers = tuple(a.broker or BROKERS)
    doc = run(
        a.messages,
        a.groups,
        a.consumers,
        a.prefetch,
        a.size,
        a.reps,
        brokers,
        a.stomp_warmup,
        a.amqp_warmup,
    )
    text = json.dumps(doc, indent=1)
    print(text)
    if a.record:
        path = RECORDED / f"amqp-w1-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
        path.write_text(text + "\n")
        print(f"recorded {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
