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

This module runs the pipeline and parses its command line; the parts live
beside it: ``generator`` (the orders), ``jobs`` (the Spark session and
queries), ``progress`` (what is printed) and ``audit``.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

from shoal.client import ClientError
from shoal.spark import explain
from shoal.spark.audit import audit, run_audit
from shoal.spark.client import BrokerHttp, ensure_log_queue, log_end_total
from shoal.spark.generator import generate_resuming, publish_orders
from shoal.spark.jobs import (
    LOG_QUEUES,
    ORDERS_ARCHIVE_QUEUE,
    ORDERS_TOPIC,
    TRADES_ARCHIVE_QUEUE,
    TRADES_TOPIC,
    SetupError,
    activate,
    build_spark,
    start_archive,
    start_matching,
)
from shoal.spark.progress import Progress, done

if TYPE_CHECKING:
    from collections.abc import Callable


class PipelineError(RuntimeError):
    """The pipeline gave up (a query kept failing); the message is the whole story."""


def broker_http(args: argparse.Namespace) -> BrokerHttp:
    return BrokerHttp(args.http, user=args.user, password=args.password, retry_seconds=30.0)


def _fail(exc: BaseException) -> int:
    print(f"shoal pipeline: {exc}", file=sys.stderr, flush=True)
    return 1


def run_matching(args: argparse.Namespace, spark: Any = None) -> int:
    """The matching pipeline; returns a process exit code (errors: one line, exit 1)."""
    from shoal.spark.client import BrokerHttpError, BrokerUnavailable

    try:
        return _run_matching(args, spark)
    except (
        BrokerUnavailable,
        BrokerHttpError,
        ClientError,
        OSError,
        PipelineError,
        SetupError,
    ) as exc:
        return _fail(exc)


def _run_matching(args: argparse.Namespace, spark: Any = None) -> int:
    started = time.monotonic()  # the progress clock: Spark's start-up is part of the run
    http = broker_http(args)
    for name, topic in LOG_QUEUES.items():
        if ensure_log_queue(http, name, topic, args.buckets):
            print(f"created log queue {name} on topic {topic} ({args.buckets} buckets)", flush=True)
    already = log_end_total(http, ORDERS_ARCHIVE_QUEUE)
    generated = [-1]
    stop_gen = threading.Event()
    gen_error: list[BaseException] = []
    gen_thread = None
    if args.generate and already < args.orders:
        generated[0] = already
        print(
            f"publishing orders {already + 1}..{args.orders} for {args.symbols} symbols "
            f"to /topic/{ORDERS_TOPIC}",
            flush=True,
        )

        def gen() -> None:
            try:
                generate_resuming(args, http, generated, stop_gen)
            except BaseException as exc:  # reported by the main loop
                gen_error.append(exc)

        gen_thread = threading.Thread(target=gen, name="shoal-generator", daemon=True)
        gen_thread.start()
    own_spark = spark is None
    if own_spark:
        spark = build_spark(
            args.master,
            "shoal-pipeline-matching",
            shuffle_partitions=args.shuffle_partitions,
            driver_memory=args.driver_memory,
        )
    activate(spark)
    starters: dict[str, Callable[[], Any]] = {"matching": lambda: start_matching(spark, args)}
    if args.archive:
        starters["archive-orders"] = lambda: start_archive(
            spark, args, ORDERS_ARCHIVE_QUEUE, "archive-orders"
        )
        starters["archive-trades"] = lambda: start_archive(
            spark, args, TRADES_ARCHIVE_QUEUE, "archive-trades"
        )
    queries = {name: start() for name, start in starters.items()}
    restarts = dict.fromkeys(starters, 0)  # per query: one flaky query does not use up the others'
    progress = Progress(
        http, queries, generated, args.orders, args.progress_interval, started=started
    )
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
                restarts[name] += 1
                reason = explain(q.exception())
                if restarts[name] > args.max_restarts:
                    raise PipelineError(
                        f"query {name} failed {restarts[name]} times; last: {reason}"
                    )
                print(
                    f"query {name} failed ({reason}); restarting it from its checkpoint", flush=True
                )
                time.sleep(1.0)
                queries[name] = starters[name]()
            progress.observe()
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
        progress.observe()
        if own_spark:
            spark.stop()
    progress.print()
    progress.print_totals()
    if code == 0:
        print("matching done: every order matched and archived", flush=True)
    return code


# --- command line ------------------------------------------------------------------------


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--master",
        default=os.environ.get("SPARK_MASTER", "local[2]"),
        help="Spark master: local[2] (default) or spark://host:7077",
    )
    p.add_argument(
        "--output",
        default="./data/pipeline/archive",
        help="Parquet archive directory (orders/ and trades/)",
    )
    p.add_argument("--orders", type=int, default=1_000_000, help="number of orders")
    p.add_argument(
        "--shuffle-partitions",
        type=int,
        default=4,
        help="state partitions; fixed for the life of a checkpoint",
    )
    p.add_argument("--driver-memory", default="2g")


def add_pipeline_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``pipeline matching`` and ``pipeline audit`` on a subparsers object."""
    pipeline: argparse.ArgumentParser = subparsers.add_parser(
        "pipeline",
        help="the order-matching pipeline on Spark (matching, audit)",
        description="Spark pipelines over Shoal log queues (docs/spark.md).",
    )
    sub = pipeline.add_subparsers(dest="pipeline_command", metavar="JOB", required=True)

    m = sub.add_parser(
        "matching", help="generate orders, match per symbol on Spark, publish trades"
    )
    _common(m)
    m.add_argument("--http", default="http://127.0.0.1:8161", help="broker HTTP URL")
    m.add_argument("--stomp", default="127.0.0.1:61613", help="broker STOMP host:port")
    m.add_argument("--user", default=None)
    m.add_argument("--password", default=None)
    m.add_argument("--symbols", type=int, default=1000)
    m.add_argument("--seed", type=int, default=7)
    m.add_argument(
        "--rate", type=float, default=0.0, help="orders/s for the generator; 0 = flat out"
    )
    m.add_argument(
        "--no-generate",
        dest="generate",
        action="store_false",
        help="do not publish orders (resume or consume what is there)",
    )
    m.add_argument(
        "--no-archive", dest="archive", action="store_false", help="run only the matching query"
    )
    m.add_argument("--buckets", type=int, default=8, help="log-buckets of the log queues")
    m.add_argument("--checkpoint", default="./data/pipeline/checkpoint")
    m.add_argument("--trades-destination", default="/topic/" + TRADES_TOPIC)
    m.add_argument("--max-rows-per-batch", type=int, default=250_000)
    m.add_argument("--trigger-ms", type=int, default=0, help="processingTime trigger interval")
    m.add_argument(
        "--available-now",
        action="store_true",
        help="process what is there and stop (no generator wait)",
    )
    m.add_argument("--forever", action="store_true", help="keep running until Ctrl-C")
    m.add_argument("--timeout", type=float, default=0.0, help="stop after this many seconds")
    m.add_argument("--progress-interval", type=float, default=2.0)
    m.add_argument(
        "--max-restarts",
        type=int,
        default=5,
        help="restart each failed query from its checkpoint this many times",
    )
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
