"""Shoal's blocking client against a real `shoal serve`."""

from __future__ import annotations

import signal
import time

import pytest

import shoal.client
from shoal.client import ConnectFailed, ConnectionLost, Producer, ServerError
from skips import needs_tools
from support import self_signed_cert, wait_for

pytestmark = pytest.mark.e2e

WAIT = 10.0  # upper bound for a message that must come; never a measured time


def url(srv, query: str = "") -> str:
    return f"stomp://127.0.0.1:{srv.stomp_port}" + (f"?{query}" if query else "")


def drain(sub, n: int) -> list:
    out = []
    while len(out) < n:
        msg = sub.receive(WAIT)
        assert msg is not None, f"only {len(out)} of {n} messages arrived"
        out.append(msg)
    return out


def test_send_and_receive_round_trip(shoal_server):
    srv = shoal_server()
    with shoal.client.connect(url(srv)) as c:
        assert c.version == "1.2" and c.server.startswith("shoal/")
        sub = c.subscribe("/queue/basic", ack="client-individual")
        c.send("/queue/basic", b"one", headers={"x-app": "7"}, group="AAPL", receipt=True)
        c.send("/queue/basic", "two")  # str bodies go as UTF-8
        a, b = drain(sub, 2)
        assert (a.body, b.body) == (b"one", b"two")
        assert a.destination == "/queue/basic" and a.headers["x-app"] == "7"
        assert a.group == "AAPL" and b.group is None
        assert a.message_id != b.message_id
        assert not a.redelivered and a.delivery_count == 0
        a.ack()
        b.ack(receipt=True)


def test_client_individual_unsettled_messages_are_redelivered_after_close(shoal_server):
    srv = shoal_server()
    with shoal.client.connect(url(srv)) as c:
        for i in range(3):
            c.send("/queue/ci", f"m{i}", receipt=True)
        sub = c.subscribe("/queue/ci", ack="client-individual")
        m0, m1, m2 = drain(sub, 3)
        m0.ack()
        m2.ack(receipt=True)
    with shoal.client.connect(url(srv)) as c:
        again = drain(c.subscribe("/queue/ci", ack="client-individual"), 1)[0]
        assert again.body == b"m1" and again.redelivered and again.delivery_count == 1
        again.ack(receipt=True)


def test_client_mode_ack_is_cumulative(shoal_server):
    srv = shoal_server()
    with shoal.client.connect(url(srv)) as c:
        for i in range(3):
            c.send("/queue/cumulative", f"m{i}")
        sub = c.subscribe("/queue/cumulative", ack="client")
        msgs = drain(sub, 3)
        msgs[-1].ack(receipt=True)  # settles all three
    with shoal.client.connect(url(srv)) as c:
        c.send("/queue/cumulative", b"marker", receipt=True)
        assert drain(c.subscribe("/queue/cumulative"), 1)[0].body == b"marker"


def test_auto_ack_settles_on_delivery(shoal_server):
    srv = shoal_server()
    with shoal.client.connect(url(srv)) as c:
        sub = c.subscribe("/queue/auto")
        c.send("/queue/auto", b"a", receipt=True)
        msg = drain(sub, 1)[0]
        msg.ack()  # a no-op in auto mode, not an error
    with shoal.client.connect(url(srv)) as c:
        c.send("/queue/auto", b"marker", receipt=True)
        assert drain(c.subscribe("/queue/auto"), 1)[0].body == b"marker"


def test_nack_redelivers_at_the_head_of_its_group(shoal_server):
    srv = shoal_server()
    with shoal.client.connect(url(srv)) as c:
        p = Producer(c, group="G")
        for i in range(3):
            p.send("/queue/nack", f"m{i}")
        sub = c.subscribe("/queue/nack", ack="client-individual", prefetch=1)
        first = drain(sub, 1)[0]
        assert first.body == b"m0" and first.group_seq == 1
        first.nack()
        again = drain(sub, 1)[0]
        assert again.body == b"m0" and again.redelivered and again.delivery_count == 1
        again.ack()
        rest = []
        for _ in range(2):
            m = drain(sub, 1)[0]
            rest.append(m.body)
            m.ack()
        assert rest == [b"m1", b"m2"]


def test_transaction_sends_enter_the_queue_at_commit_in_order(shoal_server):
    srv = shoal_server()
    with shoal.client.connect(url(srv)) as c:
        sub = c.subscribe("/queue/tx")
        with c.transaction() as tx:
            tx.send("/queue/tx", b"a")
            tx.send("/queue/tx", b"b")
            c.send("/queue/tx", b"outside", receipt=True)
            assert drain(sub, 1)[0].body == b"outside"  # a and b are not in the queue yet
        assert [m.body for m in drain(sub, 2)] == [b"a", b"b"]


