"""Qpid JMS, the reference AMQP client of Artemis' users, against a real `shoal serve`.

The client is tests/jms (a Maven project, Qpid JMS pinned in its pom.xml; `make test`
builds it): each call does one JMS flow and prints what it received as JSON lines,
and the assertions are here. Every flow runs on both builds, compiled and pure.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from support import get_json, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

PROJECT = Path(__file__).resolve().parent
JAR = PROJECT / "target" / "shoal-jms.jar"
CLASSPATH = PROJECT / "target" / "classpath.txt"


def _built() -> bool:
    if not (JAR.exists() and CLASSPATH.exists()):
        return False
    sources = [PROJECT / "pom.xml", *PROJECT.glob("src/**/*.java")]
    return JAR.stat().st_mtime >= max(p.stat().st_mtime for p in sources)


@pytest.fixture(scope="session")
def jms_classpath() -> str:
    """The client's class path, building it with Maven when it is missing or stale."""
    if not _built():
        mvn = shutil.which("mvn")
        if mvn is None:
            pytest.fail("Maven (mvn) is needed to build the Qpid JMS client in tests/jms")
        subprocess.run([mvn, "-B", "-q", "package"], cwd=PROJECT, check=True, timeout=600)
    return f"{JAR}:{CLASSPATH.read_text().strip()}"


@pytest.fixture(params=["compiled", "pure"])
def broker(request, shoal_server, monkeypatch):
    """A Shoal process on free ports, on the build the test is parametrized with."""
    if request.param == "pure":
        monkeypatch.setenv("SHOAL_PURE", "1")
    else:
        monkeypatch.delenv("SHOAL_PURE", raising=False)
    proc = shoal_server()
    monkeypatch.delenv("SHOAL_PURE", raising=False)
    return proc


