"""``shoal pipeline matching`` and ``shoal pipeline audit``: the seeds' order-matching system.

matching
    A generator publishes bids and offers for N stock symbols to the topic
    ``orders`` (group id = symbol). Two log queues subscribe to it:
    ``orders.match`` feeds the Spark matching job, ``orders.archive`` the
    order archive. The job matches each symbol with price-time priority,
    keeping the symbol's order book as per-group state, and publishes trades
    exactly once to the topic ``trades`` through the shoal sink. A log queue
    ``trades.archive`` subscribes to ``trades``; two more streaming queries
    archive orders and trades to Parquet with Spark's file sink. Progress is
    printed while it runs; by default it stops once every order is matched
    and archived.

audit
    A batch Spark job over the Parquet archive: per-group order, no gap and
    no duplicate for orders (JMSXGroupSeq) and trades (trade_seq), and the
    trades equal the plain-Python reference matcher run over the archived
    orders.

Both run on a cluster with ``--master spark://host:7077`` (docs/spark.md
says what the executors need). ``python -m shoal.spark.pipeline`` works
without the CLI wiring.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import tempfile
import threading
import time
import zipfile
from collections import deque
from pathlib import Path
from typing import Any

ORDERS_TOPIC = "orders"
TRADES_TOPIC = "trades"
MATCH_QUEUE = "orders.match"
ORDERS_ARCHIVE_QUEUE = "orders.archive"
TRADES_ARCHIVE_QUEUE = "trades.archive"
TRADES_SCHEMA = "symbol string, trade_seq bigint, body string"


# --- the order generator (raw STOMP, receipts per window) ----------------------------


class StompError(RuntimeError):
    pass


def _parse_hostport(value: str, default_port: int) -> tuple[str, int]:
    value = value.removeprefix("stomp://").removeprefix("tcp://").rstrip("/")
    host, _, port = value.rpartition(":")
    if not host:
        return value or "127.0.0.1", default_port
    return host.strip("[]"), int(port)


class _StompProducer:
    """A minimal STOMP 1.2 producer: pre-encoded SEND frames, a receipt per window."""

    def __init__(self, addr: str, user: str | None = None, passcode: str | None = None) -> None:
        host, port = _parse_hostport(addr, 61613)
        self.sock = socket.create_connection((host, port), timeout=120)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        head = "CONNECT\naccept-version:1.2\nhost:localhost\nheart-beat:0,0\n"
        if user is not None:
            head += f"login:{user}\npasscode:{passcode or ''}\n"
        self.sock.sendall(head.encode() + b"\n\x00")
        command, headers, body = self._frame()
        if command != "CONNECTED":
            raise StompError(f"STOMP connect failed: {headers.get('message')} {body[:200]!r}")

    def _frame(self) -> tuple[str, dict[str, str], bytes]:
        while True:
            self.buf = self.buf.lstrip(b"\r\n")
            end = self.buf.find(b"\x00")
            if end >= 0:
                raw, self.buf = self.buf[:end], self.buf[end + 1 :]
                head, _, body = raw.partition(b"\n\n")
                lines = head.decode().split("\n")
                headers = {}
                for line in lines[1:]:
                    k, _, v = line.partition(":")
                    headers.setdefault(k, v)
                return lines[0], headers, body
            chunk = self.sock.recv(65536)
            if not chunk:
                raise StompError("the broker closed the STOMP connection")
            self.buf += chunk

    def wait_receipt(self, receipt: str) -> None:
        command, headers, body = self._frame()
        if command == "ERROR":
            raise StompError(f"broker ERROR: {headers.get('message')} {body[:300]!r}")
        if command != "RECEIPT" or headers.get("receipt-id") != receipt:
            raise StompError(f"expected RECEIPT {receipt}, got {command} {headers}")

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def close(self) -> None:
        try:
            self.sock.sendall(b"DISCONNECT\nreceipt:bye\n\n\x00")
            self.wait_receipt("bye")
        except (OSError, StompError):
            pass
        self.sock.close()


def send_frame(destination: str, group: str, seq: int, body: bytes, receipt: str | None) -> bytes:
    head = (
        f"SEND\ndestination:{destination}\nJMSXGroupID:{group}\nJMSXGroupSeq:{seq}\n"
        f"persistent:true\ncontent-length:{len(body)}\n"
    )
    if receipt:
        head += f"receipt:{receipt}\n"
    return head.encode() + b"\n" + body + b"\x00"


def publish_orders(
    stomp: str,
    orders: int,
    symbols: int,
    *,
    seed: int = 7,
    start: int = 0,
    destination: str = "/topic/" + ORDERS_TOPIC,
    window: int = 2000,
    rate: float = 0.0,
    user: str | None = None,
    password: str | None = None,
    progress: list[int] | None = None,
    stop: threading.Event | None = None,
) -> int:
    """Publish orders ``start..orders-1`` (persistent, receipted per window); returns the count.

    ``rate`` > 0 paces the generator (orders per second). ``progress[0]``
    is updated with the number of orders the broker has confirmed.
    """
    from shoal.spark.matching import encode_order, generate_orders

    prod = _StompProducer(stomp, user, password)
    sent = 0
    confirmed = start
    outstanding: deque[tuple[str, int]] = deque()
    chunk: list[bytes] = []
    t0 = time.monotonic()
    try:
        for i, (sym, gseq, oid, side, price, qty) in enumerate(
            generate_orders(orders, symbols, seed, start), start
        ):
            if stop is not None and stop.is_set():
                break
            last = (i + 1) % window == 0 or i + 1 == orders
            receipt = f"o{i + 1}" if last else None
            chunk.append(send_frame(destination, sym, gseq, encode_order(oid, side, price, qty), receipt))
            sent += 1
            if last:
                prod.send_raw(b"".join(chunk))
                chunk.clear()
                outstanding.append((receipt or "", i + 1))
                while len(outstanding) > 2:
                    r, upto = outstanding.popleft()
                    prod.wait_receipt(r)
                    confirmed = upto
                    if progress is not None:
                        progress[0] = confirmed
                if rate > 0:
                    ahead = (i + 1 - start) / rate - (time.monotonic() - t0)
                    if ahead > 0:
                        time.sleep(ahead)
        while outstanding:
            r, upto = outstanding.popleft()
            prod.wait_receipt(r)
            confirmed = upto
            if progress is not None:
                progress[0] = confirmed
    finally:
        prod.close()
    return sent


def generate_resuming(
    args: argparse.Namespace, http: Any, progress: list[int], stop: threading.Event,
    *, give_up_after: float = 120.0,
) -> None:
    """Publish until the broker holds ``args.orders`` orders, resuming after broker restarts.

    The generator is deterministic, so after a lost connection it asks the
    broker how many orders it kept (the end offsets of ``orders.archive``)
    and goes on from there: no order is lost or published twice, even if the
    broker lost its unsynced tail.
    """
    deadline = None
    while not stop.is_set():
        try:
            start = log_end_total(http, ORDERS_ARCHIVE_QUEUE)
            progress[0] = start
            if start >= args.orders:
                return
            publish_orders(args.stomp, args.orders, args.symbols, seed=args.seed, start=start,
                           rate=args.rate, user=args.user, password=args.password,
                           progress=progress, stop=stop)
            deadline = None
        except (OSError, RuntimeError) as exc:  # StompError, BrokerUnavailable, ...
            now = time.monotonic()
            deadline = deadline or now + give_up_after
            if now > deadline:
                raise
            print(f"generator: {exc}; resuming when the broker is back", flush=True)
            time.sleep(1.0)


# --- broker set-up and views ----------------------------------------------------------


def broker_http(args: argparse.Namespace) -> Any:
    from shoal.spark.client import BrokerHttp

    return BrokerHttp(args.http, user=args.user, password=args.password, retry_seconds=30.0)


def ensure_log_queue(http: Any, name: str, topic: str, buckets: int) -> bool:
    """Create log queue ``name`` subscribed to ``topic``; False when it exists already."""
    from shoal.spark.client import BrokerHttpError

    try:
        http.post_json(
            "/api/queues",
            {
                "name": name,
                "settings": {
                    "queue-type": "log",
                    "log-buckets": buckets,
                    "address": topic,
                    "routing": "multicast",
                },
            },
        )
        return True
    except BrokerHttpError as exc:
        if exc.status == 409:
            return False
        raise


def log_view(http: Any, queue: str) -> dict[str, Any]:
    from urllib.parse import quote

    return http.get_json("/api/logs/" + quote(queue, safe=""))


def log_end_total(http: Any, queue: str) -> int:
    return sum(int(v) for v in log_view(http, queue)["end"].values())


# --- Spark -----------------------------------------------------------------------------


def package_zip() -> str:
    """A zip of the ``shoal`` package for ``addPyFile`` (cluster executors)."""
    import shoal

    root = Path(shoal.__file__).resolve().parent
    out = Path(tempfile.gettempdir()) / f"shoal-pyfiles-{os.getpid()}.zip"
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for p in root.rglob("*.py"):
            z.write(p, Path("shoal") / p.relative_to(root))
    return str(out)


def build_spark(
    master: str = "local[2]",
    app: str = "shoal-pipeline",
    *,
    shuffle_partitions: int = 4,
    driver_memory: str = "2g",
    ship_code: bool | None = None,
    conf: dict[str, str] | None = None,
) -> Any:
    """A SparkSession set up as docs/spark.md recommends; registers format("shoal")."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    local = master.startswith("local")
    if local:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    b = (
        SparkSession.builder.master(master)
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.driver.memory", driver_memory)
    )
    if local:
        b = b.config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
    for k, v in (conf or {}).items():
        b = b.config(k, v)
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    from shoal.spark import register

    register(spark)
    if ship_code if ship_code is not None else not local:
        spark.sparkContext.addPyFile(package_zip())
    return spark