def test_transaction_abort_drops_sends_and_returns_acked_messages(shoal_server):
    srv = shoal_server()
    with shoal.client.connect(url(srv)) as c:
        c.send("/queue/txa", b"work", receipt=True)
        sub = c.subscribe("/queue/txa", ack="client-individual")
        msg = drain(sub, 1)[0]
        with pytest.raises(RuntimeError), c.transaction() as tx:
            tx.send("/queue/txa", b"never")
            tx.ack(msg)
            raise RuntimeError("handler failed")
        back = drain(sub, 1)[0]
        assert back.body == b"work" and back.redelivered
        back.ack()
        c.send("/queue/txa", b"marker", receipt=True)
        assert drain(sub, 1)[0].body == b"marker"  # "never" was dropped


def test_autogroup_gives_each_producer_its_own_group_and_each_group_one_consumer(shoal_server):
    srv = shoal_server()
    with (
        shoal.client.connect(url(srv, "autoGroup=true")) as prod,
        shoal.client.connect(url(srv)) as c1,
        shoal.client.connect(url(srv)) as c2,
    ):
        subs = [c.subscribe("/queue/auto-g", ack="client-individual") for c in (c1, c2)]
        p1, p2 = Producer(prod), Producer(prod)
        assert p1.group and p2.group and p1.group != p2.group
        for i in range(10):
            p1.send("/queue/auto-g", f"p1-{i}")
            p2.send("/queue/auto-g", f"p2-{i}")
        prod.send("/queue/auto-g", b"flush", group=p1.group, receipt=True)
        seen: dict[int, list] = {0: [], 1: []}
        total = 0
        while total < 21:
            for k, sub in enumerate(subs):
                msg = sub.receive(0.05)
                if msg is not None:
                    seen[k].append(msg)
                    msg.ack()
                    total += 1
        groups = [{m.group for m in seen[k]} for k in (0, 1)]
        assert groups[0] and groups[1] and not groups[0] & groups[1]  # each group: one consumer
        assert {g for gs in groups for g in gs} == {p1.group, p2.group}
        for k in (0, 1):
            for g in groups[k]:
                seqs = [m.group_seq for m in seen[k] if m.group == g and m.body != b"flush"]
                assert seqs == list(range(1, 11))  # in order


def test_fixed_group_from_the_url(shoal_server):
    srv = shoal_server()
    with shoal.client.connect(url(srv, "groupID=ORDERS")) as c:
        assert c.group == "ORDERS" and Producer(c).group == "ORDERS"
        sub = c.subscribe("/queue/fixed")
        c.send("/queue/fixed", b"1")
        Producer(c).send("/queue/fixed", b"2")
        c.send("/queue/fixed", b"3", group=None, receipt=True)  # explicitly ungrouped
        assert [m.group for m in drain(sub, 3)] == ["ORDERS", "ORDERS", None]


def test_receipted_persistent_sends_survive_kill_9(shoal_server):
    srv = shoal_server()
    with shoal.client.connect(url(srv)) as c:
        for i in range(5):
            c.send("/queue/durable", f"m{i}", persistent=True, receipt=True)
        srv.kill9()  # no clean shutdown: the receipts alone promised storage
    srv.start()
    with shoal.client.connect(url(srv)) as c:
        msgs = drain(c.subscribe("/queue/durable"), 5)
        assert [m.body for m in msgs] == [f"m{i}".encode() for i in range(5)]
        assert all(m.persistent for m in msgs)


def test_error_frame_for_a_receipted_send(shoal_server):
    srv = shoal_server()
    c = shoal.client.connect(url(srv))
    sub = c.subscribe("/queue/err")
    with pytest.raises(ServerError) as info:
        c.send("/queue/err", b"x", headers={"JMSXGroupSeq": "abc"}, receipt=True)
    err = info.value
    assert err.code == "bad-header" and "JMSXGroupSeq" in err.message
    assert "JMSXGroupSeq" in str(err)
    # The broker closed the connection: everything after raises the same error.
    with pytest.raises(ServerError):
        c.send("/queue/err", b"y")
    with pytest.raises(ServerError):
        sub.receive(WAIT)
    assert c.last_error is err
    c.close()


def test_error_frame_for_an_unreceipted_send_surfaces_on_the_next_wait(shoal_server):
    srv = shoal_server()
    with shoal.client.connect(url(srv)) as c:
        sub = c.subscribe("/queue/err2")
        c.send("/queue/err2?no-such-setting=1", b"x")  # no receipt: returns at once
        with pytest.raises(ServerError) as info:
            sub.receive(WAIT)
        assert "no-such-setting" in info.value.message and info.value.code == "bad-parameter"


def test_subscribe_with_a_bad_parameter_raises(shoal_server):
    srv = shoal_server()
    with shoal.client.connect(url(srv)) as c, pytest.raises(ServerError, match="bogus"):
        c.subscribe("/queue/q?bogus=1")


