"""Micro-benchmark of the broker's AMQP layer (not a test: pytest does not collect it).

    PYTHONPATH=src .venv/bin/python tests/protocol/bench_amqp.py [ROUNDS]

An ``AmqpConnection`` against a Proton client engine in memory (no sockets,
no broker core), as AW1 uses it: per round, 200 pre-settled transfers of 256
bytes in one read, each mapped to the core's headers (``headers_of``) and
recycled; 200 messages filled (``message_of``) and sent; the client's 200
accepted dispositions in one read; and the same 200 sent as the broker passes
on a message received over AMQP (``transfer_as_received``: a header section of its
own, then the sections as received). Only the server's calls are timed
(process CPU time); prints the median µs per message of each part over the
rounds.
``SHOAL_PURE=1`` times the pure-Python modules of a compiled build.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from proton import Disposition, Message

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_amqp_connection import Pair, _consumer, _producer

from shoal.protocol.amqp import NEED_DATA, AmqpConnection, AmqpHeaders, TransferReceived
from shoal.server.amqp_mapping import headers_of, message_of, transfer_as_received

N = 200  # messages per read
BODY = b"x" * 256
HEADERS = {"JMSXGroupID": "g1", "JMSXGroupSeq": "3", "persistent": "false"}


class Bench:
    def __init__(self) -> None:
        self.pair = Pair(AmqpConnection(message_pool=[]))
        self.snd, _ = _producer(self.pair, 10**6)
        self.rcv, self.consumer_link = _consumer(self.pair, 10**6)
        self.server = self.pair.server

    def _client_out(self) -> bytes:
        t = self.pair.transport
        out = b""
        while (pending := t.pending()) > 0:
            chunk = t.peek(pending)
            t.pop(len(chunk))
            out += chunk
        return out

    def _client_in(self, data: bytes) -> None:
        t = self.pair.transport
        while data:
            cap = t.capacity()
            t.push(data[:cap])
            data = data[cap:]

    def kept_headers(self) -> AmqpHeaders:
        """The core's headers of one transfer as the producer link hands it over."""
        self.snd.delivery(b"kept")
        self.snd.send(Message(body=BODY, group_id="g1", group_sequence=3).encode())
        self.snd.advance()
        self.server.receive_data(self._client_out(), 1.0)
        while (event := self.server.next_event()) is not NEED_DATA:
            if isinstance(event, TransferReceived):
                headers, _ = headers_of(event.message, 1000, event.encoding)
        assert isinstance(headers, AmqpHeaders)
        self._client_in(self.server.data_to_send())
        return headers

    def transfers_in(self) -> float:
        for i in range(N):
            self.snd.delivery(str(i).encode())
            self.snd.send(Message(body=BODY, group_id=f"g{i % 100}", group_sequence=1).encode())
            self.snd.advance()
        data = self._client_out()
        server = self.server
        start = time.process_time()
        server.receive_data(data, 1.0)
        while (event := server.next_event()) is not NEED_DATA:
            if isinstance(event, TransferReceived):
                headers_of(event.message, 1000)
                server.recycle(event.message)
        out = server.data_to_send()
        spent = time.process_time() - start
        self._client_in(out)
        return spent / N

    def transfers_out(self, kept: AmqpHeaders | None = None) -> tuple[float, float]:
        server = self.server
        eff: Any = SimpleNamespace(
            message=SimpleNamespace(destination="/queue/orders"), first_key=None
        )
        start = time.process_time()
        if kept is None:
            for _ in range(N):
                message = message_of(eff, BODY, HEADERS, 0, False, server.blank_message())
                server.send_message(self.consumer_link, message)
                server.recycle(message)
        else:
            for _ in range(N):
                encoded = transfer_as_received(eff, BODY, kept, 0, False)
                server.send_message(self.consumer_link, encoded)
        out = server.data_to_send()
        sent = time.process_time() - start
        self._client_in(out)
        while (dlv := self.rcv.current) is not None:
            self.rcv.recv(dlv.pending)
            self.rcv.advance()
            dlv.update(Disposition.ACCEPTED)
            dlv.settle()
        data = self._client_out()
        start = time.process_time()
        server.receive_data(data, 1.0)
        while server.next_event() is not NEED_DATA:
            pass
        server.data_to_send()
        settled = time.process_time() - start
        return sent / N, settled / N


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 25
    bench = Bench()
    kept = bench.kept_headers()
    parts: dict[str, list[float]] = {
        "transfer in": [],
        "transfer out": [],
        "disposition in": [],
        "transfer out (kept)": [],
    }
    for _ in range(rounds):
        parts["transfer in"].append(bench.transfers_in())
        sent, settled = bench.transfers_out()
        parts["transfer out"].append(sent)
        parts["disposition in"].append(settled)
        parts["transfer out (kept)"].append(bench.transfers_out(kept)[0])
    medians = {name: statistics.median(times) * 1e6 for name, times in parts.items()}
    mapped = sum(medians[k] for k in ("transfer in", "transfer out", "disposition in"))
    kept_total = mapped - medians["transfer out"] + medians["transfer out (kept)"]
    print(
        "  ".join(f"{name} {us:.2f}" for name, us in medians.items()),
        f" total {mapped:.2f} us/message mapped, {kept_total:.2f} kept",
    )


if __name__ == "__main__":
    main()
