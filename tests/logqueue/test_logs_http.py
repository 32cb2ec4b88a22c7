"""The /api/logs and /api/sinks handlers over a real broker core, without sockets."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pytest

from shoal.broker.core import Broker
from shoal.broker.settings import AddressSettings
from shoal.management.http import Context, Request
from shoal.management.logs import ARROW_STREAM
from shoal.management.routes import build_router
from shoal.records import MessageStored, SinkBatchPublished
from shoal.server.management_port import ServerPort
from shoal.store.replay_fold import replay
from support import PortServer

T0 = 1_700_000_000.0
LOG = "/queue/orders?queue-type=log&log-buckets=4"


class Harness:
    def __init__(self, broker: Broker | None = None) -> None:
        self.broker = broker or Broker(AddressSettings(), T0)
        self.router = build_router()
        self.port = ServerPort(PortServer(self.broker))
        self.now = T0
        self.journal: list = []
        if 1 not in self.broker.connections:
            self.broker.connect(1, T0)

    def send(self, dest: str, group: str | None, body: bytes, **headers: str) -> None:
        h = {"JMSXGroupID": group, **headers} if group is not None else dict(headers)
        self.broker.send(1, dest, h, body, self.now)
        self.journal += self.broker.take_records()

    def raw(
        self,
        method: str,
        path: str,
        query: dict | None = None,
        body: Any = None,
        raw: bytes | None = None,
    ):
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else b"")
        resp = self.router.handle(
            Context(self.port, self.now),
            Request(method, path, {k: str(v) for k, v in (query or {}).items()}, {}, data),
        )
        self.last_records = self.broker.take_records()
        self.journal += self.last_records
        return resp

    def call(
        self,
        method: str,
        path: str,
        query: dict | None = None,
        body: Any = None,
        raw: bytes | None = None,
    ) -> tuple[int, Any]:
        resp = self.raw(method, path, query, body, raw)
        assert resp.content_type == "application/json", resp.body[:200]
        return resp.status, json.loads(resp.body)

    def read(self, queue: str, bucket: int, **query: Any) -> pa.Table:
        resp = self.raw("GET", f"/api/logs/{queue}/{bucket}", query)
        assert resp.status == 200, resp.body
        assert resp.content_type == ARROW_STREAM
        return pa.ipc.open_stream(resp.body).read_all()


@pytest.fixture
def h() -> Harness:
    return Harness()


def fill(h: Harness, n: int = 20) -> None:
    for i in range(n):
        h.send(LOG, f"S{i % 5}", f"o{i}".encode(), JMSXGroupSeq=str(i // 5 + 1), extra="v")


def test_view_lists_buckets_offsets_and_lag(h: Harness) -> None:
    fill(h)
    status, view = h.call("GET", "/api/logs/orders")
    assert status == 200
    assert view["log_buckets"] == 4 and view["lag"] == 20
    assert sum(view["end"].values()) == 20 and set(view["committed"].values()) == {0}
    status, listing = h.call("GET", "/api/logs")
    assert [q["name"] for q in listing["logs"]] == ["orders"]
    status, queues = h.call("GET", "/api/queues/orders")
    assert status == 200 and queues["type"] == "log" and len(queues["buckets"]) == 4


def test_range_read_is_arrow_and_the_same_every_time(h: Harness) -> None:
    fill(h)
    _, view = h.call("GET", "/api/logs/orders")
    bucket = max(view["end"], key=lambda b: view["end"][b])
    end = view["end"][bucket]
    t = h.read("orders", int(bucket), start=1, end=end)
    assert t.column_names == [
        "group_id",
        "group_seq",
        "bucket",
        "offset",
        "timestamp",
        "headers",
        "body",
    ]
    assert t.column("offset").to_pylist() == list(range(1, end))
    assert set(t.column("bucket").to_pylist()) == {int(bucket)}
    assert t.schema.field("timestamp").type == pa.timestamp("ms", tz="UTC")
    row = t.slice(0, 1).to_pylist()[0]
    assert dict(row["headers"])["extra"] == "v"
    assert row["group_seq"] == int(dict(row["headers"])["JMSXGroupSeq"])
    h.send(LOG, "S0", b"later")
    assert h.read("orders", int(bucket), start=1, end=end).equals(t)
    assert h.read("orders", int(bucket), start=1, end=end, max_rows=2).num_rows == 2
    resp = h.raw("GET", f"/api/logs/orders/{bucket}", {"start": 0, "max_rows": 1})
    assert dict(resp.headers)["X-Shoal-Next"] == "1"


def test_commit_takes_offsets_and_trims(h: Harness) -> None:
    fill(h)
    _, view = h.call("GET", "/api/logs/orders")
    target = {b: e for b, e in view["end"].items() if e}
    status, out = h.call("POST", "/api/logs/orders/commit", body=target)
    assert status == 200 and out["lag"] == 0
    assert sorted(out["changed"]) == sorted(int(b) for b in target)
    assert all(isinstance(r, type(h.last_records[0])) for r in h.last_records)
    assert len(h.last_records) == len(target)
    status, again = h.call("POST", "/api/logs/orders/commit", body=target)
    assert status == 200 and again["changed"] == [] and h.last_records == []
    b = next(iter(target))
    status, err = h.call("GET", f"/api/logs/orders/{b}", {"start": 0})
    assert status == 409 and err["error"] == "conflict"


@pytest.mark.parametrize(
    ("method", "path", "query", "body", "status", "field"),
    [
        ("GET", "/api/logs/nope", None, None, 404, None),
        ("GET", "/api/logs/orders/9", None, None, 404, None),
        ("GET", "/api/logs/orders/x", None, None, 400, "bucket"),
        ("GET", "/api/logs/orders/0", {"start": "-1"}, None, 400, "start"),
        ("GET", "/api/logs/orders/0", {"start": "5", "end": "2"}, None, 400, "end"),
        ("GET", "/api/logs/orders/0", {"max_rows": "0"}, None, 400, "max_rows"),
        ("POST", "/api/logs/orders/commit", None, [1, 2], 400, "body"),
        ("POST", "/api/logs/orders/commit", None, {"a": 1}, 400, "body.a"),
        ("POST", "/api/logs/orders/commit", None, {"0": -1}, 400, "body.0"),
        ("POST", "/api/logs/orders/commit", None, {"7": 1}, 400, "body.7"),
        ("POST", "/api/logs/orders/commit", None, {"0": 10**6}, 409, None),
        ("POST", "/api/sinks/stage", {"handle": "h"}, None, 400, "destination"),
        ("POST", "/api/sinks/stage", {"destination": "/queue/t"}, None, 400, "handle"),
        (
            "POST",
            "/api/sinks/stage",
            {"destination": "nope", "handle": "h"},
            None,
            400,
            "destination",
        ),
        ("POST", "/api/sinks/publish", None, {"batch_id": 1, "handles": []}, 400, "body.sink_id"),
        (
            "POST",
            "/api/sinks/publish",
            None,
            {"sink_id": "q", "batch_id": "1", "handles": []},
            400,
            "body.batch_id",
        ),
        (
            "POST",
            "/api/sinks/publish",
            None,
            {"sink_id": "q", "batch_id": 1, "handles": [1]},
            400,
            "body.handles",
        ),
        ("POST", "/api/sinks/abort", None, {}, 400, "body.handles"),
    ],
)
def test_bad_input_gets_4xx_naming_the_problem(h, method, path, query, body, status, field):
    fill(h, 4)
    got, err = h.call(method, path, query, body)
    assert got == status, err
    assert err["message"]
    if field is not None:
        assert err.get("field") == field


def test_stage_rejects_a_body_that_is_not_arrow(h: Harness) -> None:
    status, err = h.call(
        "POST", "/api/sinks/stage", {"destination": "/queue/t", "handle": "h"}, raw=b"not arrow"
    )
    assert status == 400 and err["field"] == "body"


def arrow_rows(
    groups: list[str | None], bodies: list[bytes], seqs: list[int] | None = None
) -> bytes:
    cols = {"group_id": pa.array(groups, pa.string()), "body": pa.array(bodies, pa.binary())}
    if seqs is not None:
        cols["group_seq"] = pa.array(seqs, pa.int64())
    cols["headers"] = pa.array([[("k", "v")]] * len(bodies), pa.map_(pa.string(), pa.string()))
    table = pa.table(cols)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


def test_sink_stage_publish_once_then_duplicate(h: Harness) -> None:
    h.broker.connect(2, T0)
    h.broker.subscribe(2, "s", "/queue/trades", "auto", {}, T0)
    h.broker.take_effects()
    h.journal += h.broker.take_records()
    dest = "/queue/trades"
    st, out = h.call(
        "POST",
        "/api/sinks/stage",
        {"destination": dest, "handle": "a"},
        raw=arrow_rows(["X", "Y"], [b"1", b"2"], [1, 1]),
    )
    assert st == 200 and out["rows"] == 2 and h.last_records == []
    st, _ = h.call(
        "POST",
        "/api/sinks/stage",
        {"destination": dest, "handle": "b"},
        raw=arrow_rows(["X"], [b"3"], [2]),
    )
    st, out = h.call(
        "POST",
        "/api/sinks/publish",
        body={"sink_id": "query-1", "batch_id": 0, "handles": ["a", "b"]},
    )
    assert st == 200 and out["status"] == "published" and out["rows"] == 3
    # the messages and the batch marker are one atomic append
    kinds = [type(r) for r in h.last_records]
    assert kinds.count(MessageStored) == 3 and kinds[-1] is SinkBatchPublished
    delivered = [e for e in h.broker.take_effects() if type(e).__name__ == "Deliver"]
    assert len(delivered) == 3
    stored = [r for r in h.last_records if isinstance(r, MessageStored)]
    assert [r.body for r in stored] == [b"1", b"2", b"3"]
    assert stored[0].headers["JMSXGroupID"] == "X" and stored[2].headers["JMSXGroupSeq"] == "2"
    assert stored[0].headers["k"] == "v" and stored[0].headers["persistent"] == "true"
    # replayed batch: staged again under new handles, dropped at publish
    h.call(
        "POST",
        "/api/sinks/stage",
        {"destination": dest, "handle": "c"},
        raw=arrow_rows(["X"], [b"1"]),
    )
    st, out = h.call(
        "POST", "/api/sinks/publish", body={"sink_id": "query-1", "batch_id": 0, "handles": ["c"]}
    )
    assert out["status"] == "duplicate" and h.last_records == []
    st, info = h.call("GET", "/api/sinks")
    assert info["staged_handles"] == 0 and info["sinks"]["query-1"]["last_batch_id"] == 0


def test_sink_abort_and_lost_stagings(h: Harness) -> None:
    h.call(
        "POST",
        "/api/sinks/stage",
        {"destination": "/queue/t", "handle": "a"},
        raw=arrow_rows(["X"], [b"1"]),
    )
    st, out = h.call("POST", "/api/sinks/abort", body={"handles": ["a", "zzz"]})
    assert st == 200 and out["discarded"] == 1
    st, err = h.call(
        "POST", "/api/sinks/publish", body={"sink_id": "q", "batch_id": 5, "handles": ["a"]}
    )
    assert st == 409 and "gone" in err["message"] and h.last_records == []


def test_sink_publishes_into_a_log_queue_and_survives_restart(h: Harness) -> None:
    h.send("/queue/out?queue-type=log&log-buckets=2", "X", b"seed")
    h.call(
        "POST",
        "/api/sinks/stage",
        {"destination": "/queue/out", "handle": "a"},
        raw=arrow_rows(["X", "Y", "X"], [b"1", b"2", b"3"]),
    )
    h.call("POST", "/api/sinks/publish", body={"sink_id": "q", "batch_id": 0, "handles": ["a"]})
    rec = replay(h.journal)
    assert rec.sink_batches == {"q": 0}
    b2 = Broker(AddressSettings(), T0 + 5)
    b2.restore(rec, T0 + 5)  # the core keeps Recovered.sink_batches
    h2 = Harness(b2)
    q = b2.log_queue("out")
    assert sum(q.end_offsets().values()) == 4
    h2.call(
        "POST",
        "/api/sinks/stage",
        {"destination": "/queue/out", "handle": "b"},
        raw=arrow_rows(["X"], [b"1"]),
    )
    st, out = h2.call(
        "POST", "/api/sinks/publish", body={"sink_id": "q", "batch_id": 0, "handles": ["b"]}
    )
    assert out["status"] == "duplicate"


def test_views_and_reads_of_fresh_offsets_wait_for_their_sync(h: Harness) -> None:
    fill(h, 8)
    h.call("GET", "/api/logs/orders")
    assert [type(r).__name__ for r in h.last_records] == ["LogCommitted"]  # sync barrier
    h.call("GET", "/api/logs/orders")
    assert h.last_records == []  # nothing new: answered at once
    h.send(LOG, "S1", b"new")
    b = [r for r in h.journal if isinstance(r, MessageStored)][-1].bucket
    resp = h.raw("GET", f"/api/logs/orders/{b}", {"start": 0})
    assert resp.status == 200 and len(h.last_records) == 1