def activate(spark: Any) -> None:
    """Make ``spark`` the JVM's active session for this thread.

    ``writeStream.format("shoal").start()`` looks Python data sources up in
    the thread's active session; a thread other than the one that built the
    session (e.g. a test running the pipeline in the background) has none.
    """
    from shoal.spark import register

    try:
        from pyspark.sql import SparkSession

        SparkSession._get_j_spark_session_class(spark._jvm).setActiveSession(spark._jsparkSession)
    except Exception:  # Spark Connect or a changed internal: registration below still helps
        pass
    register(spark)


def match_group(key: tuple, rows: Any, book: Any) -> tuple[Any, Any]:
    """Per-symbol state function: rows arrive sorted by offset, book is the OrderBook."""
    import pandas as pd

    from shoal.spark.matching import OrderBook, encode_trade

    symbol = key[0]
    if book is None:
        book = OrderBook()
    submit = book.submit
    trades: list[Any] = []
    for oid, side, price, qty in zip(
        rows["oid"].tolist(), rows["side"].tolist(), rows["price"].tolist(), rows["qty"].tolist(),
        strict=True,
    ):
        trades.extend(submit(symbol, oid, side, price, qty))
    if not trades:
        return None, book
    out = pd.DataFrame(
        {
            "symbol": [symbol] * len(trades),
            "trade_seq": [t[1] for t in trades],
            "body": [encode_trade(t) for t in trades],
        }
    )
    return out, book


