"""The ``shoal`` Spark data source: a log-queue stream reader and an exactly-once sink.

Source::

    spark.dataSource.register(ShoalDataSource)          # or shoal.spark.register(spark)
    df = (spark.readStream.format("shoal")
          .option("url", "http://127.0.0.1:8161")        # the broker's HTTP port
          .option("queue", "orders")                     # a log queue
          .option("maxRowsPerBatch", 250_000)            # optional: ReadMaxRows
          .load())

Columns: ``group_id string, group_seq bigint, bucket int, offset bigint,
timestamp timestamp, headers map<string,string>, body binary``. Source offsets
are ``{"<bucket>": <next offset>}``. Within a group, ``offset`` orders the
messages (a group lives in one bucket).

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
    ]
)
SCHEMA_DDL = (
    "group_id string, group_seq bigint, bucket int, offset bigint, timestamp timestamp, "
    "headers map<string,string>, body binary"
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
    """Offsets ``[start, end)`` of one bucket."""

    def __init__(self, bucket: int, start: int, end: int) -> None:
        super().__init__((bucket, start, end))
        self.bucket = bucket
        self.start = start
        self.end = end

    def __repr__(self) -> str:
        return f"ShoalPartition(bucket={self.bucket}, [{self.start}, {self.end}))"


def plan_end(start: dict[str, int], ends: dict[str, int], max_rows: int | None) -> dict[str, int]:
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
    active = sorted((b for b in out if avail[b] > 0), key=int)
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


def ranges(start: dict[str, int], end: dict[str, int], rows: int) -> list[ShoalPartition]:
    """Partitions over ``[start, end)`` per bucket, each at most ``rows`` long (0: one per bucket)."""
    parts = []
    for b in sorted(end, key=int):
        s, e = int(start.get(b, 0)), int(end[b])
        step = rows or max(1, e - s)
        while s < e:
            parts.append(ShoalPartition(int(b), s, min(e, s + step)))
            s += step
    return parts


class LogRangeReader:
    """What stream and batch reads share: options, the broker view, reading a range.

    ``read`` runs on the executors from a pickled copy, so the reader keeps
    no sockets (the HTTP client opens its connections lazily, per process).
    """

    def __init__(self, options: dict[str, str]) -> None:
        self.queue = str(options["queue"])
        self.http = http_from_options(options)
        self.fetch_rows = _int_opt(options, "fetchRows", 50_000, minimum=1) or 50_000
        self.partition_rows = _int_opt(options, "partitionRows", 200_000, minimum=0) or 0
        self.prefetch = _bool_opt(options, "prefetch", True)
        self.fail_on_data_loss = _bool_opt(options, "failOnDataLoss", True)
        self.starting = str(options.get("startingoffsets", "earliest"))

    def _view(self) -> dict[str, Any]:
        view: dict[str, Any] = self.http.get_json(log_path(self.queue))
        return view

    def _offsets(self, view: dict[str, Any], spec: str, default: str) -> dict[str, int]:
        """``earliest``/``latest``/JSON -> offsets for every bucket (unnamed ones: ``default``)."""
        if spec in ("earliest", "latest"):
            return {
                str(b): int(o) for b, o in view["start" if spec == "earliest" else "end"].items()
            }
        given = {str(b): int(o) for b, o in json.loads(spec).items()}
        unknown = sorted(set(given) - set(view["start"]), key=int)
        if unknown:
            raise ShoalOptionError(
                f"shoal source: log queue {self.queue!r} has buckets 0..{len(view['start']) - 1}, "
                f"not {', '.join(unknown)}"
            )
        return {str(b): given.get(str(b), int(view[default][b])) for b in view["start"]}

    def _kept(self, start: dict[str, int], view: dict[str, Any]) -> dict[str, int]:
        """``start``, checked against what the broker still keeps (``failOnDataLoss``)."""
        kept = {str(b): int(o) for b, o in view["start"].items()}
        lost = {b: (int(s), kept[b]) for b, s in start.items() if b in kept and int(s) < kept[b]}
        if not lost:
            return start
        if self.fail_on_data_loss:
            where = ", ".join(f"bucket {b} [{s}, {k})" for b, (s, k) in sorted(lost.items()))
            raise RuntimeError(
                f"shoal source: log queue {self.queue!r} no longer has offsets {where}: they were "
                "committed past (another reader of this queue, or a commit by hand); set "
                'option("failOnDataLoss", "false") to skip them'
            )
        return {b: max(int(s), kept.get(b, 0)) for b, s in start.items()}

    def read(self, partition: ShoalPartition) -> Iterator[Any]:
        """Fetch ``[start, end)`` in ``fetchRows`` chunks; the next chunk is fetched
        while Spark converts the current one."""
        from concurrent.futures import ThreadPoolExecutor

        schema = spark_arrow_schema()
        step = self.fetch_rows
        chunks = [
            (s, min(s + step, partition.end)) for s in range(partition.start, partition.end, step)
        ]
        if not chunks:
            return
        if not self.prefetch or len(chunks) == 1:
            for chunk in chunks:
                yield from self._check(
                    partition.bucket, chunk, self._fetch(partition.bucket, chunk), schema
                )
            return
        with ThreadPoolExecutor(1, thread_name_prefix="shoal-fetch") as pool:
            pending = pool.submit(self._fetch, partition.bucket, chunks[0])
            for i, chunk in enumerate(chunks):
                table = pending.result()
                if i + 1 < len(chunks):
                    pending = pool.submit(self._fetch, partition.bucket, chunks[i + 1])
                yield from self._check(partition.bucket, chunk, table, schema)

    def _fetch(self, bucket: int, chunk: tuple[int, int]) -> Any:
        import pyarrow as pa

        start, end = chunk
        _, _, data = self.http.request(
            "GET",
            f"{log_path(self.queue)}/{bucket}",
            query={"start": start, "end": end, "max_rows": end - start},
        )
        return pa.ipc.open_stream(data).read_all()

    def _check(self, bucket: int, chunk: tuple[int, int], table: Any, schema: Any) -> Iterator[Any]:
        start, end = chunk
        if table.num_rows != end - start:
            raise RuntimeError(
                f"shoal source: log queue {self.queue!r} bucket {bucket}: asked for offsets "
                f"[{start}, {end}), the broker has {table.num_rows} of them"
            )
        for batch in table.to_batches():
            yield batch.cast(schema)


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
            view = self._view()
            start = self._kept(self._offsets(view, self.starting, "start"), view)
            end = self._offsets(view, self.ending, "end")
            for b in end:
                past = int(view["end"][b])
                if end[b] > past:
                    raise ShoalOptionError(
                        f"shoal source: endingOffsets bucket {b} is {end[b]}, past the end of "
                        f"log queue {self.queue!r} ({past})"
                    )
                if end[b] < start[b]:
                    raise ShoalOptionError(
                        f"shoal source: endingOffsets bucket {b} ({end[b]}) is below "
                        f"startingOffsets ({start[b]})"
                    )
            self._parts = ranges(start, end, self.partition_rows)
        return list(self._parts)


class ShoalStreamReader(LogRangeReader, DataSourceStreamReader, SupportsTriggerAvailableNow):  # type: ignore[misc]  # as above
    """Reads a log queue as a stream; offsets ``{"bucket": next offset}``.

    ``initialOffset``/``latestOffset``/``partitions``/``commit`` run in one
    long-lived driver-side Python process per query; ``read`` runs on the
    executors.

    Commits: Spark calls ``commit(end)`` of batch N only when it plans a
    later batch with data, which would keep the broker a batch behind (for
    ever when idle). But Spark asks ``latestOffset(start)`` on every trigger,
    idle or not, and passes as ``start`` the end of the last batch, which it
    has finished (its commit-log entry is written) before it plans the next.
    So the reader commits ``start`` there, once per new value.
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
        self._view_cache: dict[str, Any] | None = None
        self._view_at = 0.0
        self._target: dict[str, int] | None = None
        self._committed: dict[str, int] | None = None

    # picklable: only plain fields; drop the driver-side caches
    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_view_cache": None, "_target": None, "_committed": None}

    def _cached_view(self, fresh: bool = False) -> dict[str, Any]:
        now = time.monotonic()
        if fresh or self._view_cache is None or now - self._view_at >= self.poll_interval:
            self._view_cache = self._view()
            self._view_at = now
        return self._view_cache

    def _latest(self, fresh: bool = False) -> dict[str, int]:
        return {str(b): int(e) for b, e in self._cached_view(fresh)["end"].items()}

    def initialOffset(self) -> dict[str, int]:
        return self._offsets(self._view(), self.starting, "start")

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_rows) if self.max_rows else ReadAllAvailable()

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        ends = self._target if self._target is not None else self._latest()
        if set(ends) != set(start) and start:
            missing = set(start) - set(ends)
            if missing:
                raise RuntimeError(
                    f"shoal source: log queue {self.queue!r} has buckets {sorted(ends, key=int)}, "
                    f"but the checkpoint has {sorted(start, key=int)}: log-buckets must not change"
                )
        if start:
            self._commit_once(start)
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        return plan_end(start, ends, max_rows)

    def reportLatestOffset(self) -> dict[str, int] | None:
        view = self._view_cache  # what latestOffset saw; no extra request
        return {str(b): int(e) for b, e in view["end"].items()} if view is not None else None

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._latest(fresh=True)

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[ShoalPartition]:
        if self.fail_on_data_loss:
            self._kept(start, self._cached_view())
        else:
            start = self._kept(start, self._cached_view(fresh=True))
        return ranges(start, end, self.partition_rows)

    def commit(self, end: dict[str, int]) -> None:
        """Spark is done with everything below ``end``: let the broker trim it.

        Advisory (Spark's checkpoint is the truth): errors are swallowed and
        the next commit covers this one.
        """
        self._commit_once(end)

    def _commit_once(self, end: dict[str, int]) -> None:
        if (
            self.commit_enabled
            and end != self._committed
            and commit_offsets(self.http, self.queue, end)
        ):
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
