"""StompSession against a fake transport: raw bytes in, exact frames out.

No process and no socket: the session runs on a real BrokerServer (without
listeners), a real core and a real SyncPipeline over a MemoryStore (see
fakes.py). A test runs the event loop only when it wants the flush or a
sync to happen, so it can look at the output before and after.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from fakes import Frame, PassLog, SessionHarness, frame

from shoal import __version__
from shoal.errors import StoreError


@pytest.fixture
def loop():
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


@pytest.fixture
def make(loop):
    """Factory: a harness with a config dict as the TOML file would give it."""
    made: list[SessionHarness] = []

    def make(config=None) -> SessionHarness:
        made.append(SessionHarness(loop, config))
        return made[-1]

    yield make
    for harness in made:
        harness.close()


@pytest.fixture
def h(make):
    return make()


def receipt(receipt_id: str) -> Frame:
    return Frame("RECEIPT", {"receipt-id": receipt_id}, b"")


def message(destination: str, body: bytes, sub: str, ack: str, **headers: str) -> Frame:
    """A MESSAGE as the broker writes it (message-id and ack are the same id)."""
    return Frame(
        "MESSAGE",
        {
            "destination": destination,
            "message-id": ack,
            "subscription": sub,
            "ack": ack,
            **headers,
            "content-length": str(len(body)),
        },
        body,
    )


# --- CONNECT ------------------------------------------------------------------


def test_connect_negotiates_the_highest_common_version_and_heart_beats(make):
    h = make({"broker": {"heartbeat": [5000, 7000]}})
    session, transport = h.open(peer=("10.1.2.3", 4567))
    assert transport.write_buffer_limits == (1024 * 1024, None)
    assert session.peer == "10.1.2.3:4567"
    assert session.conn_id in h.server.handshaking
    session.data_received(
        frame("CONNECT", {"accept-version": "1.0,1.1,1.2", "host": "h", "heart-beat": "1000,2000"})
    )
    assert transport.buffers == []  # written by the flush, not inside data_received
    h.run_once()
    assert transport.frames() == [
        Frame(
            "CONNECTED",
            {
                "version": "1.2",
                "heart-beat": "5000,7000",
                "server": f"shoal/{__version__}",
                "session": str(session.conn_id),
            },
            b"",
        )
    ]
    # We send every max(5000, 2000) ms and expect the client every max(1000, 7000) ms.
    assert session.conn.heart_beat == (5000, 7000)
    assert session.connected and session.conn_id not in h.server.handshaking

    older, transport = h.open()
    older.data_received(frame("CONNECT", {"accept-version": "1.0,1.1", "host": "h"}))
    h.run_once()
    [connected] = transport.frames()
    assert connected.headers["version"] == "1.1"


def test_connect_without_a_common_version_names_the_supported_ones(h):
    session, transport = h.open()
    session.data_received(frame("CONNECT", {"accept-version": "2.0", "host": "h"}))
    h.run_once()
    body = b"Supported protocol versions are 1.0,1.1,1.2\n"
    assert transport.frames() == [
        Frame(
            "ERROR",
            {
                "message": "Supported protocol versions are 1.0,1.1,1.2",
                "version": "1.0,1.1,1.2",
                "code": "protocol",
                "content-length": str(len(body)),
            },
            body,
        )
    ]
    assert transport.closed
    assert not session.connected


def test_heart_beats_are_sent_on_time_and_a_silent_client_is_closed(make, loop, monkeypatch):
    h = make({"broker": {"heartbeat": [5000, 7000]}})
    session, transport = h.open()
    session.data_received(frame("CONNECT", {"accept-version": "1.2", "heart-beat": "1000,2000"}))
    h.run_once()
    transport.frames()
    due = session._timer.when()
    monkeypatch.setattr(loop, "time", lambda: due - 0.001)
    session._on_timer()
    assert transport.buffers[transport.read :] == []  # not yet due
    monkeypatch.setattr(loop, "time", lambda: due)
    session._on_timer()
    assert transport.buffers[transport.read :] == [b"\n"]
    transport.read += 1
    # Nothing from the client for twice its 7000 ms: ERROR, then closed.
    monkeypatch.setattr(loop, "time", lambda: session.last_read + 14.0)
    session._on_timer()
    [error] = transport.frames()
    assert error.command == "ERROR"
    assert error.headers["message"] == (
        "heart-beat timeout: nothing received for 14000 ms (negotiated interval 7000 ms)"
    )
    assert transport.closed


# --- errors -------------------------------------------------------------------


def test_a_bad_frame_gets_an_error_with_its_receipt_id_then_the_connection_closes(h):
    session, transport = h.connect()
    session.data_received(
        b"SUBSCRIBE\nid:1\nreceipt:r9\n\n\x00"
        + frame("SEND", {"destination": "/queue/after", "receipt": "r10"})
    )
    h.run_once()
    body = b"SUBSCRIBE frame has no 'destination' header\n"
    assert transport.frames() == [
        Frame(
            "ERROR",
            {
                "message": "SUBSCRIBE frame has no 'destination' header",
                "receipt-id": "r9",
                "code": "protocol",
                "content-length": str(len(body)),
            },
            body,
        )
    ]
    assert transport.closed and session.closing
    # Nothing after the bad frame is handled, and later bytes are ignored.
    session.data_received(frame("SEND", {"destination": "/queue/after", "receipt": "r11"}))
    h.run_once()
    assert transport.frames() == [] and transport.writes_after_close == 0
    assert "after" not in h.server.broker.queues


# --- receipts and the sync ----------------------------------------------------


def test_a_persistent_send_is_receipted_only_after_its_sync(h):
    session, transport = h.connect()
    h.store.gate.clear()  # the next sync starts but does not finish
    session.data_received(
        frame("SEND", {"destination": "/queue/p", "persistent": "true", "receipt": "r1"}, b"kept")
        + frame("SEND", {"destination": "/queue/np", "receipt": "r2"}, b"x")
    )
    h.run_once()  # the flush, and the sync starts
    assert h.store.in_sync.wait(10)
    h.run_once()
    # r2 needs no sync of its own, but receipts keep their order behind r1.
    assert transport.frames() == []
    assert h.server.persistence.synced_seq < h.server.persistence.appended_seq
    h.store.gate.set()
    h.wait_synced(h.server.persistence.appended_seq)
    assert transport.frames() == [receipt("r1"), receipt("r2")]


def wait_until(loop, predicate, timeout: float = 10.0) -> None:
    """Run the loop until predicate() holds (the sync thread answers meanwhile)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition never held"
        loop.run_until_complete(asyncio.sleep(0.01))