def parsed_orders(df: Any) -> Any:
    """Log records of the orders queue -> (symbol, seq, oid, side, price, qty)."""
    return df.selectExpr(
        "group_id as symbol", "offset as seq", "split(cast(body as string), ',') as f"
    ).selectExpr(
        "symbol", "seq", "cast(f[0] as bigint) as oid", "f[1] as side",
        "cast(f[2] as bigint) as price", "cast(f[3] as bigint) as qty",
    )


def matched_trades(orders: Any) -> Any:
    from shoal.spark.state import apply_in_group_order

    return apply_in_group_order(orders, "symbol", match_group, TRADES_SCHEMA, seq_col="seq")


def log_source(spark: Any, args: argparse.Namespace, queue: str) -> Any:
    r = (
        spark.readStream.format("shoal")
        .option("url", args.http)
        .option("queue", queue)
        .option("maxRowsPerBatch", str(args.max_rows_per_batch))
    )
    if args.user is not None:
        r = r.option("user", args.user).option("password", args.password or "")
    return r.load()


def _trigger(writer: Any, args: argparse.Namespace) -> Any:
    if args.available_now:
        return writer.trigger(availableNow=True)
    return writer.trigger(processingTime=f"{args.trigger_ms} milliseconds")


def start_matching(spark: Any, args: argparse.Namespace) -> Any:
    trades = matched_trades(parsed_orders(log_source(spark, args, MATCH_QUEUE)))
    w = (
        trades.writeStream.format("shoal")
        .queryName("matching")
        .option("url", args.http)
        .option("destination", args.trades_destination)
        .option("groupColumn", "symbol")
        .option("seqColumn", "trade_seq")
        .option("bodyColumn", "body")
        .option("checkpointLocation", str(Path(args.checkpoint) / "matching"))
        .outputMode("append")
    )
    if args.user is not None:
        w = w.option("user", args.user).option("password", args.password or "")
    return _trigger(w, args).start()


