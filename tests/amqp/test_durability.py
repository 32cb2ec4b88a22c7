"""kill -9 under AMQP load: every accepted durable transfer survives, in order."""

from __future__ import annotations

import random
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

import pytest
from proton import Message, Timeout
from proton.handlers import MessagingHandler
from proton.reactor import Container
from proton.utils import BlockingConnection

from support import wait_for

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "e2e"))
from durability_helpers import blocked_writers, frozen, loop_ext4

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

GROUPS = [f"g{n:02d}" for n in range(12)]


class Producer(MessagingHandler):
    """Pipelines durable grouped transfers; remembers which were accepted."""

    def __init__(self, url: str, total: int) -> None:
        super().__init__(auto_settle=True)
        self.url, self.total = url, total
        self.next = 0
        self.keys: dict[bytes, tuple[str, int]] = {}
        self.accepted: list[tuple[str, int]] = []
        self.container: Container | None = None

    def on_start(self, event) -> None:
        conn = event.container.connect(self.url, reconnect=False)
        event.container.create_sender(conn, "dur.amqp")

    def on_sendable(self, event) -> None:
        sender = event.sender
        while sender.credit and self.next < self.total:
            g = GROUPS[self.next % len(GROUPS)]
            seq = self.next // len(GROUPS)
            dlv = sender.send(
                Message(body=f"{g}:{seq}", group_id=g, group_sequence=seq + 1, durable=True)
            )
            self.keys[dlv.tag] = (g, seq)
            self.next += 1

    def on_accepted(self, event) -> None:
        self.accepted.append(self.keys[event.delivery.tag])

    def on_transport_error(self, event) -> None:
        event.container.stop()  # the broker was killed: no reconnect


@pytest.mark.parametrize("kill_after", [50, 600])
def test_kill9_under_amqp_load_keeps_every_accepted_transfer_in_order(shoal_server, kill_after):
    srv = shoal_server()
    producer = Producer(f"amqp://127.0.0.1:{srv.amqp_port}", 20_000)
    thread = threading.Thread(target=Container(producer).run, daemon=True)
    thread.start()
    kill_at = kill_after + random.randint(0, 50)
    wait_for(lambda: len(producer.accepted) >= kill_at, timeout=60)
    srv.kill9()
    thread.join(20)
    accepted = set(producer.accepted)
    assert len(accepted) >= kill_at

    srv.start()
    conn = BlockingConnection(f"amqp://127.0.0.1:{srv.amqp_port}")
    receiver = conn.create_receiver("dur.amqp", credit=200)
    got: dict[str, list[int]] = defaultdict(list)
    keys = set()
    while True:
        try:
            m = receiver.receive(timeout=3)
        except Timeout:  # drained
            break
        g, _, seq = m.body.partition(":")
        got[g].append(int(seq))
        keys.add((g, int(seq)))
        receiver.accept()
    conn.close()
    missing = accepted - keys
    assert not missing, f"accepted transfers lost: {sorted(missing)[:10]}"
    for g, seqs in got.items():
        assert seqs == list(range(len(seqs))), (g, seqs[:20])  # in order, no gaps


def test_a_durable_transfer_is_accepted_only_after_its_fsync(shoal_server, tmp_path):
    """Deterministic: while the journal's file system is frozen, no accepted outcome."""
    data = tmp_path / "frozen-data"
    with loop_ext4(tmp_path / "journal.img", data / "journal") as journal:
        srv = shoal_server(data=data, config="[broker]\njournal-segment-bytes = 262144\n")
        try:
            producer = Producer(f"amqp://127.0.0.1:{srv.amqp_port}", 1)
            with frozen(journal):
                thread = threading.Thread(target=Container(producer).run, daemon=True)
                thread.start()
                wait_for(lambda: producer.next == 1, timeout=10)
                wait_for(lambda: blocked_writers(srv.proc.pid), timeout=10)
                time.sleep(0.5)  # room for a wrongly early outcome to arrive
                early = list(producer.accepted)
            assert early == [], "accepted before the message was on disk"
            wait_for(lambda: producer.accepted, timeout=30)
        finally:
            srv.kill9()  # before the file system goes
            thread.join(10)
        assert producer.accepted == [("g00", 0)]


def test_a_durable_message_keeps_its_amqp_sections_across_a_kill9(shoal_server, tmp_path):
    """The journal stores the encoding as received: after a restart an AMQP
    consumer still gets the message annotations, reply-to-group-id and typed
    properties (docs/journal.md, flag F_AMQP)."""
    from proton import symbol, uint

    data = tmp_path / "kept-data"
    srv = shoal_server(data=data)
    conn = BlockingConnection(f"amqp://127.0.0.1:{srv.amqp_port}")
    sent = Message(
        body=b"kept",
        group_id="g",
        reply_to_group_id="answers",
        durable=True,
        properties={"n": uint(7)},
    )
    sent.annotations = {symbol("x-opt-jms-msg-type"): 3}
    try:
        conn.create_sender("kept.dur").send(sent)  # returns once accepted: on disk
    finally:
        conn.close()
    srv.kill9()
    srv = shoal_server(data=data)
    conn = BlockingConnection(f"amqp://127.0.0.1:{srv.amqp_port}")
    try:
        receiver = conn.create_receiver("kept.dur", credit=1)
        got = receiver.receive(timeout=10)
        receiver.accept()
    finally:
        conn.close()
    assert got.annotations == {symbol("x-opt-jms-msg-type"): 3}
    assert (got.reply_to_group_id, got.group_id, bytes(got.body)) == ("answers", "g", b"kept")
    assert got.properties == {"n": 7} and type(got.properties["n"]) is uint
    assert got.durable and got.delivery_count == 1  # after a crash: may have been delivered
