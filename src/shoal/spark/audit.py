"""``shoal pipeline audit``: a batch Spark job over the pipeline's Parquet archive.

Per group: order, no gap and no duplicate for orders (``JMSXGroupSeq``) and
trades (``trade_seq``); and the trades equal the plain-Python reference
matcher run over the archived orders.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from shoal.spark.jobs import build_spark
from shoal.spark.progress import fmt


def _fail(message: str) -> int:
    import sys

    print(f"shoal pipeline: {message}", file=sys.stderr, flush=True)
    return 1


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
        spark.read.parquet(orders_path)
        .select("group_id", "offset", "body")
        .toPandas()
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
        for s, q, b in zip(
            trades_pdf["group_id"].tolist(),
            trades_pdf["group_seq"].tolist(),
            trades_pdf["body"].tolist(),
            strict=True,
        )
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
        all(
            report[k][c] == 0
            for k in ("orders", "trades")
            for c in ("out_of_order", "duplicate_seqs", "gaps", "bad_starts", "duplicate_offsets")
        ),
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
        spark = build_spark(
            args.master,
            "shoal-pipeline-audit",
            shuffle_partitions=args.shuffle_partitions,
            driver_memory=args.driver_memory,
        )
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
        print(
            f"orders: {fmt(o['rows'])} in {o['groups']} groups; out of order {o['out_of_order']}, "
            f"duplicates {o['duplicate_seqs']}, gaps {o['gaps']}"
        )
        print(
            f"trades: {fmt(t['rows'])} in {t['groups']} groups; out of order {t['out_of_order']}, "
            f"duplicates {t['duplicate_seqs']}, gaps {t['gaps']}"
        )
        print(
            f"reference matcher: {fmt(report['reference_trades'])} trades; missing "
            f"{report['missing_trades']}, extra {report['extra_trades']}; "
            f"{'EQUAL' if report['trades_equal_reference'] else 'DIFFERENT'}"
        )
        print("audit " + ("passed" if report["ok"] else "FAILED"))
    return 0 if report["ok"] else 1