class Jms:
    """Runs the JMS client against one broker."""

    def __init__(self, classpath: str, port: int) -> None:
        self.classpath = classpath
        self.url = f"amqp://127.0.0.1:{port}"

    def _args(self, command: str, *args: str) -> list[str]:
        java = shutil.which("java") or "java"
        return [java, "-cp", self.classpath, "shoal.interop.JmsClient", command, self.url, *args]

    def run(self, command: str, *args: str) -> list[dict]:
        done = subprocess.run(
            self._args(command, *args), capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
        lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
        return [line for line in lines if "seq" in line]  # the messages, not the progress

    def start(self, command: str, *args: str) -> Receiver:
        """A client left running (a receiver), once it says its consumers are attached;
        it waits for its first message however slow the sender is to start."""
        args = (*args, "--wait-first", "60000")
        return Receiver(
            subprocess.Popen(
                self._args(command, *args),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )


class Receiver:
    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        self.lines: list[dict] = []
        assert self.next_line() == {"ready": True}

    def next_line(self) -> dict:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait(timeout=30)
            raise AssertionError(f"the JMS client ended: {self.proc.stderr.read()}")  # type: ignore[union-attr]
        return json.loads(line)

    def messages(self, count: int) -> list[dict]:
        """The next `count` messages this receiver prints (other lines kept in .lines)."""
        got: list[dict] = []
        while len(got) < count:
            line = self.next_line()
            self.lines.append(line)
            if "seq" in line:
                got.append(line)
        return got

    def finish(self) -> list[dict]:
        """Everything it prints until it stops (it stops once idle)."""
        out, err = self.proc.communicate(timeout=120)
        assert self.proc.returncode == 0, err
        self.lines += [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        return [line for line in self.lines if "seq" in line]


@pytest.fixture
def jms(broker, jms_classpath) -> Jms:
    return Jms(jms_classpath, broker.amqp_port)


def by_group(messages: list[dict]) -> dict[str, list[dict]]:
    groups: dict[str, list[dict]] = {}
    for m in messages:
        groups.setdefault(m["group"], []).append(m)
    return groups


def test_groups_spread_over_two_consumers_each_in_order(jms):
    receiver = jms.start("receive", "orders", "--consumers", "2")
    jms.run("send", "orders", "--groups", "10", "--per-group", "20")
    received = receiver.finish()

    assert len(received) == 200
    groups = by_group(received)
    assert sorted(groups) == sorted(f"g{i}" for i in range(10))
    for group, messages in groups.items():
        assert {m["consumer"] for m in messages} == {messages[0]["consumer"]}, group
        assert [m["seq"] for m in messages] == list(range(1, 21)), group
        assert not any(m["redelivered"] for m in messages)
    # New groups go to the consumer with the fewest among those ready to receive (one
    # whose socket the client is slow to read is not), so both get groups.
    owners = [messages[0]["consumer"] for messages in groups.values()]
    assert set(owners) == {0, 1}


def test_group_seq_minus_one_closes_the_group(jms, broker):
    """Qpid JMS writes JMSXGroupSeq = -1 as group-sequence 2^32 - 1, which Artemis reads
    as -1: the group closes, and its next message is a new group's first."""
    queue = "close?group-first-key=JMSXGroupFirstForConsumer"
    receiver = jms.start("receive", queue, "--consumers", "2", "--max", "5", "--idle", "60000")
    jms.run("send", "close", "--groups", "1", "--per-group", "3", "--close-groups")
    first = receiver.messages(3)
    assert [(m["seq"], m["first"]) for m in first] == [(1, "true"), (2, None), (3, None)]
    assert len({m["consumer"] for m in first}) == 1
    # The group closes when its closing message is settled (auto-ack settles after receive).
    wait_for(lambda: get_json(f"{broker.http_url}/api/queues/close/groups")["total"] == 0)

    jms.run("send", "close", "--groups", "1", "--per-group", "2")
    again = receiver.messages(2)
    # Closed: the group's next message starts it anew, at whichever consumer is ready.
    assert [(m["seq"], m["first"]) for m in again] == [(1, "true"), (2, None)]
    assert len({m["consumer"] for m in again}) == 1
    receiver.finish()


def test_group_first_for_consumer(jms):
    queue = "first?group-first-key=JMSXGroupFirstForConsumer"
    jms.run("send", queue, "--groups", "2", "--per-group", "3")
    received = jms.run("receive", "first")
    assert len(received) == 6
    for messages in by_group(received).values():
        assert [m["first"] for m in messages] == ["true", None, None]


def test_selector_receives_only_what_it_selects(jms):
    jms.run("send", "paint", "--groups", "2", "--per-group", "3", "--prop", "color=red")
    jms.run(
        "send", "paint", "--groups", "2", "--per-group", "2", "--prop", "color=blue", "--no-group"
    )
    red = jms.run("receive", "paint", "--selector", "color = 'red'")
    assert len(red) == 6 and {m["color"] for m in red} == {"red"}
    for messages in by_group(red).values():
        assert [m["seq"] for m in messages] == [1, 2, 3]
    blue = jms.run("receive", "paint")
    assert len(blue) == 4 and {m["color"] for m in blue} == {"blue"}


def test_client_acknowledge_recover_redelivers_in_order(jms):
    jms.run("send", "recover", "--groups", "1", "--per-group", "5")
    received = jms.run("receive", "recover", "--ack", "client", "--recover-after", "3")
    assert [(m["seq"], m["redelivered"]) for m in received] == [
        (1, False), (2, False), (3, False),
        (1, True), (2, True), (3, True), (4, False), (5, False),
    ]  # fmt: skip
    assert jms.run("receive", "recover", "--idle", "500") == []  # all acknowledged


def test_individual_acknowledge_returns_the_unacknowledged_in_group_order(jms):
    jms.run("send", "single", "--groups", "1", "--per-group", "5")
    first = jms.run("receive", "single", "--ack", "individual", "--ack-only", "2", "--max", "3")
    assert [m["seq"] for m in first] == [1, 2, 3]
    again = jms.run("receive", "single", "--ack", "individual")
    # 4 and 5 were prefetched by the first client and may be flagged redelivered too.
    assert [m["seq"] for m in again] == [1, 3, 4, 5]
    assert again[0]["redelivered"] and again[1]["redelivered"]


def test_priority_orders_across_groups_and_ttl_expires(jms):
    jms.run("send", "jobs?priority=true", "--per-group", "3", "--no-group", "--priority", "1")
    jms.run("send", "jobs", "--per-group", "3", "--no-group", "--priority", "8")
    received = jms.run("receive", "jobs")
    assert [(m["priority"], m["seq"]) for m in received] == [
        (8, 1), (8, 2), (8, 3), (1, 1), (1, 2), (1, 3),
    ]  # fmt: skip

    jms.run("send", "short", "--per-group", "2", "--no-group", "--ttl", "200")
    jms.run("send", "short", "--per-group", "1", "--no-group", "--text", "kept")
    time.sleep(1.0)  # past the 200 ms time to live
    kept = jms.run("receive", "short")
    assert [m["text"] for m in kept] == ["kept"]


def test_durable_topic_subscription_keeps_messages_while_away(jms):
    sub = ["--client-id", "jms-client-1", "--name", "audit"]
    jms.run("durable", "events", "subscribe", *sub)
    jms.run("durable", "events", "publish", "--client-id", "jms-producer", "--count", "4")
    received = jms.run("durable", "events", "receive", *sub, "--unsubscribe")
    assert [m["seq"] for m in received] == [1, 2, 3, 4]
    # Unsubscribed: what is published now is kept for nobody.
    jms.run("durable", "events", "publish", "--client-id", "jms-producer", "--count", "2")
    assert jms.run("durable", "events", "receive", *sub, "--unsubscribe") == []


def test_transacted_consume_rollback_redelivers_the_group_in_order(jms):
    jms.run("send", "txq", "--groups", "2", "--per-group", "3")
    received = jms.run("receive", "txq", "--ack", "transacted", "--rollback-after", "4")
    first, again = received[:4], received[4:]
    assert not any(m["redelivered"] for m in first)
    # The rolled-back messages come again first, flagged redelivered, each group in order.
    for group, messages in by_group(again).items():
        assert [m["seq"] for m in messages] == [1, 2, 3], group
    rolled_back = {(m["group"], m["seq"]) for m in first}
    assert {(m["group"], m["seq"]) for m in again if m["redelivered"]} >= rolled_back
    for messages in by_group(again).values():
        flags = [m["redelivered"] for m in messages]
        assert flags == sorted(flags, reverse=True)  # redelivered ones ahead of new ones
    # Committed after the rollback: nothing is left.
    assert jms.run("receive", "txq", "--idle", "500") == []


def test_transacted_send_commit_makes_messages_visible(jms):
    jms.run("send", "txsend", "--groups", "2", "--per-group", "3", "--transacted")
    received = jms.run("receive", "txsend")
    assert len(received) == 6
    for group, messages in by_group(received).items():
        assert [m["seq"] for m in messages] == [1, 2, 3], group


def test_transacted_send_rollback_stores_nothing(jms, broker):
    jms.run("send", "txnone", "--groups", "2", "--per-group", "3", "--transacted", "--rollback")
    assert jms.run("receive", "txnone", "--idle", "500") == []
    jms.run("send", "txnone", "--per-group", "1", "--transacted")
    assert [m["seq"] for m in jms.run("receive", "txnone")] == [1]