def test_a_disconnect_receipt_after_a_failed_sync_is_an_error(h):
    """SEND and DISCONNECT with receipts, then the sync fails: no receipt at all."""
    session, transport = h.connect()
    h.store.gate.clear()
    session.data_received(
        frame("SEND", {"destination": "/queue/p", "persistent": "true", "receipt": "r1"}, b"m")
        + frame("DISCONNECT", {"receipt": "bye"})
    )
    h.run_once()
    assert h.store.in_sync.wait(10)
    h.store.fail_with = StoreError("journal sync failed: [Errno 5] EIO")
    h.store.gate.set()
    wait_until(h.loop, lambda: transport.closed)
    frames = transport.frames()
    assert [f.command for f in frames] == ["ERROR"]
    assert "no receipt sent" in frames[0].headers["message"]
    h.store.fail_with = None


def test_a_receipt_with_nothing_to_sync_goes_out_with_the_flush(h):
    session, transport = h.connect()
    session.data_received(frame("SEND", {"destination": "/queue/np", "receipt": "r1"}, b"x"))
    h.settle()  # the queue's creation was journaled
    assert transport.frames() == [receipt("r1")]
    syncs = h.store.syncs_started
    h.store.gate.clear()
    session.data_received(frame("SEND", {"destination": "/queue/np", "receipt": "r2"}, b"x"))
    h.run_once()
    assert transport.frames() == [receipt("r2")]  # a non-persistent message is not journaled
    assert h.store.syncs_started == syncs


# --- delivery and flow control --------------------------------------------------


def test_subscribe_then_send_writes_the_message_bytes_through_the_flush(h):
    consumer, ctransport = h.connect()
    producer, ptransport = h.connect()
    consumer.data_received(frame("SUBSCRIBE", {"destination": "/queue/a", "id": "7"}))
    producer.data_received(frame("SEND", {"destination": "/queue/a", "colour": "blue"}, b"hi"))
    assert ctransport.buffers[ctransport.read :] == []  # deliveries wait for the flush
    h.run_once()
    [mid] = list(ctransport.buffers[ctransport.read :])
    ack = mid.split(b"\nack:", 1)[1].split(b"\n", 1)[0].decode()
    assert ctransport.buffers[ctransport.read :] == [
        b"MESSAGE\ndestination:/queue/a\nmessage-id:" + ack.encode() + b"\nsubscription:7\n"
        b"ack:" + ack.encode() + b"\ncolour:blue\ncontent-length:2\n\nhi\x00"
    ]
    assert consumer.messages_out == 1
    assert ptransport.frames() == []


