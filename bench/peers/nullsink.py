"""Not a broker: the client's ceiling. A null STOMP sink for `bench.run --broker nullsink`.

It does the least a STOMP server can do and still let the load generator's checks
pass: CONNECT gets CONNECTED, SUBSCRIBE and UNSUBSCRIBE are kept (RECEIPT if asked),
every SEND is handed on at once as a MESSAGE to the next subscriber of its destination
(round robin; no groups, no storage, no redelivery; SENDs before the first SUBSCRIBE
wait in a list), ACKs are read and dropped, a `receipt` header on any frame is answered.
The MESSAGE is the SEND's bytes behind `subscription`, `message-id` and `ack` headers
(its `destination` header is the SEND's). One process, one selectors loop, no frame
objects: the same client runs against it and against the brokers, so its throughput
is what the client alone carries on this machine.

Limits: no flow control (a slow consumer's backlog grows in memory), LF line endings
only (the load generator's), no header escaping, no transactions, no heart-beats.

    h = start_nullsink(workdir)   # python bench/peers/nullsink.py --port P, a process of its own
    h.stomp_port, h.pid, h.cpu_s()
    h.stop()

The server half imports nothing from bench/ so it starts in a bare interpreter.
"""

from __future__ import annotations

import argparse
import selectors
import socket
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bench.peers.common import BrokerHandle

VERSION = "nullsink 1 (not a broker)"
NOTES = "not a broker: the client's ceiling (acks only, no groups, no storage)"


class _Conn:
    __slots__ = ("sock", "buf", "out", "writing", "closing", "subs")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = b""
        self.out: list[bytes] = []
        self.writing = False  # registered for EVENT_WRITE: the kernel buffer was full
        self.closing = False  # close once `out` is written (after DISCONNECT's RECEIPT)
        self.subs: list[tuple[bytes, bytes]] = []  # (destination, subscription id)


