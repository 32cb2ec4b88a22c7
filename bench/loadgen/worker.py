"""Producer and consumer worker processes of the load generator.

Each worker is its own process with its own STOMP connection. They share one small
array of counters with the controller (bench/loadgen/runner.py): ready flags, a "go"
flag for producers, a "stop" flag for consumers, and progress counts. Everything a
consumer receives is recorded (bench-seq, bench-gseq, group, bench-ts, receive time,
redelivered) and written to binary files when it stops; the controller checks them.

Producers: pipelined (`batch` SEND frames per write; 64 by default) or synchronous
(a RECEIPT per SEND, waited for before the next one), optionally paced to a fixed rate
or held to a window of messages in flight. Every SEND carries the group header
(JMSXGroupID unless disabled), bench-group, bench-gseq, bench-seq and bench-ts
(time.time_ns() when the frame is built).

Consumers: one subscription, ack mode client-individual / client / auto, prefetch
sent both as activemq.prefetchSize (ActiveMQ, Shoal) and prefetch-count (RabbitMQ,
Shoal). ACK frames for everything in one recv() go out in one write. A "slow"
consumer sleeps `slow_ms` per message and acks each one after its sleep.
"""

from __future__ import annotations

import json
import os
import resource
import time
import traceback
from array import array
from pathlib import Path

from bench.loadgen.wire import Conn, StompError, cut_frame, frame

# Layout of the shared control array (multiprocessing RawArray of int64).
MAXW = 64
STOP, GO, ABORT = 0, 1, 2
C_COUNT = 16  # + consumer index: messages received (with duplicates)
C_STATE = C_COUNT + MAXW  # + consumer index: 1 subscribed, 2 finished, -1 failed
P_SENT = C_STATE + MAXW  # + producer index: messages sent
P_STATE = P_SENT + MAXW  # + producer index: 1 connected, 2 finished, -1 failed
CTL_SIZE = P_STATE + MAXW

REC_FIELDS = (("seq", "q"), ("gseq", "q"), ("group", "q"), ("ts", "q"), ("rt", "q"), ("red", "b"))