def test_prefetch_one_sends_the_second_message_only_after_the_ack(h):
    consumer, ctransport = h.connect()
    consumer.data_received(
        frame(
            "SUBSCRIBE",
            {
                "destination": "/queue/w",
                "id": "s",
                "ack": "client-individual",
                "prefetch-count": "1",
            },
        )
    )
    producer, _ = h.connect()
    producer.data_received(
        frame("SEND", {"destination": "/queue/w"}, b"one")
        + frame("SEND", {"destination": "/queue/w"}, b"two")
    )
    h.settle()
    [first] = ctransport.frames()
    assert first == message("/queue/w", b"one", "s", first.headers["ack"])
    h.settle()
    assert ctransport.frames() == []  # no credit left
    consumer.data_received(frame("ACK", {"id": first.headers["ack"]}))
    h.settle()
    [second] = ctransport.frames()
    assert second == message("/queue/w", b"two", "s", second.headers["ack"])
    assert second.headers["ack"] != first.headers["ack"]


def test_pipelined_frames_in_one_read_are_answered_in_order(make):
    h = make({"queues": {"pipe": {}}})  # declared already: no receipt waits for a sync
    session, transport = h.open()
    session.data_received(
        frame("CONNECT", {"accept-version": "1.2", "host": "h"})
        + frame("SUBSCRIBE", {"destination": "/queue/pipe", "id": "s", "receipt": "sub"})
        + b"\n"  # a heart-beat between frames
        + frame("SEND", {"destination": "/queue/pipe", "receipt": "one"}, b"1")
        + frame("SEND", {"destination": "/queue/pipe", "receipt": "two"}, b"2")
    )
    h.settle()
    connected, *receipts, one, two = transport.frames()
    assert connected.command == "CONNECTED"
    assert receipts == [receipt("sub"), receipt("one"), receipt("two")]
    assert one == message("/queue/pipe", b"1", "s", one.headers["ack"])
    assert two == message("/queue/pipe", b"2", "s", two.headers["ack"])
    assert session.frames_in == 4  # the heart-beat EOL is not a frame


def _normalized(frames: list[Frame]) -> list[Frame]:
    """Frames without the ids that differ from one session to the next."""
    varying = {"session", "message-id", "ack"}
    return [
        Frame(f.command, {k: v for k, v in f.headers.items() if k not in varying}, f.body)
        for f in frames
    ]


def test_a_stream_split_at_every_offset_reads_as_the_whole(make):
    h = make({"queues": {"split": {}}})
    body = b"a\x00b\x00c"  # content-length: the NULs are body
    stream = (
        frame("CONNECT", {"accept-version": "1.2", "host": "h"})
        + b"\r\n"
        + frame("SUBSCRIBE", {"destination": "/queue/split", "id": "s", "receipt": "sub"})
        + frame(
            "SEND", {"destination": "/queue/split", "content-length": "5", "receipt": "snd"}, body
        )
    )
    whole, transport = h.open()
    whole.data_received(stream)
    h.settle()
    expected = _normalized(transport.frames())
    assert [f.command for f in expected] == ["CONNECTED", "RECEIPT", "RECEIPT", "MESSAGE"]
    assert expected[3].body == body
    whole.connection_lost(None)
    for offset in range(1, len(stream)):
        session, transport = h.open()
        session.data_received(stream[:offset])
        h.run_once()  # as a real loop would between two reads
        session.data_received(stream[offset:])
        h.settle()
        assert _normalized(transport.frames()) == expected, f"split at {offset}"
        assert not transport.closed
        session.connection_lost(None)
    assert h.server.sessions == {}


def test_a_lost_connection_gives_its_unacked_message_to_another_consumer(h):
    first, ftransport = h.connect()
    first.data_received(
        frame("SUBSCRIBE", {"destination": "/queue/r", "id": "a", "ack": "client-individual"})
    )
    producer, _ = h.connect()
    producer.data_received(frame("SEND", {"destination": "/queue/r"}, b"job"))
    h.settle()
    [delivered] = ftransport.frames()
    assert delivered == message("/queue/r", b"job", "a", delivered.headers["ack"])
    second, stransport = h.connect()
    second.data_received(
        frame("SUBSCRIBE", {"destination": "/queue/r", "id": "b", "ack": "client-individual"})
    )
    h.settle()
    assert stransport.frames() == []  # the message is still the first's
    first.connection_lost(ConnectionResetError())
    assert first.conn_id not in h.server.sessions
    h.settle()
    [again] = stransport.frames()
    assert again == message(
        "/queue/r",
        b"job",
        "b",
        again.headers["ack"],
        redelivered="true",
        **{"x-delivery-count": "1"},
    )
    assert ftransport.frames() == []


