"""Cluster fault figures (issue 15; docs/cluster.md, docs/benchmarks.md): one run.

    .venv/bin/python -m bench.cluster_faults [--out bench/recorded/faults-DATE.json]

Two runs of tests/cluster/faults.py, each with ZooKeeper and three nodes,
a producer (persistent, one receipt at a time) and an auto-ack consumer on
every node, nine groups, three held by each node:

1. kill -9 of n1 under load, restarted 3 s later (loopback);
2. a network partition of n3 (as root: ZooKeeper and each node in its own
   network namespace, n3's bridge port set down) held until ZooKeeper has
   expired n3's session and 2 s more, then healed;
3. the same with ``rebind-after = 500``: n3's groups move to n1 and n2
   while n3 is cut off; healed once they are served there.

Reported: messages receipted and delivered, lost (receipted, never
delivered), duplicates without ``redelivered:true``, order violations
(per producer and group, first deliveries), groups consumed on two nodes,
and seconds to recover: from the restart or the heal until every message
receipted before it has been delivered.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import tempfile
from pathlib import Path

from tests.cluster.faults import Figures, kill9_run, partition_rebind_run, partition_run
from tests.netns import NetnsLab, unavailable


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, help="write the figures as JSON (bench/recorded/)")
    args = ap.parse_args()
    doc: dict = {
        "date": datetime.date.today().isoformat(),
        "command": "python -m bench.cluster_faults",
        "faults": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        f: Figures = kill9_run(Path(tmp) / "kill9")
        doc["faults"]["kill9"] = dataclasses.asdict(f)
        print("kill -9:", f, flush=True)
        why = unavailable()
        if why is None:
            with NetnsLab(["zk", "n1", "n2", "n3"]) as lab:
                f = partition_run(Path(tmp) / "partition", lab)
            doc["faults"]["partition"] = dataclasses.asdict(f)
            print("partition:", f, flush=True)
            with NetnsLab(["zk", "n1", "n2", "n3"]) as lab:
                f, facts = partition_rebind_run(Path(tmp) / "rebind", lab)
            f.extra = facts
            doc["faults"]["partition_rebind"] = dataclasses.asdict(f)
            print("partition, rebind-after 500:", f, flush=True)
        else:
            doc["faults"]["partition"] = {"skipped": why}
            doc["faults"]["partition_rebind"] = {"skipped": why}
            print("partition skipped:", why, flush=True)
    if args.out is not None:
        args.out.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


def section(_path: Path, d: dict) -> list[str]:
    """docs/benchmarks.md's section body for the latest recorded run."""
    return [
        f"`{d['command']}` ({d['date']}; bench/cluster_faults.py): ZooKeeper and three "
        "nodes, a producer (persistent, one receipt at a time) and an auto-ack consumer on "
        "every node, nine groups, three held by each node. The partition run puts "
        "ZooKeeper and each node in a network namespace of its own (as root) and sets "
        "n3's bridge port down until ZooKeeper has expired n3's ZooKeeper session, plus "
        "2 s; the third column does the same with `rebind-after = 500`, healing once n3's "
        "groups are served by their new holders. Recovery includes the links' reconnect "
        "back-off (up to 2 s) and, after a partition, the cut-off node's binding re-check.",
        "",
        markdown(d),
    ]


def markdown(doc: dict) -> str:
    """The docs/benchmarks.md table of one run (bench/report.py)."""
    runs = doc["faults"]
    cols = [runs.get(k) or {} for k in ("kill9", "partition", "partition_rebind")]

    def cell(r: dict, key: str) -> str:
        if "skipped" in r:
            return f"not measured ({r['skipped']})"
        if key == "at_once":
            at_once = (r.get("extra") or {}).get("overlapping_groups")
            return str(len(at_once)) if at_once is not None else str(r["groups_on_two_nodes"])
        v = r.get(key)
        return "-" if v is None else (f"{v:,}" if isinstance(v, int) else f"{v}")

    rows = [
        ("messages receipted / delivered", ("receipted", "delivered")),
        ("messages lost (receipted, not delivered)", ("lost",)),
        ("duplicates without `redelivered`", ("duplicates_unflagged",)),
        ("redelivered copies (flagged)", ("redelivered",)),
        ("order violations (per producer and group)", ("order_violations",)),
        ("groups consumed on two nodes: at all / at once", ("groups_on_two_nodes", "at_once")),
        ("seconds to recover (restart or heal -> all earlier receipts delivered)", ("recover_s",)),
    ]
    out = [
        "| figure | kill -9 of n1 | partition of n3 | partition of n3, `rebind-after = 500` |",
        "|---|---|---|---|",
    ]
    for label, keys in rows:
        cells = [" / ".join(cell(r, k) for k in keys) for r in cols]
        out.append(f"| {label} | " + " | ".join(cells) + " |")
    k, p, r = cols
    x, y = p.get("extra") or {}, r.get("extra") or {}
    if x:
        out += [
            "",
            f"Partition: n3 fenced itself {x['fence_after_s']} s after the cut; the other nodes "
            f"saw its ZooKeeper session expire after {x['session_expired_after_s']} s; cut "
            f"{x['cut_s']} s in all. While fenced it accepted "
            f"{x['sends_accepted_by_cut_node_while_fenced']} SENDs and delivered "
            f"{x['delivered_of_cut_groups_while_fenced']} messages of its groups (the other "
            f"nodes delivered {x['delivered_elsewhere_while_fenced']} of theirs); it delivered "
            f"again {x['unfence_after_heal_s']} s after the heal. kill -9: n1 was down "
            f"{(k.get('extra') or {}).get('down_s')} s.",
        ]
    if y:
        parked = sum(y["parked_on_n3"].values())
        head = (
            f"Partition with `rebind-after = 500`: n3 fenced itself {y['fence_after_s']} s "
            f"after the cut, the others forgot it after {y['forgotten_after_s']} s and served "
            "its three groups while it was cut off (so each was consumed on two nodes, one "
            "after the other, never at once). "
        )
        if "stranded_sent_by_n3" in y:  # since n3 sends what it stored to the new holders
            tail = (
                f"After the heal n3 found them bound elsewhere and sent the "
                f"{y['stranded_sent_by_n3']} messages of them it had stored while cut off to "
                f"their new holders, in order per producer ({parked} parked); they were "
                "consumed after what the new holders had consumed meanwhile (docs/cluster.md, "
                "C6)."
            )
        else:  # the first recorded run: n3 parked them
            tail = (
                f"After the heal n3 found them bound elsewhere and parked the {parked} "
                "messages of them it held: those are the messages counted lost here; `shoal "
                "groups resume` on n3 delivered them there (that build; docs/cluster.md, C6)."
            )
        out += ["", head + tail]
    return "\n".join(out)


if __name__ == "__main__":
    raise SystemExit(main())