class NullSink:
    def __init__(self, listener: socket.socket) -> None:
        self.sel = selectors.DefaultSelector()
        self.listener = listener
        self.sel.register(listener, selectors.EVENT_READ, None)
        # destination -> [subscribers, next index]; subscribers are (conn, prefix bytes)
        self.dests: dict[bytes, list[Any]] = {}
        self.waiting: dict[bytes, list[bytes]] = {}  # SENDs before any subscriber
        self.next_id = 0

    def serve_forever(self) -> None:
        select = self.sel.select
        while True:
            for key, events in select():
                conn = key.data
                if conn is None:
                    self._accept()
                    continue
                if events & selectors.EVENT_WRITE:
                    self._flush(conn)
                if events & selectors.EVENT_READ and key.fileobj is conn.sock:
                    self._read(conn)

    def _accept(self) -> None:
        sock, _ = self.listener.accept()
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sel.register(sock, selectors.EVENT_READ, _Conn(sock))

    def _read(self, conn: _Conn) -> None:
        try:
            data = conn.sock.recv(1 << 18)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._close(conn)
            return
        buf = conn.buf + data if conn.buf else data
        touched: set[_Conn] = set()
        pos = self._frames(conn, buf, touched)
        conn.buf = buf[pos:]
        for c in touched:
            if c.out and not c.writing:
                self._flush(c)

    def _frames(self, conn: _Conn, buf: bytes, touched: set[_Conn]) -> int:
        """Handle every whole frame in ``buf``; the position of the first incomplete one."""
        n = len(buf)
        pos = 0
        find = buf.find
        while True:
            while pos < n and buf[pos] in (10, 13):  # heart-beats, frame-trailing EOLs
                pos += 1
            hend = find(b"\n\n", pos)
            if hend < 0:
                return pos
            cl = find(b"\ncontent-length:", pos, hend)
            if cl >= 0:
                end = hend + 2 + int(buf[cl + 16 : find(b"\n", cl + 16, hend + 1)])
                if end >= n:
                    return pos
            else:
                end = find(b"\x00", hend + 2)
                if end < 0:
                    return pos
            cmd_end = find(b"\n", pos)
            cmd = buf[pos:cmd_end]
            # The RECEIPT first: a SUBSCRIBE's must come before the messages it releases.
            r = find(b"\nreceipt:", cmd_end - 1, hend)
            if r >= 0:
                rid = buf[r + 9 : find(b"\n", r + 9, hend + 1)]
                conn.out.append(b"RECEIPT\nreceipt-id:%s\n\n\x00" % rid)
                touched.add(conn)
            if cmd == b"SEND":
                self._send(buf, cmd_end, hend, end, touched)
            elif cmd != b"ACK":
                self._control(conn, cmd, buf[cmd_end:hend], touched)
            pos = end + 1

    def _send(self, buf: bytes, cmd_end: int, hend: int, end: int, touched: set[_Conn]) -> None:
        d = buf.find(b"\ndestination:", cmd_end - 1, hend)
        dest = buf[d + 13 : buf.find(b"\n", d + 13, hend + 1)] if d >= 0 else b""
        self.next_id += 1
        rest = b"message-id:%d\nack:%d\n" % (self.next_id, self.next_id)
        body = buf[cmd_end + 1 : end + 1]  # the SEND's headers, blank line, body and NUL
        entry = self.dests.get(dest)
        if not entry or not entry[0]:
            self.waiting.setdefault(dest, []).append(body)
            self.next_id -= 1  # numbered when delivered
            return
        subs = entry[0]
        i = entry[1] % len(subs)
        entry[1] = i + 1
        target, prefix = subs[i]
        target.out += (prefix, rest, body)
        touched.add(target)

    def _control(self, conn: _Conn, cmd: bytes, block: bytes, touched: set[_Conn]) -> None:
        headers = dict(line.partition(b":")[::2] for line in block.split(b"\n") if line)
        if cmd in (b"CONNECT", b"STOMP"):
            offered = headers.get(b"accept-version", b"1.0").split(b",")
            version = max((v for v in offered if v in (b"1.0", b"1.1", b"1.2")), default=b"1.0")
            conn.out.append(
                b"CONNECTED\nversion:%s\nserver:nullsink/1\nheart-beat:0,0\n\n\x00" % version
            )
            touched.add(conn)
        elif cmd == b"SUBSCRIBE":
            dest, sid = headers.get(b"destination", b""), headers.get(b"id", b"0")
            entry = self.dests.setdefault(dest, [[], 0])
            entry[0].append((conn, b"MESSAGE\nsubscription:%s\n" % sid))
            conn.subs.append((dest, sid))
            for body in self.waiting.pop(dest, []):
                self._deliver_waiting(dest, body, touched)
        elif cmd == b"UNSUBSCRIBE":
            sid = headers.get(b"id", b"0")
            for dest, s in [x for x in conn.subs if x[1] == sid]:
                conn.subs.remove((dest, s))
                self._drop(conn, dest, s)
        elif cmd == b"DISCONNECT":
            conn.closing = True
            touched.add(conn)

    def _deliver_waiting(self, dest: bytes, body: bytes, touched: set[_Conn]) -> None:
        entry = self.dests[dest]
        subs = entry[0]
        i = entry[1] % len(subs)
        entry[1] = i + 1
        target, prefix = subs[i]
        self.next_id += 1
        target.out += (prefix, b"message-id:%d\nack:%d\n" % (self.next_id, self.next_id), body)
        touched.add(target)

    def _drop(self, conn: _Conn, dest: bytes, sid: bytes) -> None:
        entry = self.dests.get(dest)
        if entry:
            prefix = b"MESSAGE\nsubscription:%s\n" % sid
            entry[0] = [s for s in entry[0] if not (s[0] is conn and s[1] == prefix)]

    def _flush(self, conn: _Conn) -> None:
        data = b"".join(conn.out) if len(conn.out) > 1 else conn.out[0] if conn.out else b""
        try:
            sent = conn.sock.send(data) if data else 0
        except BlockingIOError:
            sent = 0
        except OSError:
            self._close(conn)
            return
        rest = data[sent:]
        conn.out = [rest] if rest else []
        if rest and not conn.writing:
            conn.writing = True
            self.sel.modify(conn.sock, selectors.EVENT_READ | selectors.EVENT_WRITE, conn)
        elif not rest:
            if conn.writing:
                conn.writing = False
                self.sel.modify(conn.sock, selectors.EVENT_READ, conn)
            if conn.closing:
                self._close(conn)

    def _close(self, conn: _Conn) -> None:
        if conn.sock.fileno() < 0:
            return
        for dest, sid in conn.subs:
            self._drop(conn, dest, sid)
        conn.subs = []
        self.sel.unregister(conn.sock)
        conn.sock.close()


def serve(port: int, host: str = "127.0.0.1") -> None:
    listener = socket.create_server((host, port), backlog=256)
    listener.setblocking(False)
    NullSink(listener).serve_forever()


def start_nullsink(workdir: Path | str, *, timeout: float = 30.0) -> BrokerHandle:
    """This file as a process of its own on a free port; returns once CONNECT works."""
    from bench.peers.common import BrokerHandle, free_port, popen, wait_stomp_ready

    base = Path(workdir).resolve()
    base.mkdir(parents=True, exist_ok=True)
    port = free_port()
    out_path = base / "nullsink.out"
    with open(out_path, "ab") as out:
        proc = popen(
            [sys.executable, str(Path(__file__).resolve()), "--port", str(port)],
            cwd=base,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    handle = BrokerHandle(
        name="nullsink",
        version=VERSION,
        proc=proc,
        stomp_port=port,
        workdir=base,
        log_path=out_path,
        ports={"stomp": port},
        groups=False,
        notes=NOTES,
    )
    try:
        wait_stomp_ready(proc, port, timeout, out_path, what="nullsink")
    except BaseException:
        handle.stop()
        raise
    return handle


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--host", default="127.0.0.1")
    args = p.parse_args()
    try:
        serve(args.port, args.host)
    except KeyboardInterrupt:
        pass
