"""Connection churn with the hardening probes, io_uring on: the broker must not die.

Thousands of connections open and close while other clients probe: abrupt
closes (RST) in every phase (mid-CONNECT, with a receipt riding on an
io_uring write, with deliveries unread), slow readers whose sockets fill,
NUL and STOMP 1.0 escape injection, bursts of 250 and 1,000 connections
subscribing to one queue, and the HTTP API polled throughout. The broker is
strict (tests/support.py) and runs with faulthandler: dying by a signal, or
logging an unexpected exception, fails the test with the broker's dump.

The suite runs it for ``SHOAL_STRESS_SECONDS`` (10 s by default) on each
build; ``make stress`` repeats it for longer (see the Makefile).
"""

from __future__ import annotations

import os
import random
import signal
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from shoal.server.uring import open_ring
from support import BUILDS, ShoalProcess, cut_frame, get_json

pytestmark = pytest.mark.e2e

SECONDS = float(os.environ.get("SHOAL_STRESS_SECONDS", "10"))
BURSTS = (250, 1000)
CONFIG = """
[broker]
heartbeat = [0, 0]
[limits]
max-connections = 5000
max-unauthenticated-connections = 5000
"""


def frame(command: str, headers: dict[str, str] | None = None, body: bytes = b"") -> bytes:
    head = command + "\n" + "".join(f"{k}:{v}\n" for k, v in (headers or {}).items())
    return head.encode() + b"\n" + body + b"\x00"


CONNECT = frame("CONNECT", {"accept-version": "1.2", "host": "localhost"})


def dial(port: int, timeout: float = 10.0) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def reset(sock: socket.socket) -> None:
    """Close abruptly: an RST, not a FIN, whatever is unread or unsent."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    sock.close()


def read_until(sock: socket.socket, command: str) -> None:
    """Read frames until one of ``command`` (an ERROR or EOF raise)."""
    buf = b""
    while True:
        frame_, buf = cut_frame(buf)
        if frame_ is not None:
            if frame_[0] == command:
                return
            if frame_[0] == "ERROR":
                raise AssertionError(f"ERROR from the broker: {frame_}")
            continue
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed before {command}")
        buf += chunk


@dataclass
class Tally:
    """What the clients did; client bugs (not socket errors) fail the test."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    connections: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)

    def opened(self, kind: str, n: int = 1) -> None:
        with self.lock:
            self.connections += n
            self.by_kind[kind] = self.by_kind.get(kind, 0) + n


# --- one connection's life, by kind ---------------------------------------------------


def mid_connect(port: int, rng: random.Random) -> None:
    """Half a CONNECT, then an RST: the broker sees "closed during CONNECT"."""
    sock = dial(port)
    sock.sendall(CONNECT[: rng.randrange(1, len(CONNECT))])
    reset(sock)


def receipt_in_flight(port: int, rng: random.Random) -> None:
    """A persistent SEND with a receipt (sent once the journal write is durable),
    closed abruptly before, while or after the receipt comes."""
    sock = dial(port)
    body = os.urandom(rng.choice((16, 512, 8192)))
    headers = {
        "destination": "/queue/stress",
        "persistent": "true",
        "content-length": str(len(body)),
    }
    sends = b"".join(
        frame("SEND", {**headers, "receipt": f"r{i}"}, body) for i in range(rng.randrange(1, 4))
    )
    sock.sendall(CONNECT + sends)
    if rng.random() < 0.5:
        read_until(sock, "CONNECTED")
    if rng.random() < 0.3:
        read_until(sock, "RECEIPT")
    reset(sock)


def consumer_dropped(port: int, rng: random.Random) -> None:
    """Subscribe with unacked deliveries, then vanish (they go back to the queue)."""
    sock = dial(port)
    ack = rng.choice(("auto", "client", "client-individual"))
    sub = {"destination": "/queue/stress", "id": "1", "ack": ack, "prefetch-count": "50"}
    sock.sendall(CONNECT + frame("SUBSCRIBE", sub))
    read_until(sock, "CONNECTED")
    if rng.random() < 0.5:
        sock.settimeout(0.05)
        try:
            sock.recv(65536)
        except TimeoutError:
            pass
    reset(sock)


def polite(port: int, rng: random.Random) -> None:
    """A SEND and a receipted DISCONNECT, read to the end."""
    sock = dial(port)
    send = frame(
        "SEND", {"destination": "/queue/stress", "persistent": "true", "receipt": "s"}, b"x"
    )
    sock.sendall(CONNECT + send + frame("DISCONNECT", {"receipt": "bye"}))
    read_until(sock, "RECEIPT")
    sock.close()


PROBES = (
    # NUL inside a header value and a header name
    frame("SEND", {"destination": "/queue/probe", "x": "a\x00b"}, b"nul"),
    b"SEND\ndestination:/queue/probe\nna\x00me:v\n\nnul\x00",
    # STOMP 1.0 escape injection: 1.0 has no escapes, these are literal
    frame("SEND", {"destination": "/queue/probe\\c\\n", "h\\r": "v\\\\"}, b"esc"),
    frame("SUBSCRIBE", {"destination": "/queue/probe\\nreceipt:x", "ack": "auto"}),
    b"SEND\ndestination:/queue/probe\ncontent-length:99999999\n\nshort\x00",
    b"\x00\x00\x00GARBAGE\n\n\x00",
)


def probe(port: int, rng: random.Random) -> None:
    """A STOMP 1.0 client sending one of the hardening probes, read to the close
    (or for a moment: a frame cut short waits for the rest)."""
    sock = dial(port, timeout=0.3)
    sock.sendall(frame("CONNECT", {"login": "guest"}) + rng.choice(PROBES))
    try:
        while sock.recv(65536):
            pass
    except TimeoutError:
        pass
    reset(sock)