def test_connect_failures_name_the_problem(shoal_server, tmp_path):
    from support import free_port

    port = free_port()
    with pytest.raises(ConnectFailed) as info:
        shoal.client.connect(f"stomp://127.0.0.1:{port}")
    assert f"127.0.0.1:{port}" in str(info.value) and "refused" in str(info.value)

    from shoal.security import add_user

    users = tmp_path / "users.json"
    add_user(users, "alice", "pw", ["app"])
    srv = shoal_server(
        config=f'[broker]\nusers-file = "{users}"\n'
        '[[permissions]]\nmatch = "#"\nsend = ["app"]\nconsume = ["app"]\n'
    )
    with pytest.raises(ServerError) as info:
        shoal.client.connect(f"stomp://alice:wrong@127.0.0.1:{srv.stomp_port}")
    assert info.value.code == "unauthenticated" and "alice" in str(info.value)
    with shoal.client.connect(f"stomp://alice:pw@127.0.0.1:{srv.stomp_port}") as c:
        c.send("/queue/q", b"ok", receipt=True)


def test_heartbeats_are_negotiated_and_keep_an_idle_connection_open(shoal_server):
    srv = shoal_server(config="[broker]\nheartbeat = [100, 100]\n")
    with shoal.client.connect(url(srv, "heartbeat=150,150")) as c:
        assert c.heartbeat == (150, 150)  # (max(cx, sy), max(sx, cy))
        sub = c.subscribe("/queue/hb")
        time.sleep(1.0)  # idle for many intervals: only heart-beats flow
        c.send("/queue/hb", b"still here", receipt=True)
        assert drain(sub, 1)[0].body == b"still here"
    with shoal.client.connect(url(srv, "heartbeat=0,0")) as c:
        assert c.heartbeat == (0, 0)


def test_a_silent_broker_is_noticed(shoal_server):
    srv = shoal_server(config="[broker]\nheartbeat = [100, 100]\n")
    c = shoal.client.connect(url(srv, "heartbeat=100,100"))
    sub = c.subscribe("/queue/silent")
    srv.proc.send_signal(signal.SIGSTOP)
    try:
        with pytest.raises(ConnectionLost, match="silent"):
            sub.receive(WAIT)
    finally:
        srv.proc.send_signal(signal.SIGCONT)
    c.close()


def test_reconnect_after_broker_restart_subscribes_again(shoal_server):
    srv = shoal_server()
    with shoal.client.connect(url(srv, "reconnect=true&reconnectDelay=50")) as c:
        sub = c.subscribe("/queue/again", ack="client-individual")
        c.send("/queue/again", b"before", persistent=True, receipt=True)
        assert drain(sub, 1)[0].body == b"before"  # not acked: returned on disconnect
        srv.restart()
        c.send("/queue/again", b"after", persistent=True, receipt=True)  # waits for reconnect
        got = [m.body for m in drain(sub, 2)]
        assert got == [b"before", b"after"] and c.reconnects >= 1


@needs_tools("openssl")
def test_stomp_over_tls(shoal_server, tmp_path):

    cert, key = self_signed_cert(tmp_path)
    srv = shoal_server(
        args=["--stomp-tls", "127.0.0.1:0", "--tls-cert", str(cert), "--tls-key", str(key)]
    )
    port = srv.ports["stomp-tls"]
    with shoal.client.connect(f"stomp+ssl://127.0.0.1:{port}?cafile={cert}") as c:
        sub = c.subscribe("/queue/tls")
        c.send("/queue/tls", b"secret", receipt=True)
        assert drain(sub, 1)[0].body == b"secret"
    with pytest.raises(ConnectFailed, match="certificate"):
        shoal.client.connect(f"stomp+ssl://127.0.0.1:{port}")  # not trusted by system CAs


def test_reconnect_gives_up_after_the_allowed_attempts(shoal_server):
    srv = shoal_server()
    c = shoal.client.connect(url(srv, "reconnect=true&reconnectDelay=20&reconnectAttempts=2"))
    sub = c.subscribe("/queue/gone")
    srv.kill9()
    with pytest.raises(ConnectionLost, match="gave up reconnecting .* after 2 attempts"):
        sub.receive(WAIT)
    with pytest.raises(ConnectionLost):
        c.send("/queue/gone", b"x")
    c.close()


def test_unsubscribe_returns_unsettled_messages_and_refuses_late_acks(shoal_server):
    srv = shoal_server()
    with shoal.client.connect(url(srv)) as c, shoal.client.connect(url(srv)) as other:
        c.send("/queue/unsub", b"m", receipt=True)
        with c.subscribe("/queue/unsub", ack="client-individual") as sub:
            msg = drain(sub, 1)[0]
        assert sub.closed and sub.receive(0.01) is None
        with pytest.raises(shoal.client.ClientError, match="closed"):
            msg.ack()
        again = drain(other.subscribe("/queue/unsub", ack="client-individual"), 1)[0]
        assert again.body == b"m" and again.redelivered
        again.ack(receipt=True)


def test_iteration_ends_when_the_client_closes(shoal_server):
    import threading

    srv = shoal_server()
    c = shoal.client.connect(url(srv))
    sub = c.subscribe("/queue/iter")
    c.send("/queue/iter", b"only", receipt=True)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.extend(m.body for m in sub))
    reader.start()
    wait_for(lambda: got)
    c.close()
    reader.join(WAIT)
    assert not reader.is_alive() and got == [b"only"]
