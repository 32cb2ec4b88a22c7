"""The standard matrix (W1-W8) and the extra rows used to validate the harness.

A workload is one or more phases; each phase is a LoadSpec run against the broker.
Every workload runs on a freshly started broker, after a warm-up of 100k messages
(the JVM needs about that many), `reps` times, each repetition on its own queue (and,
for a workload with `broker_per_rep`, on its own fresh broker).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from bench.loadgen.runner import LoadSpec

W1_SPEC = LoadSpec(
    messages=100_000,
    size=256,
    groups=100,
    consumers=4,
    ack="client-individual",
    persistent=False,
    prefetch=1000,
)


@dataclass
class Workload:
    name: str
    title: str
    phases: dict[str, LoadSpec]  # phase name -> spec (most have one: "main")
    target: str = ""  # the target, in words
    notes: str = ""
    warmup: int = 100_000
    standard: bool = True
    reference: dict = field(default_factory=dict)  # ActiveMQ reference figures, if any
    # Each rep on its own fresh broker: a figure measured from the broker's state before
    # the rep (RSS growth) is skewed by what earlier reps left behind.
    broker_per_rep: bool = False


def _w(**kw) -> LoadSpec:
    return dataclasses.replace(W1_SPEC, **kw)


WORKLOADS: dict[str, Workload] = {}


def _add(w: Workload) -> None:
    WORKLOADS[w.name] = w


_add(
    Workload(
        "W1",
        "100k x 256 B, 100 groups, 4 consumers, client-individual, non-persistent",
        {"main": _w()},
        target="throughput >= 1.5x ActiveMQ and broker CPU/msg <= 0.7x ActiveMQ",
        reference={
            "throughput": 38727,
            "throughput_min": 33549,
            "throughput_max": 39484,
            "p50": 183,
            "p99": 276,
            "cpu_us": 43,
        },
    )
)
_add(
    Workload(
        "W2",
        "W1 with persistent:true",
        {"main": _w(persistent=True)},
        target="throughput >= 1.5x ActiveMQ",
        reference={
            "throughput": 23333,
            "throughput_min": 20818,
            "throughput_max": 28650,
            "p50": 404,
            "p99": 597,
            "cpu_us": 71,
        },
    )
)
_add(
    Workload(
        "W3",
        "20k messages over 10,000 random groups",
        {"main": _w(messages=20_000, groups=10_000, dist="random")},
        target="0 order violations",
        reference={
            "throughput": 44527,
            "throughput_min": 44105,
            "throughput_max": 44775,
            "p50": 158,
            "p99": 298,
            "cpu_us": 35,
            "cross_violations": "449, 775, 49",
            "groups_moved": "4,726 / 4,608 / 4,688",
        },
    )
)
_add(
    Workload(
        "W4",
        "W1 with no group header",
        {"main": _w(group_header=None)},
        notes="messages still carry bench-group (for the checks) but no JMSXGroupID",
        reference={
            "throughput": 57994,
            "throughput_min": 43835,
            "throughput_max": 58361,
            "p50": 142,
            "p99": 218,
            "cpu_us": 24,
        },
    )
)
_add(
    Workload(
        "W5",
        "5,000 msg/s fixed rate, latency (50k messages, 100 groups)",
        {"main": _w(messages=50_000, rate=5000)},
        target="p99 no worse than ActiveMQ",
        reference={"throughput": 5000, "p50": 0.1, "p99": 1.1, "cpu_us": 94},
    )
)
_add(
    Workload(
        "W6",
        "RECEIPT per SEND, persistent, 1, 8 and 32 producers (20k messages)",
        {
            "1p": _w(messages=20_000, receipts=True, persistent=True, producers=1),
            "8p": _w(messages=20_000, receipts=True, persistent=True, producers=8),
            "32p": _w(messages=20_000, receipts=True, persistent=True, producers=32),
            "8p-nodisk": _w(messages=20_000, receipts=True, persistent=False, producers=8),
        },
        target="with 8 producers: throughput >= 3x ActiveMQ",
        notes=(
            "8p-nodisk: the 8p load with non-persistent messages, so no fsync at all: the "
            "most receipted SENDs per second this client and machine carry through the "
            "broker; a persistent 8p figure above it cannot be measured here."
        ),
        reference={
            "throughput": 2824,
            "throughput_min": 2763,
            "throughput_max": 2844,
            "p50": 0.1,
            "p99": 0.3,
            "cpu_us": 278,
            "phase": "1p",
        },
    )
)
_add(
    Workload(
        "W7",
        "one slow owner (10 ms/msg) with a 100k backlog in its group; 50 other groups "
        "flow at 1,000 msg/s (10k messages): their latency",
        {
            "unloaded": _w(messages=10_000, groups=50, rate=1000, consumers=3),
            "loaded": _w(
                messages=10_000,
                groups=50,
                rate=1000,
                consumers=4,
                slow_consumers=1,
                slow_ms=10,
                preload=100_000,
                preload_consumers=1,
                deadline_after_send=60,
            ),
        },
        target="other groups' p99 < 2x their unloaded p99",
        notes=(
            "unloaded: the 50 groups and 3 normal consumers alone. loaded: a 4th, slow "
            "consumer (10 ms per message, acks each) subscribes first and owns group g50, "
            "into which 100k messages are sent before the 3 normal consumers join; then "
            "the same 50-group flow. Messages not received 60 s after the last send count "
            "as lost and as latency +inf."
        ),
    )
)
_add(
    Workload(
        "W8",
        "1M live groups: 2M messages (2 per group, i mod G), at most 20k in flight",
        {"main": _w(messages=2_000_000, groups=1_000_000, max_in_flight=20_000, idle_timeout=60)},
        target="<= 300 B of broker RSS per group",
        notes=(
            "RSS per group = (broker RSS at the end - RSS before the run) / 1M, and the peak. "
            "ActiveMQ keeps at most 1024 groups per queue by default (LRU) and its RSS is "
            "the JVM heap (1 GiB, touched as used), so its figure is not memory per group."
        ),
        broker_per_rep=True,
    )
)

# --- extra rows of the reference table (harness validation) --------------------------

_add(
    Workload(
        "X-prefetch10",
        "W1 with prefetch 10",
        {"main": _w(prefetch=10)},
        standard=False,
        reference={
            "throughput": 21959,
            "throughput_min": 21905,
            "throughput_max": 24854,
            "p50": 1875,
            "p99": 2214,
            "cpu_us": 65,
        },
    )
)
_add(
    Workload(
        "X-10k-mod",
        "20k messages over 10,000 groups, i mod G",
        {"main": _w(messages=20_000, groups=10_000, dist="rr")},
        standard=False,
        reference={
            "throughput": 42440,
            "throughput_min": 30110,
            "throughput_max": 44288,
            "p50": 179,
            "p99": 299,
            "cpu_us": 37,
            "groups_moved": "8,095 / 0 / 7,090",
        },
    )
)
_add(
    Workload(
        "X-10k-simplemap",
        "W3 on a GROUPS.SIMPLEMAP.> queue (ActiveMQ: unbounded group map)",
        {
            "main": _w(
                messages=20_000,
                groups=10_000,
                dist="random",
                destination="/queue/GROUPS.SIMPLEMAP.BENCH",
            )
        },
        standard=False,
        reference={
            "throughput": 37823,
            "throughput_min": 37567,
            "throughput_max": 39152,
            "p50": 174,
            "p99": 218,
            "cpu_us": 36,
        },
    )
)
_add(
    Workload(
        "X-sync",
        "RECEIPT per SEND, non-persistent, 20k messages",
        {"main": _w(messages=20_000, receipts=True)},
        standard=False,
        reference={
            "throughput": 13796,
            "throughput_min": 12231,
            "throughput_max": 15247,
            "p50": 0.1,
            "p99": 1.1,
            "cpu_us": 75,
        },
    )
)

STANDARD = [w for w in WORKLOADS if WORKLOADS[w].standard]
VALIDATION = [
    "W1",
    "W2",
    "W3",
    "W4",
    "W5",
    "W6",
    "X-prefetch10",
    "X-10k-mod",
    "X-10k-simplemap",
    "X-sync",
]