def start_archive(spark: Any, args: argparse.Namespace, queue: str, name: str) -> Any:
    df = log_source(spark, args, queue).selectExpr(
        "group_id", "group_seq", "bucket", "offset", "timestamp", "cast(body as string) as body"
    )
    w = (
        df.writeStream.format("parquet")
        .queryName(name)
        .option("path", str(Path(args.output) / name.removeprefix("archive-")))
        .option("checkpointLocation", str(Path(args.checkpoint) / name))
        .outputMode("append")
    )
    return _trigger(w, args).start()


# --- run_matching ---------------------------------------------------------------------


def _fmt(n: float) -> str:
    return f"{n:,.0f}"


class Progress:
    """Prints one line every ``interval`` s: batches, rows/s, lags, generator."""

    def __init__(self, http: Any, queries: dict[str, Any], generated: list[int], total: int,
                 interval: float, out: Any = None) -> None:
        self.http = http
        self.queries = queries
        self.generated = generated
        self.total = total
        self.interval = interval
        self.out = out or sys.stdout
        self.t0 = time.monotonic()

    def line(self) -> str:
        parts = [f"[{time.monotonic() - self.t0:6.1f}s]"]
        if self.generated[0] >= 0:
            parts.append(f"published {_fmt(self.generated[0])}/{_fmt(self.total)}")
        for name, q in self.queries.items():
            p = q.lastProgress
            if p:
                parts.append(
                    f"{name}: batch {p['batchId']} +{_fmt(p['numInputRows'])} "
                    f"({_fmt(p.get('processedRowsPerSecond') or 0)}/s)"
                )
        try:
            lags = [f"{q}={_fmt(log_view(self.http, q)['lag'])}" for q in
                    (MATCH_QUEUE, ORDERS_ARCHIVE_QUEUE, TRADES_ARCHIVE_QUEUE)]
            parts.append("lag " + " ".join(lags))
        except Exception as exc:  # the broker may be restarting; progress goes on
            parts.append(f"broker: {exc}")
        return "  ".join(parts)

    def print(self) -> None:
        print(self.line(), file=self.out, flush=True)


def done(http: Any, expected: int) -> bool:
    """Every expected order matched and archived, and every trade archived."""
    match = log_view(http, MATCH_QUEUE)  # read first: trades are published before its commit
    if sum(match["end"].values()) < expected or match["lag"]:
        return False
    return not log_view(http, ORDERS_ARCHIVE_QUEUE)["lag"] and not log_view(
        http, TRADES_ARCHIVE_QUEUE
    )["lag"]


def _fail(exc: BaseException) -> int:
    print(f"shoal pipeline: {exc}", file=sys.stderr, flush=True)
    return 1


def run_matching(args: argparse.Namespace, spark: Any = None) -> int:
    """The matching pipeline; returns a process exit code (errors: one line, exit 1)."""
    from shoal.spark.client import BrokerHttpError, BrokerUnavailable

    try:
        return _run_matching(args, spark)
    except (BrokerUnavailable, BrokerHttpError, StompError, OSError) as exc:
        return _fail(exc)


