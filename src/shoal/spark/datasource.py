"""The ``shoal`` Spark data source: a log-queue stream reader and an exactly-once sink.

Source::

    shoal.spark.register(spark)  # not spark.dataSource.register: see shoal.spark.register
    df = (spark.readStream.format("shoal")
          .option("url", "http://127.0.0.1:8161")        # the broker's HTTP port
          .option("queue", "orders")                     # a log queue
          .option("maxRowsPerBatch", 250_000)            # optional: ReadMaxRows
          .load())

Columns: ``group_id string, group_seq bigint, bucket int, offset bigint,
timestamp timestamp, headers map<string,string>, body binary, queue string``.
Source offsets are ``{"<bucket>": <next offset>}`` for one queue and
``{"<queue>": {"<bucket>": <next offset>}}`` for a list (``queue`` "a,b") or a
pattern (``queuePattern``). Within a group, ``offset`` orders the messages (a
group lives in one bucket of one queue).

Sink::

    (trades.writeStream.format("shoal")
       .option("url", "http://127.0.0.1:8161")
       .option("destination", "/queue/trades")
       .option("groupColumn", "symbol")                  # names the group id column
       .option("checkpointLocation", "...").start())

Exactly once: each task stages its rows in the broker under fresh handles,
and the driver-side ``commit(messages, batchId)`` publishes them atomically,
once per (query id, batch id). ``abort`` discards them; the broker collects
stagings nobody publishes.

Batch: ``spark.read.format("shoal")`` reads a fixed offset range
(``startingOffsets``/``endingOffsets``) and never commits;
``df.write.format("shoal").mode("append")`` stages and publishes the same
way, once per (``sinkId``, ``batchId``). Options are checked by
:mod:`shoal.spark.options`, a read's at ``load()``.

Option keys arrive lower-cased from Spark; every lookup here is lower-case.
See docs/spark.md for every option.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from shoal.spark.client import BrokerHttp, BrokerHttpError, log_path
from shoal.spark.options import ShoalOptionError, validate_read, validate_write

NAME = "shoal"
ARROW_STREAM = "application/vnd.apache.arrow.stream"

SCHEMA = StructType(
    [
        StructField("group_id", StringType(), True),
        StructField("group_seq", LongType(), True),
        StructField("bucket", IntegerType(), True),
        StructField("offset", LongType(), True),
        StructField("timestamp", TimestampType(), True),
        StructField("headers", MapType(StringType(), StringType(), True), True),
        StructField("body", BinaryType(), True),
        StructField("queue", StringType(), True),
    ]
)
SCHEMA_DDL = (
    "group_id string, group_seq bigint, bucket int, offset bigint, timestamp timestamp, "
    "headers map<string,string>, body binary, queue string"
)

DEFAULT_URL = "http://127.0.0.1:8161"


def _opt(options: Any, key: str, default: Any = None) -> Any:
    """Option lookup; Spark lower-cases option keys, so look up lower case."""
    opts = {str(k).lower(): v for k, v in dict(options).items()}
    value = opts.get(key.lower())
    return default if value is None or value == "" else value


def _int_opt(options: Any, key: str, default: int | None, minimum: int = 0) -> int | None:
    raw = _opt(options, key)
    if raw is None:
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise ShoalOptionError(f"shoal: option {key!r} must be an integer, not {raw!r}") from None
    if value < minimum:
        raise ShoalOptionError(f"shoal: option {key!r} must be at least {minimum}, not {value}")
    return value


def _float_opt(options: Any, key: str, default: float) -> float:
    raw = _opt(options, key)
    if raw is None:
        return default
    try:
        return float(raw)
    except ValueError:
        raise ShoalOptionError(f"shoal: option {key!r} must be a number, not {raw!r}") from None


def _bool_opt(options: Any, key: str, default: bool) -> bool:
    raw = _opt(options, key)
    if raw is None:
        return default
    low = str(raw).strip().lower()
    if low in ("true", "1", "yes"):
        return True
    if low in ("false", "0", "no"):
        return False
    raise ShoalOptionError(f"shoal: option {key!r} must be true or false, not {raw!r}")


def http_from_options(options: Any) -> BrokerHttp:
    return BrokerHttp(
        str(_opt(options, "url", DEFAULT_URL)),
        user=_opt(options, "user"),
        password=_opt(options, "password"),
        token=_opt(options, "token"),
        timeout=_float_opt(options, "timeout", 120.0),
        retry_seconds=_float_opt(options, "retrySeconds", 60.0),
    )


def spark_arrow_schema() -> Any:
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(SCHEMA, timezone="UTC")


# --- the data source ---------------------------------------------------------------


class ShoalDataSource(DataSource):
    """``format("shoal")``: readers over a log queue, exactly-once writers.

    ``schema()`` runs at ``load()``, so a read's options are checked there:
    a wrong option fails the ``load()`` call, not the query's start.
    """

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        # Spark calls this at load(), for reads only: check every option now.
        LogRangeReader(validate_read(self.options))
        return SCHEMA

    def streamReader(self, schema: StructType) -> ShoalStreamReader:
        return ShoalStreamReader(validate_read(self.options))

    def reader(self, schema: StructType) -> ShoalBatchReader:
        return ShoalBatchReader(validate_read(self.options))

    def streamWriter(self, schema: StructType, overwrite: bool) -> ShoalStreamWriter:
        return ShoalStreamWriter(validate_write(self.options), schema)

    def writer(self, schema: StructType, overwrite: bool) -> ShoalBatchWriter:
        if overwrite:
            raise ShoalOptionError(
                'shoal sink: a destination cannot be overwritten; use .mode("append")'
            )
        return ShoalBatchWriter(validate_write(self.options), schema)


# --- source ------------------------------------------------------------------------------


class ShoalPartition(InputPartition):
    """Offsets ``[start, end)`` of one bucket of one log queue."""

    def __init__(self, queue: str, bucket: int, start: int, end: int) -> None:
        super().__init__((queue, bucket, start, end))
        self.queue = queue
        self.bucket = bucket
        self.start = start
        self.end = end

    def __repr__(self) -> str:
        return f"ShoalPartition({self.queue!r}, bucket={self.bucket}, [{self.start}, {self.end}))"


# Offsets inside the reader: (queue, bucket) -> offset. The checkpoint holds
# {"bucket": offset} for one queue (as before several were possible) and
# {"queue": {"bucket": offset}} for a list or a pattern (Kafka's shape).
Key = tuple[str, str]


def _order(key: Key | str) -> tuple[str, int]:
    """(queue, bucket) keys in queue, then bucket order (a bare bucket: its own queue)."""
    return (key[0], int(key[1])) if isinstance(key, tuple) else ("", int(key))


def plan_end(start: dict[Any, int], ends: dict[Any, int], max_rows: int | None) -> dict[Any, int]:
    """The next end offsets: all available, or at most ``max_rows`` spread fairly over buckets."""
    out = {b: max(int(start.get(b, 0)), int(e)) for b, e in ends.items()}
    for b, s in start.items():
        out.setdefault(b, int(s))
    if max_rows is None:
        return out
    avail = {b: out[b] - int(start.get(b, 0)) for b in out}
    if sum(avail.values()) <= max_rows:
        return out
    alloc = dict.fromkeys(out, 0)
    remaining = max_rows
    active = sorted((b for b in out if avail[b] > 0), key=_order)
    while remaining > 0 and active:
        share = max(1, remaining // len(active))
        for b in list(active):
            take = min(share, avail[b] - alloc[b], remaining)
            alloc[b] += take
            remaining -= take
            if alloc[b] >= avail[b]:
                active.remove(b)
            if remaining == 0:
                break
    return {b: int(start.get(b, 0)) + alloc[b] for b in out}


def ranges(start: dict[Key, int], end: dict[Key, int], rows: int) -> list[ShoalPartition]:
    """Partitions over ``[start, end)`` per bucket, each at most ``rows`` long (0: one per bucket)."""
    parts = []
    for key in sorted(end, key=_order):
        s, e = int(start.get(key, 0)), int(end[key])
        step = rows or max(1, e - s)
        while s < e:
            parts.append(ShoalPartition(key[0], int(key[1]), s, min(e, s + step)))
            s += step
    return parts


class LogRangeReader:
    """What stream and batch reads share: options, the broker view, reading a range.

    ``read`` runs on the executors from a pickled copy, so the reader keeps
    no sockets (the HTTP client opens its connections lazily, per process).
    """

    def __init__(self, options: dict[str, str]) -> None:
        pattern = options.get("queuepattern")
        self.pattern = re.compile(pattern) if pattern else None
        self.queues = [] if pattern else [q.strip() for q in str(options["queue"]).split(",")]
        # Kafka's offset shape ({"queue": {"bucket": o}}) for a list or a pattern
        self.nested = self.pattern is not None or len(self.queues) > 1
        self.queue = pattern or ",".join(self.queues)  # for messages
        self.http = http_from_options(options)
        self.fetch_rows = _int_opt(options, "fetchRows", 50_000, minimum=1) or 50_000
        self.partition_rows = _int_opt(options, "partitionRows", 200_000, minimum=0) or 0
        self.prefetch = _bool_opt(options, "prefetch", True)
        self.fail_on_data_loss = _bool_opt(options, "failOnDataLoss", True)
        self.starting = str(options.get("startingoffsets", "earliest"))
        self.starting_ms = _int_opt(options, "startingTimestamp", None, minimum=0)
        self.no_match = str(options.get("startingoffsetsbytimestampstrategy", "error"))

    def _views(self) -> dict[str, dict[str, Any]]:
        """queue -> its view (start, end per bucket); a pattern matches the log queues now."""
        if self.pattern is None:
            return {q: self.http.get_json(log_path(q)) for q in self.queues}
        logs = self.http.get_json("/api/logs")["logs"]
        return {v["name"]: v for v in logs if self.pattern.fullmatch(v["name"])}

    @staticmethod
    def _flat(views: dict[str, dict[str, Any]], which: str) -> dict[Key, int]:
        return {(q, str(b)): int(o) for q, v in views.items() for b, o in v[which].items()}

    def to_spark(self, offsets: dict[Key, int]) -> dict[str, Any]:
        if not self.nested:
            return {b: o for (_, b), o in offsets.items()}
        out: dict[str, dict[str, int]] = {}
        for (q, b), o in sorted(offsets.items(), key=lambda kv: _order(kv[0])):
            out.setdefault(q, {})[b] = o
        return out

    def from_spark(self, offsets: dict[str, Any]) -> dict[Key, int]:
        if not self.nested:
            return {(self.queues[0], str(b)): int(o) for b, o in offsets.items()}
        return {(q, str(b)): int(o) for q, bs in offsets.items() for b, o in bs.items()}

    def _offsets(self, views: dict[str, dict[str, Any]], spec: str, default: str) -> dict[Key, int]:
        """``earliest``/``latest``/JSON -> offsets for every bucket (unnamed ones: ``default``)."""
        if spec in ("earliest", "latest"):
            return self._flat(views, "start" if spec == "earliest" else "end")
        raw = json.loads(spec)
        if raw and self.nested != all(isinstance(v, dict) for v in raw.values()):
            shape = (
                '{"<queue>": {"<bucket>": <offset>}}' if self.nested else '{"<bucket>": <offset>}'
            )
            raise ShoalOptionError(
                f"shoal source: offsets for {self.queue!r} take the shape {shape}"
            )
        given = self.from_spark(raw)
        for q in {q for q, _ in given}:
            if q not in views:
                raise ShoalOptionError(
                    f"shoal source: offsets name queue {q!r}, which {self.queue!r} does not read"
                )
        out = self._flat(views, default)
        unknown = sorted(set(given) - set(out), key=_order)
        if unknown:
            q = unknown[0][0]
            raise ShoalOptionError(
                f"shoal source: log queue {q!r} has buckets 0..{len(views[q]['start']) - 1}, "
                f"not {', '.join(b for u, b in unknown if u == q)}"
            )
        return {**out, **given}

    def _first_offsets(self, views: dict[str, dict[str, Any]]) -> dict[Key, int]:
        """Where a read starts: ``startingTimestamp`` if given, else ``startingOffsets``."""
        if self.starting_ms is None:
            return self._offsets(views, self.starting, "start")
        start, end = self._flat(views, "start"), self._flat(views, "end")
        out = {}
        for key in sorted(start, key=_order):
            found = self._seek(key, start[key], end[key], self.starting_ms)
            if found == end[key] and self.no_match == "error":
                raise RuntimeError(
                    f"shoal source: log queue {key[0]!r} bucket {key[1]} has no message at or "
                    f"after startingTimestamp {self.starting_ms}; set option("
                    '"startingOffsetsByTimestampStrategy", "latest") to start at its end'
                )
            out[key] = found
        return out

    def _seek(self, key: Key, lo: int, hi: int, ms: int) -> int:
        """The first offset in ``[lo, hi)`` whose timestamp is >= ``ms`` (``hi``: none).

        A bisection over one-row reads: a bucket's timestamps are its append
        times, which do not go down.
        """
        while lo < hi:
            mid = (lo + hi) // 2
            ts = self._fetch(key[0], int(key[1]), (mid, mid + 1)).column("timestamp")[0]
            if ts.value < ms:  # milliseconds since the epoch
                lo = mid + 1
            else:
                hi = mid
        return lo

    def _kept(self, start: dict[Key, int], views: dict[str, dict[str, Any]]) -> dict[Key, int]:
        """``start``, checked against what the broker still keeps (``failOnDataLoss``)."""
        kept = self._flat(views, "start")
        lost = {k: (int(s), kept[k]) for k, s in start.items() if k in kept and int(s) < kept[k]}
        if not lost:
            return start
        if self.fail_on_data_loss:
            where = ", ".join(
                f"{q!r} bucket {b} [{s}, {k})"
                for (q, b), (s, k) in sorted(lost.items(), key=lambda i: _order(i[0]))
            )
            raise RuntimeError(
                f"shoal source: log queue {where} no longer kept: they were "
                "committed past (another reader of this queue, or a commit by hand); set "
                'option("failOnDataLoss", "false") to skip them'
            )
        return {k: max(int(s), kept.get(k, 0)) for k, s in start.items()}

    def read(self, partition: ShoalPartition) -> Iterator[Any]:
        """Fetch ``[start, end)`` in ``fetchRows`` chunks; the next chunk is fetched
        while Spark converts the current one."""
        from concurrent.futures import ThreadPoolExecutor

        if not isinstance(partition, ShoalPartition):
            return  # an empty batch read: Spark reads one InputPartition(None)
        schema = spark_arrow_schema()
        q, b = partition.queue, partition.bucket
        step = self.fetch_rows
        chunks = [
            (s, min(s + step, partition.end)) for s in range(partition.start, partition.end, step)
        ]
        if not chunks:
            return
        if not self.prefetch or len(chunks) == 1:
            for chunk in chunks:
                yield from self._check(q, b, chunk, self._fetch(q, b, chunk), schema)
            return
        with ThreadPoolExecutor(1, thread_name_prefix="shoal-fetch") as pool:
            pending = pool.submit(self._fetch, q, b, chunks[0])
            for i, chunk in enumerate(chunks):
                table = pending.result()
                if i + 1 < len(chunks):
                    pending = pool.submit(self._fetch, q, b, chunks[i + 1])
                yield from self._check(q, b, chunk, table, schema)

    def _fetch(self, queue: str, bucket: int, chunk: tuple[int, int]) -> Any:
        import pyarrow as pa

        start, end = chunk
        _, _, data = self.http.request(
            "GET",
            f"{log_path(queue)}/{bucket}",
            query={"start": start, "end": end, "max_rows": end - start},
        )
        return pa.ipc.open_stream(data).read_all()

    def _check(
        self, queue: str, bucket: int, chunk: tuple[int, int], table: Any, schema: Any
    ) -> Iterator[Any]:
        start, end = chunk
        if table.num_rows != end - start:
            raise RuntimeError(
                f"shoal source: log queue {queue!r} bucket {bucket}: asked for offsets "
                f"[{start}, {end}), the broker has {table.num_rows} of them"
            )
        import pyarrow as pa

        broker_columns = pa.schema(list(schema)[:-1])  # all but queue, which we add
        for batch in table.to_batches():
            name = pa.repeat(pa.scalar(queue, pa.string()), batch.num_rows)
            cast = batch.cast(broker_columns)
            yield pa.RecordBatch.from_arrays([*cast.columns, name], schema=schema)


class ShoalBatchReader(LogRangeReader, DataSourceReader):  # type: ignore[misc]  # read() takes our own partitions
    """``spark.read.format("shoal")``: the offsets ``[startingOffsets, endingOffsets)``.

    A batch read never commits: it leaves the queue as it found it.
    """

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.ending = str(options.get("endingoffsets", "latest"))
        self._parts: list[ShoalPartition] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_parts": None}

    def partitions(self) -> list[ShoalPartition]:
        if self._parts is None:
            views = self._views()
            start = self._kept(self._first_offsets(views), views)
            end = self._offsets(views, self.ending, "end")
            past_end = self._flat(views, "end")
            for (q, b), e in end.items():
                if e > past_end[q, b]:
                    raise ShoalOptionError(
                        f"shoal source: endingOffsets bucket {b} is {e}, past the end of "
                        f"log queue {q!r} ({past_end[q, b]})"
                    )
                if e < start[q, b]:
                    raise ShoalOptionError(
                        f"shoal source: endingOffsets bucket {b} ({e}) of {q!r} is below "
                        f"startingOffsets ({start[q, b]})"
                    )
            self._parts = ranges(start, end, self.partition_rows)
        return list(self._parts)


class ShoalStreamReader(LogRangeReader, DataSourceStreamReader, SupportsTriggerAvailableNow):  # type: ignore[misc]  # as above
    """Reads log queues as a stream; offsets ``{"bucket": next offset}`` (one queue)
    or ``{"queue": {"bucket": next offset}}`` (a list or a pattern).

    ``initialOffset``/``latestOffset``/``partitions``/``commit`` run in one
    long-lived driver-side Python process per query; ``read`` runs on the
    executors.

    Commits: Spark calls ``commit(end)`` of batch N only when it plans a
    later batch with data, which would keep the broker a batch behind (for
    ever when idle). But Spark asks ``latestOffset(start)`` on every trigger,
    idle or not, and passes as ``start`` the end of the last batch, which it
    has finished (its commit-log entry is written) before it plans the next.
    So the reader commits ``start`` there, once per new value.

    A pattern is matched again on every trigger: a new log queue is read
    from its earliest offset, as Kafka does with a new topic.
    """

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.max_rows = _int_opt(options, "maxRowsPerBatch", None, minimum=1)
        self.poll_interval = _float_opt(options, "pollInterval", 0.1)
        self.commit_enabled = _bool_opt(options, "commit", True)
        if "endingoffsets" in options:
            raise ShoalOptionError(
                "shoal source: endingOffsets is for batch reads "
                '(spark.read.format("shoal")), not for streams'
            )
        self._view_cache: dict[str, dict[str, Any]] | None = None
        self._view_at = 0.0
        self._target: dict[Key, int] | None = None
        self._committed: dict[Key, int] | None = None

    # picklable: only plain fields; drop the driver-side caches
    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_view_cache": None, "_target": None, "_committed": None}

    def _cached_views(self, fresh: bool = False) -> dict[str, dict[str, Any]]:
        now = time.monotonic()
        if fresh or self._view_cache is None or now - self._view_at >= self.poll_interval:
            self._view_cache = self._views()
            self._view_at = now
        return self._view_cache

    def _latest(self, fresh: bool = False) -> dict[Key, int]:
        return self._flat(self._cached_views(fresh), "end")

    def initialOffset(self) -> dict[str, Any]:
        return self.to_spark(self._first_offsets(self._views()))

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_rows) if self.max_rows else ReadAllAvailable()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = self.from_spark(start)
        ends = self._target if self._target is not None else self._latest()
        missing = set(begin) - set(ends)
        if missing:
            q, b = min(missing, key=_order)
            raise RuntimeError(
                f"shoal source: the checkpoint has log queue {q!r} bucket {b}, the broker "
                "does not: log-buckets must not change, and a queue read must not be deleted"
            )
        if begin:
            self._commit_once(begin)
        # a queue new to the pattern starts at its earliest kept offset
        kept = self._flat(self._cached_views(), "start")
        for key in set(ends) - set(begin):
            begin[key] = kept.get(key, ends[key])
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        return self.to_spark(plan_end(begin, ends, max_rows))

    def reportLatestOffset(self) -> dict[str, Any] | None:
        views = self._view_cache  # what latestOffset saw; no extra request
        return self.to_spark(self._flat(views, "end")) if views is not None else None

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._latest(fresh=True)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[ShoalPartition]:
        begin, stop = self.from_spark(start), self.from_spark(end)
        views = self._cached_views(fresh=not self.fail_on_data_loss)
        kept = self._flat(views, "start")
        for key in set(stop) - set(begin):  # new to the pattern
            begin[key] = kept.get(key, stop[key])
        return ranges(self._kept(begin, views), stop, self.partition_rows)

    def commit(self, end: dict[str, Any]) -> None:
        """Spark is done with everything below ``end``: let the broker trim it.

        Advisory (Spark's checkpoint is the truth): errors are swallowed and
        the next commit covers this one.
        """
        self._commit_once(self.from_spark(end))

    def _commit_once(self, end: dict[Key, int]) -> None:
        if not self.commit_enabled or end == self._committed:
            return
        per_queue: dict[str, dict[str, int]] = {}
        for (q, b), o in end.items():
            per_queue.setdefault(q, {})[b] = o
        if all(commit_offsets(self.http, q, offs) for q, offs in sorted(per_queue.items())):
            self._committed = dict(end)

    def stop(self) -> None:
        pass


def commit_offsets(http: BrokerHttp, queue: str, end: dict[str, int]) -> bool:
    """POST the reader's commit; True when the broker took it."""
    try:
        http.post_json(
            log_path(queue) + "/commit",
            {str(b): int(o) for b, o in end.items()},
            retry_seconds=5.0,
        )
        return True
    except (BrokerHttpError, RuntimeError, OSError):
        return False


# --- sink --------------------------------------------------------------------------------


@dataclass
class ShoalCommitMessage(WriterCommitMessage):
    sink_id: str | None
    batch_id: int | None
    handles: list[str] = field(default_factory=list)
    rows: int = 0


class Stager:
    """What stream and batch writes share: tasks stage rows, the driver publishes them once."""

    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        dest = _opt(options, "destination")
        if not dest:
            raise ShoalOptionError(
                'shoal sink: option "destination" is required: option("destination", "/queue/NAME")'
            )
        self.destination = str(dest)
        self.http = http_from_options(options)
        names = [f.name for f in schema.fields]
        self.group_col = str(_opt(options, "groupColumn", "group_id"))
        if self.group_col not in names:
            raise ShoalOptionError(
                f"shoal sink: groupColumn {self.group_col!r} is not a column of the data "
                f"({', '.join(names)})"
            )
        self.body_col = str(_opt(options, "bodyColumn", "body"))
        if self.body_col not in names:
            raise ShoalOptionError(
                f"shoal sink: bodyColumn {self.body_col!r} is not a column of the data "
                f"({', '.join(names)})"
            )
        hc = _opt(options, "headersColumn")
        self.headers_col = str(hc) if hc else ("headers" if "headers" in names else None)
        sc = _opt(options, "seqColumn")
        self.seq_col = str(sc) if sc else ("group_seq" if "group_seq" in names else None)
        self.sink_id = _opt(options, "sinkId")
        self.chunk_rows = _int_opt(options, "stageRows", 100_000, minimum=1) or 100_000

    def _wire(self, batch: Any) -> Any:
        """A Spark Arrow batch -> the staging columns (group_id, group_seq, headers, body)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        cols = {}
        g = batch.column(self.group_col)
        cols["group_id"] = g if pa.types.is_string(g.type) else pc.cast(g, pa.string())
        if self.seq_col:
            cols["group_seq"] = pc.cast(batch.column(self.seq_col), pa.int64())
        if self.headers_col:
            cols["headers"] = batch.column(self.headers_col)
        body = batch.column(self.body_col)
        if pa.types.is_string(body.type) or pa.types.is_large_string(body.type):
            body = pc.cast(body, pa.binary())
        elif not (pa.types.is_binary(body.type) or pa.types.is_large_binary(body.type)):
            raise TypeError(
                f"bodyColumn {self.body_col!r} must be binary or string, not {body.type}; "
                "use to_json() or cast to string first"
            )
        cols["body"] = body
        return pa.RecordBatch.from_pydict(cols)

    def _stage(self, handle: str, batches: list[Any]) -> None:
        import pyarrow as pa

        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, batches[0].schema) as w:
            for b in batches:
                w.write_batch(b)
        self.http.request(
            "POST",
            "/api/sinks/stage",
            query={"destination": self.destination, "handle": handle},
            body=sink.getvalue().to_pybytes(),
            content_type=ARROW_STREAM,
        )

    def write(self, iterator: Iterator[Any]) -> ShoalCommitMessage:
        from pyspark import TaskContext

        tc = TaskContext.get()
        query_id = tc.getLocalProperty("sql.streaming.queryId") if tc else None
        batch = tc.getLocalProperty("streaming.sql.batchId") if tc else None
        sink_id = self.sink_id or query_id
        part = tc.partitionId() if tc else 0
        attempt = tc.attemptNumber() if tc else 0
        base = f"{sink_id}.{batch}.{part}.{attempt}.{uuid.uuid4().hex[:12]}"
        handles: list[str] = []
        pending: list[Any] = []
        n_pending = 0
        total = 0
        for rb in iterator:
            if rb.num_rows == 0:
                continue
            w = self._wire(rb)
            pending.append(w)
            n_pending += w.num_rows
            total += w.num_rows
            if n_pending >= self.chunk_rows:
                handle = f"{base}.{len(handles)}"
                self._stage(handle, pending)
                handles.append(handle)
                pending, n_pending = [], 0
        if pending:
            handle = f"{base}.{len(handles)}"
            self._stage(handle, pending)
            handles.append(handle)
        return ShoalCommitMessage(
            sink_id, int(batch) if batch is not None else None, handles, total
        )

    def publish(self, messages: list[ShoalCommitMessage | None], batch_id: int) -> None:
        """Publish every staged handle of the batch, once per (sink id, batch id)."""
        msgs = [m for m in messages if m is not None]
        sink_id = self.sink_id or next((m.sink_id for m in msgs if m.sink_id), None)
        if sink_id is None:
            if any(m.handles for m in msgs):
                raise RuntimeError("shoal sink: no sink id (query id) for a batch with rows")
            return
        handles = [h for m in msgs for h in m.handles]
        try:
            self.http.post_json(
                "/api/sinks/publish", {"sink_id": sink_id, "batch_id": batch_id, "handles": handles}
            )
        except BrokerHttpError as exc:
            raise SinkCommitFailed(exc, sink_id, batch_id) from None

    def abort(self, messages: list[ShoalCommitMessage | None], batchId: int) -> None:
        self.discard(messages)

    def discard(self, messages: list[ShoalCommitMessage | None]) -> None:
        handles = [h for m in messages if m is not None for h in m.handles]
        if handles:
            try:
                self.http.post_json("/api/sinks/abort", {"handles": handles}, retry_seconds=5.0)
            except (BrokerHttpError, RuntimeError, OSError):
                pass  # the broker collects orphaned stagings anyway


class ShoalStreamWriter(Stager, DataSourceStreamArrowWriter):  # type: ignore[misc]  # abort() takes our own messages
    """Stages rows from the tasks; publishes once per (query id, batch id) at commit."""

    # Spark hands back the ShoalCommitMessages our tasks returned.
    def commit(self, messages: list[ShoalCommitMessage | None], batchId: int) -> None:  # type: ignore[override]
        self.publish(messages, int(batchId))


class ShoalBatchWriter(Stager, DataSourceArrowWriter):
    """``df.write.format("shoal").mode("append").save()``: the same staging, one publish.

    Without options the write gets a fresh sink id, so Spark's task retries
    never publish twice. With ``sinkId`` and ``batchId`` (in ``foreachBatch``:
    the batch id Spark passes) a re-run of the same batch is dropped by the
    broker: exactly once across restarts.
    """

    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        super().__init__(options, schema)
        self.sink_id = self.sink_id or f"batch-{uuid.uuid4().hex}"
        self.batch_id = _int_opt(options, "batchId", 0, minimum=0) or 0

    def commit(self, messages: list[ShoalCommitMessage | None]) -> None:  # type: ignore[override]
        self.publish(messages, self.batch_id)

    def abort(self, messages: list[ShoalCommitMessage | None]) -> None:  # type: ignore[override]
        self.discard(messages)


class SinkCommitFailed(BrokerHttpError):
    """The broker refused to publish a batch; the message says why and what happens next."""

    def __init__(self, cause: BrokerHttpError, sink_id: str, batch_id: int) -> None:
        super().__init__(cause.status, cause.code, cause.message, cause.path)
        what = (
            "the query fails and, restarted from its checkpoint, re-runs the batch (exactly once)"
            if cause.status == 409
            else "check the broker's log"
        )
        line = (
            f"shoal sink: batch {batch_id} of sink {sink_id!r} was not published: "
            f"{cause.status} {cause.code}: {cause.message}; {what}"
        )
        self.args = (line,)
