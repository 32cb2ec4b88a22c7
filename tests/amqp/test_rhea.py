"""rhea (Node.js), a second AMQP 1.0 implementation, with a STOMP producer on the same queue."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections import defaultdict
from pathlib import Path

import pytest
import stomp

from skips import skip_missing

pytestmark = pytest.mark.e2e

HERE = Path(__file__).parent


def _need_node() -> None:
    if shutil.which("node") is None:
        skip_missing("node")
    if not (HERE / "node_modules" / "rhea").is_dir():
        skip_missing("tests/amqp/node_modules", "make tests/amqp/node_modules")


def test_rhea_consumers_get_whole_groups_in_order_from_amqp_and_stomp(shoal_server) -> None:
    _need_node()
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


def test_rhea_typed_properties_ids_and_a_group_close_reach_a_proton_consumer(
    shoal_server,
) -> None:
    """A second AMQP implementation as producer: what it typed, a Proton consumer gets."""
    from proton import int32, timestamp, uint
    from proton.utils import BlockingConnection

    _need_node()
    server = shoal_server()
    subprocess.run(
        ["node", str(HERE / "typed_producer.js"), str(server.amqp_port), "typed"],
        cwd=HERE,
        check=True,
        timeout=60,
    )
    conn = BlockingConnection(f"amqp://127.0.0.1:{server.amqp_port}")
    try:
        receiver = conn.create_receiver("typed", credit=5)
        first, close = receiver.receive(timeout=10), receiver.receive(timeout=10)
        receiver.accept()
        expected = {
            "count": uint(42),
            "neg": int32(-7),
            "price": 9.75,
            "ok": True,
            "name": "x",
            "when": timestamp(1700000000000),
        }
        assert first.properties == expected
        assert {k: type(v) for k, v in first.properties.items()} == {
            k: type(v) for k, v in expected.items()
        }
        assert (first.id, first.correlation_id, first.subject, first.reply_to) == (
            "order-1",
            "corr-1",
            "order",
            "replies",
        )
        assert (first.group_id, first.group_sequence, first.body) == ("g", 1, "one")
        assert close.group_id == "g" and close.properties == {"JMSXGroupSeq": -1}
    finally:
        conn.close()


def test_rhea_annotations_reply_to_group_id_and_footer_pass_through_the_broker(
    shoal_server,
) -> None:
    """Sections a broker passes on unchanged (Artemis keeps them too); delivery
    annotations are for one hop only, and the header is the broker's."""
    _need_node()
    server = shoal_server()
    done = subprocess.run(
        ["node", str(HERE / "kept_sections.js"), str(server.amqp_port), "kept"],
        cwd=HERE,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert got["message_annotations"] == {"x-opt-jms-msg-type": 3, "x-opt-origin": "rhea"}
    assert got["footer"] == {"x-opt-checksum": "abc"}
    assert (got["group_id"], got["reply_to_group_id"]) == ("g", "answers")
    assert (got["application_properties"], got["body"]) == ({"n": 7}, "payload")
    assert got["delivery_annotations"] is None
    assert got["first_acquirer"] and got["delivery_count"] == 0
