"""Shoal's asyncio client against a real `shoal serve` (plain asyncio.run, no plugin)."""

from __future__ import annotations

import asyncio
import signal

import pytest

import shoal.client.aio as aio
from shoal.client import ConnectFailed, ConnectionLost, Producer, ServerError

pytestmark = pytest.mark.e2e

WAIT = 10.0


def url(srv, query: str = "") -> str:
    return f"stomp://127.0.0.1:{srv.stomp_port}" + (f"?{query}" if query else "")


async def drain(sub, n: int) -> list:
    out = []
    while len(out) < n:
        msg = await sub.receive(WAIT)
        assert msg is not None, f"only {len(out)} of {n} messages arrived"
        out.append(msg)
    return out


def test_send_receive_ack_and_async_for(shoal_server):
    srv = shoal_server()

    async def main():
        async with aio.connect(url(srv)) as c:
            assert c.version == "1.2" and c.connected
            await c.send("/queue/a1", b"one", group="AAPL", headers={"x": "1"}, receipt=True)
            await c.send("/queue/a1", "two", receipt=True)
            got = []
            async with c.subscribe("/queue/a1", ack="client-individual") as sub:
                async for msg in sub:
                    got.append(msg)
                    await msg.ack()
                    if len(got) == 2:
                        break
            assert [m.body for m in got] == [b"one", b"two"]
            assert got[0].group == "AAPL" and got[0].headers["x"] == "1"
            assert sub.closed
        assert not c.connected

    asyncio.run(main())


def test_await_connect_and_subscribe(shoal_server):
    srv = shoal_server()

    async def main():
        c = await aio.connect(url(srv))
        sub = await c.subscribe("/queue/a2")
        await c.send("/queue/a2", b"x")
        assert (await drain(sub, 1))[0].body == b"x"
        assert await sub.receive(0.01) is None  # nothing more: a timeout gives None
        await c.close()
        await c.close()  # idempotent

    asyncio.run(main())


def test_nack_redelivers_with_flag_and_count(shoal_server):
    srv = shoal_server()

    async def main():
        async with aio.connect(url(srv)) as c:
            p = Producer(c, group="G")
            await p.send("/queue/a3", b"m0")
            await p.send("/queue/a3", b"m1", receipt=True)
            sub = await c.subscribe("/queue/a3", ack="client-individual", prefetch=1)
            first = (await drain(sub, 1))[0]
            await first.nack()
            again = (await drain(sub, 1))[0]
            assert again.body == b"m0" and again.redelivered and again.delivery_count == 1
            assert again.group_seq == 1
            await again.ack()
            nxt = (await drain(sub, 1))[0]
            assert nxt.body == b"m1" and nxt.group_seq == 2
            await nxt.ack(receipt=True)

    asyncio.run(main())


def test_transaction_commit_and_abort(shoal_server):
    srv = shoal_server()

    async def main():
        async with aio.connect(url(srv)) as c:
            sub = await c.subscribe("/queue/a4")
            async with c.transaction() as tx:
                await tx.send("/queue/a4", b"a")
                await tx.send("/queue/a4", b"b")
                await c.send("/queue/a4", b"outside", receipt=True)
                assert (await drain(sub, 1))[0].body == b"outside"
            assert [m.body for m in await drain(sub, 2)] == [b"a", b"b"]
            tx = await c.transaction()
            await tx.send("/queue/a4", b"dropped")
            await tx.abort()
            await c.send("/queue/a4", b"marker", receipt=True)
            assert (await drain(sub, 1))[0].body == b"marker"

    asyncio.run(main())


def test_autogroup_producers_get_distinct_groups(shoal_server):
    srv = shoal_server()

    async def main():
        async with aio.connect(url(srv, "autoGroup=true")) as c:
            sub = await c.subscribe("/queue/a5")
            p1, p2 = c.producer(), c.producer()
            assert p1.group != p2.group and c.group not in (p1.group, p2.group)
            await p1.send("/queue/a5", b"1")
            await p2.send("/queue/a5", b"2")
            await c.send("/queue/a5", b"3", receipt=True)
            msgs = await drain(sub, 3)
            assert [m.group for m in msgs] == [p1.group, p2.group, c.group]

    asyncio.run(main())


def test_error_frame_raises_server_error(shoal_server):
    srv = shoal_server()

    async def main():
        c = await aio.connect(url(srv))
        sub = await c.subscribe("/queue/a6")
        with pytest.raises(ServerError) as info:
            await c.send("/queue/a6", b"x", headers={"JMSXGroupSeq": "abc"}, receipt=True)
        assert info.value.code == "bad-header" and "JMSXGroupSeq" in info.value.message
        with pytest.raises(ServerError):
            await c.send("/queue/a6", b"y")
        with pytest.raises(ServerError):
            await sub.receive(WAIT)
        await c.close()

    asyncio.run(main())


def test_connect_refused_names_the_address():
    from support import free_port

    port = free_port()

    async def main():
        with pytest.raises(ConnectFailed, match=f"127.0.0.1:{port}.*refused"):
            await aio.connect(f"stomp://127.0.0.1:{port}")

    asyncio.run(main())


def test_heartbeats_negotiated_and_silence_noticed(shoal_server):
    srv = shoal_server(config="[broker]\nheartbeat = [100, 100]\n")

    async def main():
        async with aio.connect(url(srv, "heartbeat=150,150")) as c:
            assert c.heartbeat == (150, 150)
            sub = await c.subscribe("/queue/a7")
            await asyncio.sleep(1.0)  # idle: only heart-beats flow
            await c.send("/queue/a7", b"alive", receipt=True)
            assert (await drain(sub, 1))[0].body == b"alive"
            srv.proc.send_signal(signal.SIGSTOP)
            try:
                with pytest.raises(ConnectionLost, match="silent"):
                    await sub.receive(WAIT)
            finally:
                srv.proc.send_signal(signal.SIGCONT)

    asyncio.run(main())


def test_reconnect_after_restart(shoal_server):
    srv = shoal_server()

    async def main():
        async with aio.connect(url(srv, "reconnect=true&reconnectDelay=50")) as c:
            sub = await c.subscribe("/queue/a8")
            await c.send("/queue/a8", b"before", receipt=True)
            assert (await drain(sub, 1))[0].body == b"before"
            await asyncio.get_running_loop().run_in_executor(None, srv.restart)
            await c.send("/queue/a8", b"after", receipt=True)
            assert (await drain(sub, 1))[0].body == b"after"
            assert c.reconnects >= 1

    asyncio.run(main())