def test_pause_writing_stops_deliveries_until_resume_writing(h):
    consumer, ctransport = h.connect()
    consumer.data_received(frame("SUBSCRIBE", {"destination": "/queue/slow", "id": "s"}))
    producer, _ = h.connect()
    h.settle()
    consumer.pause_writing()  # the transport's buffer passed its high-water mark
    producer.data_received(frame("SEND", {"destination": "/queue/slow"}, b"waits"))
    h.settle()
    assert ctransport.frames() == []
    consumer.resume_writing()
    h.settle()
    [m] = ctransport.frames()
    assert m == message("/queue/slow", b"waits", "s", m.headers["ack"])


def test_disconnect_is_receipted_then_closed_and_later_frames_are_ignored(make):
    h = make({"queues": {"d": {}}})
    session, transport = h.connect()
    session.data_received(
        frame("DISCONNECT", {"receipt": "bye"})
        + frame("SEND", {"destination": "/queue/d", "receipt": "late"}, b"late")
    )
    h.settle()
    assert transport.frames() == [receipt("bye")]
    assert transport.closed and not session.connected
    assert h.server.broker.browse("d") == []
    session.connection_lost(None)
    assert h.server.sessions == {}


def test_an_auto_ack_message_dispatched_with_a_pipelined_disconnect_is_not_lost(make):
    h = make({"queues": {"d": {}}})
    session, transport = h.connect()
    session.data_received(
        frame("SUBSCRIBE", {"destination": "/queue/d", "id": "s"})
        + frame("SEND", {"destination": "/queue/d"}, b"kept")
        + frame("DISCONNECT", {"receipt": "bye"})
    )
    h.settle()
    written = [f.body for f in transport.frames() if f.command == "MESSAGE"]
    # Either it reached this consumer before the RECEIPT, or it is still queued.
    assert written + [m.body for m in h.server.broker.browse("d")] == [b"kept"]


def test_an_auto_ack_removal_is_journaled_on_the_pass_after_its_message_is_written(h):
    """A crash between a durable removal and the MESSAGE's write would lose the
    message: the loop writes a pass's output after its callbacks (uvloop), so
    the removal waits for the next pass."""
    consumer, ctransport = h.connect()
    producer, _ = h.connect()
    consumer.data_received(frame("SUBSCRIBE", {"destination": "/queue/a", "id": "s"}))
    h.settle()
    log = PassLog(h, ctransport)
    producer.data_received(frame("SEND", {"destination": "/queue/a", "persistent": "true"}, b"m"))
    h.settle()
    log.close()
    assert [w for _n, w in log.events] == ["MessageStored", "MESSAGE", "MessageRemoved"]
    assert log.first("MessageRemoved") > log.first("MESSAGE")
    assert h.server.broker.browse("a") == []


# --- handshake limits -------------------------------------------------------------


def test_a_big_frame_before_connect_is_refused_by_name(make):
    h = make({"limits": {"max-unauthenticated-frame-bytes": 1024}})
    stranger, transport = h.open()
    stranger.data_received(b"CONNECT\naccept-version:1.2\n\n" + b"x" * 2000)  # no NUL yet
    h.run_once()
    [error] = transport.frames()
    assert error.command == "ERROR"
    assert error.headers["message"] == (
        "frame larger than max-unauthenticated-frame-bytes (1024 bytes) before CONNECTED"
    )
    assert error.headers["code"] == "limit"
    assert transport.closed
    # Once connected, the ordinary limit applies.
    client, transport = h.connect()
    client.data_received(frame("SEND", {"destination": "/queue/big", "receipt": "r"}, b"x" * 2000))
    h.settle()
    assert transport.frames() == [receipt("r")]


def test_strangers_beyond_max_unauthenticated_connections_are_refused(make):
    h = make({"limits": {"max-unauthenticated-connections": 1}})
    first, _ = h.open()
    _, transport = h.open()
    [error] = transport.frames()
    assert (
        error.command == "ERROR" and "max-unauthenticated-connections" in error.headers["message"]
    )
    assert transport.closed
    assert set(h.server.sessions) == {first.conn_id}


# --- address-full-policy "block" ------------------------------------------------------


_BLOCK = {
    "address-settings": {"full": {"max-size-bytes": 100, "address-full-policy": "block"}},
    "queues": {"full": {}, "other": {}},  # declared: no receipt waits for a sync
}