KINDS: dict[str, Callable[[int, random.Random], None]] = {
    "mid-connect": mid_connect,
    "receipt-in-flight": receipt_in_flight,
    "consumer-dropped": consumer_dropped,
    "polite": polite,
    "probe": probe,
}


# --- the workers ----------------------------------------------------------------------


def churn(port: int, seed: int, deadline: float, tally: Tally, alive: Callable[[], bool]) -> None:
    rng = random.Random(seed)
    kinds = list(KINDS)
    while time.monotonic() < deadline and alive():
        kind = rng.choice(kinds)
        tally.opened(kind)
        try:
            KINDS[kind](port, rng)
        except OSError:  # resets, refusals, timeouts: the clients' side of abrupt closes
            pass
        except Exception as exc:
            with tally.lock:
                tally.failures.append(f"{kind}: {exc!r}")


def slow_readers(port: int, deadline: float, tally: Tally, alive: Callable[[], bool]) -> None:
    """Consumers that never read while a producer fills their queue: the
    broker's writes back up until the sockets are dropped and replaced."""
    body = b"s" * 4096
    while time.monotonic() < deadline and alive():
        readers = []
        try:
            for i in range(4):
                sock = dial(port)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                sub = {"destination": "/queue/slow", "id": str(i), "ack": "client"}
                sock.sendall(CONNECT + frame("SUBSCRIBE", sub))
                readers.append(sock)
            tally.opened("slow-reader", len(readers))
            producer = dial(port)
            tally.opened("slow-producer")
            producer.sendall(CONNECT + frame("SEND", {"destination": "/queue/slow"}, body) * 200)
            time.sleep(0.5)
            reset(producer)
        except OSError:
            pass
        finally:
            for sock in readers:
                reset(sock)


def burst(port: int, n: int, tally: Tally) -> None:
    """``n`` connections subscribing to one queue at once, messages of many
    groups spread over them, then every connection dropped (the groups move)."""
    socks = []
    try:
        for i in range(n):
            sock = dial(port)
            sub = {"destination": "/queue/burst", "id": str(i), "ack": "client-individual"}
            sock.sendall(CONNECT + frame("SUBSCRIBE", sub))
            socks.append(sock)
        tally.opened(f"burst-{n}", n)
        for sock in socks:
            read_until(sock, "CONNECTED")
        producer = dial(port)
        socks.append(producer)
        sends = b"".join(
            frame("SEND", {"destination": "/queue/burst", "JMSXGroupID": f"g{i % 300}"}, b"b")
            for i in range(2 * n)
        )
        producer.sendall(CONNECT + sends + frame("DISCONNECT", {"receipt": "sent"}))
        read_until(producer, "RECEIPT")
    except OSError:
        pass
    finally:
        for sock in socks:
            reset(sock)


def http_poller(url: str, deadline: float, alive: Callable[[], bool]) -> None:
    while time.monotonic() < deadline and alive():
        for path in ("/api/broker", "/api/queues", "/api/connections", "/metrics"):
            try:
                get_json(url + path) if path != "/metrics" else None
            except (OSError, AssertionError):
                pass


@pytest.mark.parametrize("build", BUILDS)
def test_connection_churn_with_probes_does_not_kill_the_broker(tmp_path, build):
    config = tmp_path / "shoal.toml"
    config.write_text(CONFIG)
    broker = ShoalProcess(tmp_path / "data", config, build=build).start()
    tally = Tally()
    try:
        port = broker.stomp_port

        def alive() -> bool:
            return broker.proc is not None and broker.proc.poll() is None

        deadline = time.monotonic() + SECONDS
        threads = [
            threading.Thread(target=churn, args=(port, seed, deadline, tally, alive))
            for seed in range(6)
        ]
        threads.append(threading.Thread(target=slow_readers, args=(port, deadline, tally, alive)))
        threads.append(
            threading.Thread(target=http_poller, args=(broker.http_url, deadline, alive))
        )
        for thread in threads:
            thread.start()
        for n in BURSTS:
            if alive():
                burst(port, n, tally)
        for thread in threads:
            thread.join()
        assert alive(), "; ".join(broker.problems()) or "the broker is gone"
        # Still serving: a fresh client's receipted SEND and its delivery.
        sock = dial(port)
        sock.sendall(
            CONNECT
            + frame(
                "SEND", {"destination": "/queue/after", "persistent": "true", "receipt": "r"}, b"ok"
            )
            + frame("SUBSCRIBE", {"destination": "/queue/after", "id": "1"})
        )
        read_until(sock, "MESSAGE")
        sock.close()
        journal = get_json(broker.http_url + "/api/broker")["journal"]
        ring = open_ring()
        if ring is not None:  # this machine has io_uring: the churn's syncs went through it
            ring.close()
            assert journal["syncs_io_uring"] >= 1, journal
        print(f"{build}: {tally.connections} connections {tally.by_kind}; journal {journal}")
        assert not tally.failures, tally.failures[:10]
        assert tally.connections >= sum(BURSTS)
    finally:
        broker.stop()  # strict: a signal or a logged exception fails here


def test_a_broker_that_dies_by_a_signal_fails_its_test_with_its_dump(tmp_path):
    """What the churn test relies on: strict stop() names the signal, and the
    log holds faulthandler's dump of the broker's threads."""
    broker = ShoalProcess(tmp_path / "data").start()
    assert broker.proc is not None
    os.kill(broker.proc.pid, signal.SIGSEGV)
    broker.proc.wait(10)
    with pytest.raises(AssertionError, match="died by signal SIGSEGV") as failed:
        broker.stop()
    assert "Fatal Python error: Segmentation fault" in str(failed.value)