def _cpu_self() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _write_summary(path: Path, data: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


# --- consumer -------------------------------------------------------------------------


def consumer_main(cfg: dict, ctl) -> None:
    idx = cfg["index"]
    out = Path(cfg["outdir"])
    summary: dict = {"role": "consumer", "index": idx, "pid": os.getpid(), "error": None}
    recs = {name: array(code) for name, code in REC_FIELDS}
    try:
        _consume(cfg, ctl, recs, summary)
        ctl[C_STATE + idx] = 2
    except BaseException as exc:
        summary["error"] = f"{type(exc).__name__}: {exc}"
        summary["traceback"] = traceback.format_exc()
        ctl[C_STATE + idx] = -1
    finally:
        for name, arr in recs.items():
            with open(out / f"cons{idx}.{name}", "wb") as f:
                arr.tofile(f)
        summary["received"] = len(recs["seq"])
        summary["cpu_s"] = _cpu_self()
        _write_summary(out / f"cons{idx}.json", summary)


def _consume(cfg: dict, ctl, recs: dict, summary: dict) -> None:
    idx = cfg["index"]
    conn = Conn(cfg["port"])
    conn.connect(cfg.get("connect_headers"), cfg.get("accept_version", "1.0,1.1,1.2"))
    summary["version"] = conn.version
    summary["server"] = conn.server
    ack_mode = cfg.get("ack", "client-individual")
    sub = {"destination": cfg["destination"], "id": "0", "ack": ack_mode, "receipt": "sub"}
    if cfg.get("prefetch"):
        sub["activemq.prefetchSize"] = str(cfg["prefetch"])
        sub["prefetch-count"] = str(cfg["prefetch"])
    sub.update(cfg.get("subscribe_headers") or {})
    conn.sock.sendall(frame("SUBSCRIBE", sub))
    conn.wait_receipt(b"sub")
    ctl[C_STATE + idx] = 1

    sock = conn.sock
    sock.settimeout(0.05)
    recv = sock.recv
    sendall = sock.sendall
    time_ns = time.time_ns
    seqs, gseqs, groups, tss, rts, reds = (recs[n] for n, _ in REC_FIELDS)
    a_seq, a_gseq, a_group, a_ts, a_rt, a_red = (
        seqs.append,
        gseqs.append,
        groups.append,
        tss.append,
        rts.append,
        reds.append,
    )
    version = conn.version
    if ack_mode == "auto":
        ack_fmt = None
    elif version == "1.2":
        ack_fmt = b"ACK\nid:%s\n\n\x00"
    elif version == "1.1":
        ack_fmt = b"ACK\nsubscription:0\nmessage-id:%s\n\n\x00"
    else:
        ack_fmt = b"ACK\nmessage-id:%s\n\n\x00"
    ack_key = b"ack" if version == "1.2" else b"message-id"
    cumulative = ack_mode == "client"
    slow_s = cfg.get("slow_ms", 0) / 1000.0
    group_header = cfg.get("group_header", "JMSXGroupID").encode()
    echoed = 0
    count = 0  # messages of the measured run (bench-seq below count_limit)
    count_limit = cfg.get("count_limit", 1 << 62)
    buf = conn.buf  # whatever came after the RECEIPT of the SUBSCRIBE
    now = time_ns()
    C = C_COUNT + idx

    while True:
        pos = 0
        acks = []
        last_ack = None
        while True:
            got = cut_frame(buf, pos)
            if got is None:
                break
            cmd, h, _body, pos = got
            if cmd == b"MESSAGE":
                if slow_s:
                    time.sleep(slow_s)
                    now = time_ns()
                seq = int(h[b"bench-seq"])
                a_seq(seq)
                a_gseq(int(h[b"bench-gseq"]))
                a_group(int(h[b"bench-group"]))
                a_ts(int(h[b"bench-ts"]))
                a_rt(now)
                a_red(1 if h.get(b"redelivered") == b"true" else 0)
                if group_header in h:
                    echoed += 1
                if seq < count_limit:
                    count += 1
                if ack_fmt is not None:
                    aid = h.get(ack_key) or h[b"message-id"]
                    if slow_s:
                        sendall(ack_fmt % aid)
                        ctl[C] = count
                        if ctl[STOP]:
                            break
                    elif cumulative:
                        last_ack = aid
                    else:
                        acks.append(ack_fmt % aid)
            elif cmd == b"ERROR":
                raise StompError(f"ERROR frame: {h.get(b'message', b'')!r} {_body[:300]!r}")
        if acks:
            sendall(b"".join(acks))
        elif last_ack is not None:
            sendall(ack_fmt % last_ack)
        buf = buf[pos:] if pos else buf
        ctl[C] = count
        if ctl[STOP]:
            break
        try:
            data = recv(1 << 18)
        except TimeoutError:
            continue
        if not data:
            raise ConnectionError("connection closed by the broker")
        now = time_ns()
        buf = buf + data if buf else data
    summary["group_header_echoed"] = echoed
    try:
        sock.settimeout(5)
        conn.disconnect(timeout=5)
    except (OSError, StompError, ConnectionError):
        conn.close()


# --- producer -------------------------------------------------------------------------


def _load(path: str, code: str) -> array:
    arr = array(code)
    with open(path, "rb") as f:
        arr.frombytes(f.read())
    return arr


def producer_main(cfg: dict, ctl) -> None:
    idx = cfg["index"]
    out = Path(cfg["outdir"])
    summary: dict = {"role": "producer", "index": idx, "pid": os.getpid(), "error": None}
    try:
        _produce(cfg, ctl, summary)
        ctl[P_STATE + idx] = 2
    except BaseException as exc:
        summary["error"] = f"{type(exc).__name__}: {exc}"
        summary["traceback"] = traceback.format_exc()
        ctl[P_STATE + idx] = -1
    finally:
        summary["cpu_s"] = _cpu_self()
        _write_summary(out / f"prod{idx}.json", summary)


def _produce(cfg: dict, ctl, summary: dict) -> None:
    idx = cfg["index"]
    seqs = _load(cfg["plan_seq"], "q")
    groups = _load(cfg["plan_group"], "q")
    gseqs = _load(cfg["plan_gseq"], "q")
    n = len(seqs)
    conn = Conn(cfg["port"])
    conn.connect(cfg.get("connect_headers"), cfg.get("accept_version", "1.0,1.1,1.2"))
    summary["version"] = conn.version
    ctl[P_STATE + idx] = 1
    while not ctl[GO]:
        if ctl[ABORT]:
            conn.close()
            return
        time.sleep(0.001)

    dest = cfg["destination"].encode().replace(b"%", b"%%")
    payload = (b"0123456789abcdef" * (cfg["size"] // 16 + 1))[: cfg["size"]]
    head = b"SEND\ndestination:" + dest + b"\n"
    gh = cfg.get("group_header")
    if gh:
        head += gh.encode() + b":g%d\n"
    head += b"bench-group:%d\nbench-gseq:%d\nbench-seq:%d\nbench-ts:%d\n"
    if cfg.get("persistent"):
        head += b"persistent:true\n"
    for k, v in (cfg.get("send_headers") or {}).items():
        head += f"{k}:{v}\n".encode().replace(b"%", b"%%")
    sync = cfg.get("receipts", False)
    if sync:
        head += b"receipt:%d\n"
    if cfg.get("content_length", True):
        head += b"content-length:%d\n" % len(payload)
    tmpl = head + b"\n" + payload.replace(b"%", b"%%") + b"\x00"

    sock = conn.sock
    sendall = sock.sendall
    time_ns = time.time_ns
    rate = cfg.get("rate") or 0.0
    window = cfg.get("max_in_flight") or 0
    batch = max(1, int(cfg.get("batch", 64)))
    if rate:
        batch = max(1, min(batch, int(rate / 2000)))
    P = P_SENT + idx
    t0 = time.monotonic()
    first_ns = time_ns()
    sent = 0
    if sync:
        wait = conn.wait_receipt
        for i in range(n):
            if rate:
                due = t0 + i / rate
                d = due - time.monotonic()
                if d > 0:
                    time.sleep(d)
            g = groups[i]
            s = seqs[i]
            if gh:
                f = tmpl % (g, g, gseqs[i], s, time_ns(), s)
            else:
                f = tmpl % (g, gseqs[i], s, time_ns(), s)
            sendall(f)
            wait(b"%d" % s)
            sent += 1
            ctl[P] = sent
    else:
        n_cons = cfg.get("n_consumers", 1)
        n_prod = cfg.get("n_producers", 1)
        for start in range(0, n, batch):
            if rate:
                due = t0 + start / rate
                d = due - time.monotonic()
                if d > 0:
                    time.sleep(d)
            if window:
                while True:
                    total_sent = sum(ctl[P_SENT + j] for j in range(n_prod))
                    total_recv = sum(ctl[C_COUNT + j] for j in range(n_cons))
                    if total_sent - total_recv < window or ctl[ABORT]:
                        break
                    time.sleep(0.001)
            end = min(n, start + batch)
            if gh:
                frames = [
                    tmpl % (groups[i], groups[i], gseqs[i], seqs[i], time_ns())
                    for i in range(start, end)
                ]
            else:
                frames = [
                    tmpl % (groups[i], gseqs[i], seqs[i], time_ns()) for i in range(start, end)
                ]
            sendall(b"".join(frames))
            sent = end
            ctl[P] = sent
            if ctl[ABORT]:
                break
    summary["sent"] = sent
    summary["first_send_ns"] = first_ns
    summary["last_send_ns"] = time_ns()
    summary["send_s"] = time.monotonic() - t0
    conn.disconnect(timeout=120)  # its RECEIPT: the broker has taken every SEND before it
    summary["accepted_ns"] = time_ns()