def test_a_held_send_waits_while_acks_keep_flowing(make):
    h = make(_BLOCK)
    worker, transport = h.connect()
    worker.data_received(frame("SEND", {"destination": "/queue/full", "receipt": "f1"}, b"x" * 200))
    h.settle()
    assert transport.frames() == [receipt("f1")]  # taken; the address is now full
    worker.data_received(
        frame("SEND", {"destination": "/queue/full", "receipt": "f2"}, b"second")
        + frame("SEND", {"destination": "/queue/other", "receipt": "o3"}, b"after")
        + frame(
            "SUBSCRIBE",
            {"destination": "/queue/full", "id": "s", "ack": "client-individual", "receipt": "sub"},
        )
    )
    h.settle()
    # Both SENDs wait (the second, to a queue with room, in order behind the
    # first); the SUBSCRIBE behind them goes on and drains the full address.
    sub, first = transport.frames()
    assert sub == receipt("sub")
    assert first == message("/queue/full", b"x" * 200, "s", first.headers["ack"])
    assert [f.headers["receipt"] for f in worker.blocked_frames] == ["f2", "o3"]
    assert h.server.broker.browse("other") == []
    assert transport.reading  # within max-held-send-bytes
    # The ACK is not held either: the address has room and the SENDs go on.
    worker.data_received(frame("ACK", {"id": first.headers["ack"]}))
    h.settle()
    f2, o3, second = transport.frames()
    assert (f2, o3) == (receipt("f2"), receipt("o3"))
    assert second == message("/queue/full", b"second", "s", second.headers["ack"])
    assert [m.body for m in h.server.broker.browse("other")] == [b"after"]
    assert not worker.blocked_frames and worker.blocked_bytes == 0


def test_held_sends_past_max_held_send_bytes_pause_reading_until_they_drain(make):
    h = make({**_BLOCK, "limits": {"max-held-send-bytes": 5}})
    producer, transport = h.connect()
    producer.data_received(
        frame("SEND", {"destination": "/queue/full", "receipt": "f1"}, b"x" * 200)
        + frame("SEND", {"destination": "/queue/full", "receipt": "f2"}, b"12345")
    )
    h.settle()
    assert transport.frames() == [receipt("f1")]
    assert transport.reading  # 5 bytes held: at the limit, not past it
    producer.data_received(frame("SEND", {"destination": "/queue/full", "receipt": "f3"}, b"6"))
    h.settle()
    assert not transport.reading and transport.pauses == 1
    consumer, ctransport = h.connect()
    consumer.data_received(
        frame("SUBSCRIBE", {"destination": "/queue/full", "id": "s", "ack": "client-individual"})
    )
    h.settle()
    [first] = ctransport.frames()
    assert transport.frames() == [] and not transport.reading
    consumer.data_received(frame("ACK", {"id": first.headers["ack"]}))
    h.settle()
    assert transport.frames() == [receipt("f2"), receipt("f3")]
    assert transport.reading and producer.blocked_bytes == 0


def test_a_second_read_before_the_flush_waits_for_it(h):
    # uvloop reads a socket up to 32 times a loop iteration; the stdlib loop once.
    consumer, ctransport = h.connect()
    consumer.data_received(frame("SUBSCRIBE", {"destination": "/queue/r", "id": "s"}))
    producer, transport = h.connect()
    h.settle()
    producer.data_received(frame("SEND", {"destination": "/queue/r"}, b"1"))
    assert transport.reading
    producer.data_received(frame("SEND", {"destination": "/queue/r"}, b"2"))
    assert not transport.reading  # its frames were handled; the next read waits
    h.run_once()  # the flush
    assert transport.reading and transport.pauses == 1
    assert [m.body for m in ctransport.frames()] == [b"1", b"2"]
    producer.data_received(frame("SEND", {"destination": "/queue/r"}, b"3"))
    assert transport.reading  # the first read after a flush


def test_a_read_paused_for_the_flush_stays_paused_for_held_sends(make):
    h = make({**_BLOCK, "limits": {"max-held-send-bytes": 0}})
    producer, transport = h.connect()
    producer.data_received(frame("SEND", {"destination": "/queue/full"}, b"x" * 200))
    producer.data_received(frame("SEND", {"destination": "/queue/full"}, b"y"))  # held
    assert not transport.reading
    h.settle()
    assert not transport.reading and producer.pacer.reading_paused  # the flush leaves it paused
    consumer, ctransport = h.connect()
    consumer.data_received(
        frame("SUBSCRIBE", {"destination": "/queue/full", "id": "s", "ack": "client-individual"})
    )
    h.settle()
    [first] = ctransport.frames()
    consumer.data_received(frame("ACK", {"id": first.headers["ack"]}))
    h.settle()
    assert transport.reading and producer.blocked_bytes == 0