def _run_matching(args: argparse.Namespace, spark: Any = None) -> int:
    from shoal.spark.datasource import make_commit_listener

    http = broker_http(args)
    for name, topic in ((MATCH_QUEUE, ORDERS_TOPIC), (ORDERS_ARCHIVE_QUEUE, ORDERS_TOPIC),
                        (TRADES_ARCHIVE_QUEUE, TRADES_TOPIC)):
        if ensure_log_queue(http, name, topic, args.buckets):
            print(f"created log queue {name} on topic {topic} ({args.buckets} buckets)", flush=True)
    already = log_end_total(http, ORDERS_ARCHIVE_QUEUE)
    generated = [-1]
    stop_gen = threading.Event()
    gen_error: list[BaseException] = []
    gen_thread = None
    if args.generate and already < args.orders:
        generated[0] = already
        print(f"publishing orders {already + 1}..{args.orders} for {args.symbols} symbols "
              f"to /topic/{ORDERS_TOPIC}", flush=True)

        def gen() -> None:
            try:
                generate_resuming(args, http, generated, stop_gen)
            except BaseException as exc:  # reported by the main loop
                gen_error.append(exc)

        gen_thread = threading.Thread(target=gen, name="shoal-generator", daemon=True)
        gen_thread.start()
    own_spark = spark is None
    if own_spark:
        spark = build_spark(args.master, "shoal-pipeline-matching",
                            shuffle_partitions=args.shuffle_partitions,
                            driver_memory=args.driver_memory)
    activate(spark)
    listener = make_commit_listener(
        spark, args.http,
        {"matching": MATCH_QUEUE, "archive-orders": ORDERS_ARCHIVE_QUEUE,
         "archive-trades": TRADES_ARCHIVE_QUEUE},
        user=args.user, password=args.password,
    )
    spark.streams.addListener(listener)
    starters = {"matching": lambda: start_matching(spark, args)}
    if args.archive:
        starters["archive-orders"] = lambda: start_archive(
            spark, args, ORDERS_ARCHIVE_QUEUE, "archive-orders")
        starters["archive-trades"] = lambda: start_archive(
            spark, args, TRADES_ARCHIVE_QUEUE, "archive-trades")
    queries = {name: start() for name, start in starters.items()}
    restarts = 0
    progress = Progress(http, queries, generated, args.orders, args.progress_interval)
    code = 0
    t_end = time.monotonic() + args.timeout if args.timeout else None
    try:
        next_line = time.monotonic()
        while True:
            time.sleep(0.2)
            if gen_error:
                raise gen_error[0]
            for name, q in list(queries.items()):
                if q.isActive or q.exception() is None:
                    continue
                # A failed query restarts from its checkpoint: the batch in flight
                # runs again, and the sink's (query id, batch id) dedup keeps it
                # exactly once. Typical cause: the broker restarted and lost the
                # batch's staged rows.
                restarts += 1
                reason = str(q.exception()).strip().splitlines()[0][:300]
                if restarts > args.max_restarts:
                    raise RuntimeError(f"query {name} failed {restarts} times; last: {reason}")
                print(f"query {name} failed ({reason}); restarting it from its checkpoint",
                      flush=True)
                time.sleep(1.0)
                queries[name] = starters[name]()
            if time.monotonic() >= next_line:
                progress.print()
                next_line = time.monotonic() + args.progress_interval
            if args.available_now and not any(q.isActive for q in queries.values()):
                break
            if not args.forever and (gen_thread is None or not gen_thread.is_alive()):
                try:
                    if done(http, args.orders if args.generate else 0):
                        break
                except Exception:  # broker restarting: check again later
                    pass
            if t_end is not None and time.monotonic() > t_end:
                print("timeout: stopping", flush=True)
                code = 2
                break
    except KeyboardInterrupt:
        print("interrupted: stopping the queries (the checkpoint keeps the progress)", flush=True)
        code = 130
    finally:
        stop_gen.set()
        for q in queries.values():
            try:
                q.stop()
            except Exception:
                pass
        spark.streams.removeListener(listener)
        if own_spark:
            spark.stop()
    progress.print()
    if code == 0:
        print("matching done: every order matched and archived", flush=True)
    return code


# --- run_audit ---------------------------------------------------------------------------


