"""The Spark side of the matching pipeline: the session, the matching job, the archive jobs.

``build_spark`` sets a session up as docs/spark.md recommends; ``start_matching``
and ``start_archive`` start the three streaming queries of ``shoal pipeline
matching`` (log queue -> per-symbol matching -> trades topic; log queue ->
Parquet, twice).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

# The pipeline's topology: orders go to a topic, three log queues feed the three queries.
ORDERS_TOPIC = "orders"
TRADES_TOPIC = "trades"
MATCH_QUEUE = "orders.match"
ORDERS_ARCHIVE_QUEUE = "orders.archive"
TRADES_ARCHIVE_QUEUE = "trades.archive"
LOG_QUEUES = {
    MATCH_QUEUE: ORDERS_TOPIC,
    ORDERS_ARCHIVE_QUEUE: ORDERS_TOPIC,
    TRADES_ARCHIVE_QUEUE: TRADES_TOPIC,
}
TRADES_SCHEMA = "symbol string, trade_seq bigint, body string"


def package_zip(directory: str | Path) -> str:
    """A zip of the ``shoal`` package in ``directory``, for ``addPyFile`` (cluster executors)."""
    import shoal

    root = Path(shoal.__file__).resolve().parent
    out = Path(directory) / "shoal-pyfiles.zip"
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for p in root.rglob("*.py"):
            z.write(p, Path("shoal") / p.relative_to(root))
    return str(out)


def ship_package(spark: Any) -> str:
    """Send the ``shoal`` package to every executor; returns the zip's path.

    The zip is served to executors from where it lies for as long as the
    session lives, so it goes inside the session's own temporary directory,
    which Spark deletes when it shuts down: nothing is left behind.
    """
    from pyspark import SparkFiles

    directory = Path(SparkFiles.getRootDirectory()) / "shoal-package"
    directory.mkdir(parents=True, exist_ok=True)
    path = package_zip(directory)
    spark.sparkContext.addPyFile(path)
    return path


class SetupError(RuntimeError):
    """Spark cannot run the connector as set up; the message says what to install where."""


# Worker Pythons seen to import shoal (register() runs on every activation).
_PYTHONS_WITH_SHOAL: set[str] = set()


def _worker_python(python: str) -> str:
    """How to name the worker's Python in an error: by the variable that sets it."""
    if "PYSPARK_PYTHON" not in os.environ:
        return f"{python} (Spark's worker Python: PYSPARK_PYTHON is not set)"
    return f"PYSPARK_PYTHON={python}"


def check_python(python: str) -> None:
    """Fail early, in one line, when ``PYSPARK_PYTHON`` cannot import shoal.

    Spark runs the data source's driver-side workers (options, offsets,
    commits) and the executors' workers with that interpreter (``python3``
    from the PATH when PYSPARK_PYTHON is not set, which is not a virtual
    environment's unless it is activated); without ``shoal`` they fail deep
    inside a query with ``ModuleNotFoundError``.
    """
    if python in _PYTHONS_WITH_SHOAL or Path(python).resolve() == Path(sys.executable).resolve():
        return
    named = _worker_python(python)
    try:
        done = subprocess.run(
            [python, "-c", "import shoal.spark.datasource"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    except OSError as exc:
        raise SetupError(
            f"{named} cannot be run ({exc.strerror}); point PYSPARK_PYTHON at "
            "a Python 3.11+ with shoal[spark] installed"
        ) from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["exit code " + str(done.returncode)])[-1]
        raise SetupError(
            f"{named} cannot import shoal.spark ({last}); Spark runs the data "
            f"source with it: pip install 'shoal[spark]' into that Python (on the driver and "
            f"on every worker), or set PYSPARK_PYTHON to a Python that has it, e.g. {sys.executable}"
        )
    _PYTHONS_WITH_SHOAL.add(python)


def build_spark(
    master: str = "local[2]",
    app: str = "shoal-pipeline",
    *,
    shuffle_partitions: int = 4,
    driver_memory: str = "2g",
    ship_code: bool | None = None,
    conf: dict[str, str] | None = None,
) -> Any:
    """A SparkSession set up as docs/spark.md recommends; registers format("shoal").

    A ``local`` master, or a standalone master on loopback, keeps the driver
    on 127.0.0.1 too (Spark otherwise picks another interface).
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    check_python(os.environ["PYSPARK_PYTHON"])
    local = master.startswith("local")
    loopback = local or urlsplit(master).hostname in ("127.0.0.1", "localhost")
    if loopback:
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
    if loopback:
        b = b.config("spark.driver.host", "127.0.0.1").config(
            "spark.driver.bindAddress", "127.0.0.1"
        )
    for k, v in (conf or {}).items():
        b = b.config(k, v)
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    from shoal.spark import register

    register(spark)
    if ship_code if ship_code is not None else not local:
        ship_package(spark)
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


def match_group(key: tuple[Any, ...], rows: Any, book: Any) -> tuple[Any, Any]:
    """Per-symbol state function: rows arrive sorted by offset, book is the OrderBook."""
    import pandas as pd

    from shoal.spark.matching import OrderBook, encode_trade

    symbol = key[0]
    if book is None:
        book = OrderBook()
    submit = book.submit
    trades: list[Any] = []
    for oid, side, price, qty in zip(
        rows["oid"].tolist(),
        rows["side"].tolist(),
        rows["price"].tolist(),
        rows["qty"].tolist(),
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
        "symbol",
        "seq",
        "cast(f[0] as bigint) as oid",
        "f[1] as side",
        "cast(f[2] as bigint) as price",
        "cast(f[3] as bigint) as qty",
    )


def matched_trades(orders: Any) -> Any:
    from shoal.spark.group_order import apply_in_group_order

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


def discard_unfinished_writes(checkpoint: Path) -> list[Path]:
    """Remove what a killed driver left of Spark's atomic writes in a query's
    offset and commit logs: ``.N.<uuid>.tmp`` files (and their ``.crc``) that
    were never renamed into place, so never part of the log. Spark 4 counts
    them as files in ``offsets/`` and refuses to plan batch 0 beside them
    (STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY). Only while no query runs on
    ``checkpoint``. Returns what it removed."""
    removed = []
    for log in ("offsets", "commits"):
        folder = checkpoint / log
        if not folder.is_dir():
            continue
        for path in folder.iterdir():
            name = path.name
            if name.startswith(".") and name.endswith((".tmp", ".tmp.crc")):
                path.unlink(missing_ok=True)
                removed.append(path)
    return removed


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
    discard_unfinished_writes(Path(args.checkpoint) / "matching")
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
    discard_unfinished_writes(Path(args.checkpoint) / name)
    return _trigger(w, args).start()
