"""Micro-benchmark of the STOMP codec (not a test: pytest does not collect it).

    .venv/bin/python tests/protocol/bench_codec.py

Prints µs per frame for decoding SEND frames (one frame per read, and many
frames per read), and for encoding MESSAGE and SEND frames.
"""

from __future__ import annotations

import time

from shoal.protocol.stomp import (
    Connect,
    Connected,
    Message,
    Role,
    StompConnection,
    encode_frame,
    encode_message,
)

BODY = bytes(range(256))
SEND_HEADERS = {
    "destination": "/queue/orders",
    "content-type": "application/octet-stream",
    "receipt": "r-17",
    "JMSXGroupID": "customer-4711",
    "persistent": "true",
    "priority": "4",
}
MESSAGE_HEADERS = {
    "content-type": "application/octet-stream",
    "JMSXGroupID": "customer-4711",
    "JMSXGroupSeq": "17",
    "persistent": "true",
    "priority": "4",
    "timestamp": "1767225600000",
}


def open_server() -> StompConnection:
    client = StompConnection(Role.CLIENT)
    server = StompConnection(Role.SERVER)
    server.receive_data(client.send(Connect(host="localhost")))
    server.next_event()
    client.receive_data(server.send(Connected(server="shoal")))
    client.next_event()
    return server


def best(fn, n: int, repeat: int = 25) -> float:
    """Best µs per iteration over ``repeat`` runs of ``n`` iterations (CPU time,
    so other processes on a busy machine disturb it less)."""
    times = []
    for _ in range(repeat):
        t0 = time.process_time()
        fn(n)
        times.append(time.process_time() - t0)
    return min(times) / n * 1e6


def main() -> None:
    frame = encode_frame("SEND", SEND_HEADERS, BODY, "1.2")
    print(f"SEND frame: {len(frame)} bytes, {len(SEND_HEADERS) + 1} headers")

    server = open_server()

    def decode_one_per_read(n: int) -> None:
        receive, next_event = server.receive_data, server.next_event
        for _ in range(n):
            receive(frame, 1.0)
            next_event()
            next_event()  # NEED_DATA

    batch = frame * 100

    def decode_batched(n: int) -> None:
        receive, next_event = server.receive_data, server.next_event
        for _ in range(n // 100):
            receive(batch, 1.0)
            for _ in range(100):
                next_event()
            next_event()

    def encode_msg(n: int) -> None:
        for i in range(n):
            encode_message("/queue/orders", "m-1", "sub-1", "a-1", MESSAGE_HEADERS, BODY, "1.2")

    def send_msg(n: int) -> None:
        send = server.send
        for _ in range(n):
            send(Message("/queue/orders", "m-1", "sub-1", "a-1", BODY, MESSAGE_HEADERS))

    def encode_send(n: int) -> None:
        for _ in range(n):
            encode_frame("SEND", SEND_HEADERS, BODY, "1.2")

    n = 10_000
    reference = best(lambda k: [sum(range(100)) for _ in range(k)], n)
    print(f"(machine reference: sum(range(100)) = {reference * 1000:.0f} ns)")
    print(f"decode SEND, one frame per read      : {best(decode_one_per_read, n):6.2f} µs/frame")
    print(f"decode SEND, 100 frames per read     : {best(decode_batched, n):6.2f} µs/frame")
    print(f"encode_message (MESSAGE, 10 headers) : {best(encode_msg, n):6.2f} µs/frame")
    print(f"conn.send(Message(...))              : {best(send_msg, n):6.2f} µs/frame")
    print(f"encode_frame (SEND, 7 headers)       : {best(encode_send, n):6.2f} µs/frame")


if __name__ == "__main__":
    main()