def _sequence_check(spark: Any, path: str, seq_col: str) -> dict[str, int]:
    """Per group: seq ordered by offset must be 1, 2, ..., n (no gap, no duplicate)."""
    df = spark.read.parquet(path)
    df.createOrReplaceTempView("a")
    row = spark.sql(
        f"""
        with s as (
          select group_id, {seq_col} as seq, bucket, offset,
                 lag({seq_col}) over (partition by group_id order by offset) as prev
          from a)
        select count(*) as rows,
               count(distinct group_id) as groups,
               sum(case when prev is not null and seq <= prev then 1 else 0 end) as out_of_order,
               (select count(*) from (select group_id, seq from s group by group_id, seq
                                      having count(*) > 1)) as duplicate_seqs,
               (select coalesce(sum(mx - cnt), 0) from (select group_id, max(seq) as mx,
                       count(distinct seq) as cnt from s group by group_id)) as gaps,
               (select count(*) from (select group_id from s group by group_id
                                      having min(seq) <> 1)) as bad_starts,
               (select count(*) from (select bucket, offset from s group by bucket, offset
                                      having count(*) > 1)) as duplicate_offsets
        from s
        """
    ).collect()[0]
    return {k: int(row[k] or 0) for k in row.asDict()}


def audit(spark: Any, output: str, expected_orders: int | None = None) -> dict[str, Any]:
    """Check the archive; returns a report with ``ok`` True or False."""
    from shoal.spark.matching import decode_order, decode_trade, reference_trades

    orders_path = str(Path(output) / "orders")
    trades_path = str(Path(output) / "trades")
    report: dict[str, Any] = {
        "orders": _sequence_check(spark, orders_path, "group_seq"),
        "trades": _sequence_check(spark, trades_path, "group_seq"),
    }
    orders_pdf = (
        spark.read.parquet(orders_path).select("group_id", "offset", "body").toPandas()
        .sort_values(["group_id", "offset"], kind="stable")
    )
    ref_input = []
    for sym, body in zip(orders_pdf["group_id"].tolist(), orders_pdf["body"].tolist(), strict=True):
        oid, side, price, qty = decode_order(body)
        ref_input.append((sym, oid, side, price, qty))
    reference = reference_trades(ref_input)
    trades_pdf = spark.read.parquet(trades_path).select("group_id", "group_seq", "body").toPandas()
    got = sorted(
        decode_trade(s, q, b)
        for s, q, b in zip(trades_pdf["group_id"].tolist(), trades_pdf["group_seq"].tolist(),
                           trades_pdf["body"].tolist(), strict=True)
    )
    ref_sorted = sorted(reference)
    got_set, ref_set = set(got), set(ref_sorted)
    report["reference_trades"] = len(ref_sorted)
    report["archived_trades"] = len(got)
    report["missing_trades"] = len(ref_set - got_set)
    report["extra_trades"] = len(got_set - ref_set) + (len(got) - len(got_set))
    report["trades_equal_reference"] = got == ref_sorted
    checks = [
        report["trades_equal_reference"],
        all(report[k][c] == 0 for k in ("orders", "trades")
            for c in ("out_of_order", "duplicate_seqs", "gaps", "bad_starts", "duplicate_offsets")),
    ]
    if expected_orders is not None:
        report["expected_orders"] = expected_orders
        checks.append(report["orders"]["rows"] == expected_orders)
    report["ok"] = all(checks)
    return report


def run_audit(args: argparse.Namespace, spark: Any = None) -> int:
    """The audit; exit code 0 when every check holds, 1 otherwise."""
    if not Path(args.output, "orders").exists():
        return _fail(f"no archive at {args.output} (run `shoal pipeline matching` first)")
    own = spark is None
    if own:
        spark = build_spark(args.master, "shoal-pipeline-audit",
                            shuffle_partitions=args.shuffle_partitions,
                            driver_memory=args.driver_memory)
    try:
        t0 = time.monotonic()
        report = audit(spark, args.output, args.orders)
        report["seconds"] = round(time.monotonic() - t0, 1)
    finally:
        if own:
            spark.stop()
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        o, t = report["orders"], report["trades"]
        print(f"orders: {_fmt(o['rows'])} in {o['groups']} groups; out of order {o['out_of_order']}, "
              f"duplicates {o['duplicate_seqs']}, gaps {o['gaps']}")
        print(f"trades: {_fmt(t['rows'])} in {t['groups']} groups; out of order {t['out_of_order']}, "
              f"duplicates {t['duplicate_seqs']}, gaps {t['gaps']}")
        print(f"reference matcher: {_fmt(report['reference_trades'])} trades; missing "
              f"{report['missing_trades']}, extra {report['extra_trades']}; "
              f"{'EQUAL' if report['trades_equal_reference'] else 'DIFFERENT'}")
        print("audit " + ("passed" if report["ok"] else "FAILED"))
    return 0 if report["ok"] else 1


