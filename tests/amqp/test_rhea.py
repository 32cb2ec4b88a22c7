"""rhea (Node.js), a second AMQP 1.0 implementation, with a STOMP producer on the same queue."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections import defaultdict
from pathlib import Path

import pytest
import stomp

pytestmark = pytest.mark.e2e

HERE = Path(__file__).parent


def test_rhea_consumers_get_whole_groups_in_order_from_amqp_and_stomp(shoal_server) -> None:
    missing = None
    if shutil.which("node") is None:
        missing = "node is not installed"
    elif not (HERE / "node_modules" / "rhea").is_dir():
        missing = "tests/amqp/node_modules missing: run `make test` (npm ci in tests/amqp)"
    if missing:  # CI installs both (make test): there a missing part is a failure
        (pytest.fail if os.environ.get("CI") else pytest.skip)(missing)
    server = shoal_server()
    amqp_groups, stomp_groups, per_group = 6, 4, 10
    total = (amqp_groups + stomp_groups) * per_group
    node = subprocess.Popen(
        [
            "node",
            str(HERE / "group_consumers.js"),
            str(server.amqp_port),
            "orders",
            str(amqp_groups),
            str(per_group),
            str(total),
        ],
        cwd=HERE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert node.stdout is not None
        assert node.stdout.readline().strip() == "ready", node.stderr.read() if node.stderr else ""
        s = stomp.Connection([("127.0.0.1", server.stomp_port)])
        s.connect(wait=True)
        for seq in range(1, per_group + 1):
            for g in range(stomp_groups):
                s.send(
                    "/queue/orders",
                    f"s{g}-{seq}",
                    headers={
                        "JMSXGroupID": f"s{g}",
                        "JMSXGroupSeq": str(seq),
                        "via": "stomp",
                        "persistent": "true",
                    },
                )
        s.disconnect()
        out, err = node.communicate(timeout=90)
    finally:
        if node.poll() is None:
            node.kill()
            node.wait()
    report = json.loads(out.strip().splitlines()[-1])
    assert node.returncode == 0 and report["errors"] == [], (report["errors"], err)
    by_group: dict[str, list[int]] = defaultdict(list)
    owners: dict[str, set[int]] = defaultdict(set)
    for consumer, group, seq, via in report["received"]:
        by_group[group].append(seq)
        owners[group].add(consumer)
        assert via == ("rhea" if group.startswith("r") else "stomp")
    expected = list(range(1, per_group + 1))
    assert dict(by_group) == {
        **{f"r{g}": expected for g in range(amqp_groups)},
        **{f"s{g}": expected for g in range(stomp_groups)},
    }
    assert all(len(o) == 1 for o in owners.values()), owners  # one consumer per group
    assert {c for o in owners.values() for c in o} == {0, 1}  # both consumers had groups