# --- command line ------------------------------------------------------------------------


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--master", default=os.environ.get("SPARK_MASTER", "local[2]"),
                   help="Spark master: local[2] (default) or spark://host:7077")
    p.add_argument("--output", default="./data/pipeline/archive",
                   help="Parquet archive directory (orders/ and trades/)")
    p.add_argument("--orders", type=int, default=1_000_000, help="number of orders")
    p.add_argument("--shuffle-partitions", type=int, default=4,
                   help="state partitions; fixed for the life of a checkpoint")
    p.add_argument("--driver-memory", default="2g")


def add_pipeline_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``pipeline matching`` and ``pipeline audit`` on a subparsers object."""
    pipeline = subparsers.add_parser(
        "pipeline", help="the order-matching pipeline on Spark (matching, audit)",
        description="Spark pipelines over Shoal log queues (docs/spark.md).",
    )
    sub = pipeline.add_subparsers(dest="pipeline_command", metavar="JOB", required=True)

    m = sub.add_parser("matching", help="generate orders, match per symbol on Spark, publish trades")
    _common(m)
    m.add_argument("--http", default="http://127.0.0.1:8161", help="broker HTTP URL")
    m.add_argument("--stomp", default="127.0.0.1:61613", help="broker STOMP host:port")
    m.add_argument("--user", default=None)
    m.add_argument("--password", default=None)
    m.add_argument("--symbols", type=int, default=1000)
    m.add_argument("--seed", type=int, default=7)
    m.add_argument("--rate", type=float, default=0.0, help="orders/s for the generator; 0 = flat out")
    m.add_argument("--no-generate", dest="generate", action="store_false",
                   help="do not publish orders (resume or consume what is there)")
    m.add_argument("--no-archive", dest="archive", action="store_false",
                   help="run only the matching query")
    m.add_argument("--buckets", type=int, default=8, help="log-buckets of the log queues")
    m.add_argument("--checkpoint", default="./data/pipeline/checkpoint")
    m.add_argument("--trades-destination", default="/topic/" + TRADES_TOPIC)
    m.add_argument("--max-rows-per-batch", type=int, default=250_000)
    m.add_argument("--trigger-ms", type=int, default=0, help="processingTime trigger interval")
    m.add_argument("--available-now", action="store_true",
                   help="process what is there and stop (no generator wait)")
    m.add_argument("--forever", action="store_true", help="keep running until Ctrl-C")
    m.add_argument("--timeout", type=float, default=0.0, help="stop after this many seconds")
    m.add_argument("--progress-interval", type=float, default=2.0)
    m.add_argument("--max-restarts", type=int, default=5,
                   help="restart a failed query from its checkpoint this many times")
    m.set_defaults(func=run_matching)

    a = sub.add_parser("audit", help="verify the Parquet archive: order, exactly-once, reference")
    _common(a)
    a.set_defaults(orders=None)
    a.add_argument("--json", action="store_true", help="print the report as JSON")
    a.set_defaults(func=run_audit)
    return pipeline


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m shoal.spark.pipeline")
    subparsers = parser.add_subparsers(dest="command", required=True)
    add_pipeline_parser(subparsers)
    args = parser.parse_args(["pipeline", *(argv if argv is not None else sys.argv[1:])])
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())


__all__ = [
    "add_pipeline_parser",
    "audit",
    "build_spark",
    "publish_orders",
    "run_audit",
    "run_matching",
]
