"""SinkStaging: stage, publish once per (sink, batch), abort, orphans, partial failure."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from shoal.broker.sink import SinkStaging, staging_of
from shoal.errors import Conflict, ResourceFull
from shoal.records import SinkBatchPublished

T0 = 1_700_000_000.0


def rows(*bodies: str) -> list:
    return [(f"G{b}", {"JMSXGroupID": f"G{b}"}, b.encode()) for b in bodies]


class Sent:
    def __init__(self, fail_at: int | None = None) -> None:
        self.out: list = []
        self.fail_at = fail_at

    def __call__(self, dest, group, headers, body) -> None:
        if self.fail_at is not None and len(self.out) == self.fail_at:
            self.fail_at = None
            raise ResourceFull("queue full")
        self.out.append((dest, group, body))


def test_publish_once_per_batch_in_handle_order() -> None:
    records: list = []
    s = SinkStaging(SimpleNamespace(records=records))
    s.stage("h2", "/queue/t", rows("c"), T0)
    s.stage("h1", "/queue/t", rows("x"), T0)
    s.stage("h1", "/queue/t", rows("a", "b"), T0)  # a retried stage replaces, never doubles
    sent = Sent()
    out = s.publish("q1", 0, ["h1", "h2"], sent)
    assert out == {"status": "published", "rows": 3, "last_batch_id": 0}
    assert [b for _, _, b in sent.out] == [b"a", b"b", b"c"]
    assert records == [SinkBatchPublished("q1", 0)]
    assert s.staged == {}
    # a replay of batch 0 (new handles, same rows) is dropped, and so is anything older
    s.stage("h3", "/queue/t", rows("a", "b", "c"), T0)
    assert s.publish("q1", 0, ["h3"], sent)["status"] == "duplicate"
    assert len(sent.out) == 3 and s.staged == {} and len(records) == 1
    # the next batch goes through; other sinks are independent
    s.stage("h4", "/queue/t", rows("d"), T0)
    assert s.publish("q1", 1, ["h4"], sent)["status"] == "published"
    s.stage("h5", "/queue/t", rows("e"), T0)
    assert s.publish("q2", 0, ["h5"], sent)["status"] == "published"
    assert s.published == {"q1": 1, "q2": 0}


def test_missing_handle_refuses_the_whole_batch() -> None:
    s = SinkStaging(SimpleNamespace(records=[]))
    s.stage("h1", "/queue/t", rows("a"), T0)
    sent = Sent()
    with pytest.raises(Conflict, match="gone"):
        s.publish("q", 3, ["h1", "lost"], sent)
    assert sent.out == [] and "h1" in s.staged and s.last_batch("q") is None


def test_empty_batch_is_marked() -> None:
    records: list = []
    s = SinkStaging(SimpleNamespace(records=records))
    assert s.publish("q", 0, [], Sent())["rows"] == 0
    assert records == [SinkBatchPublished("q", 0)]


def test_discard_and_orphans() -> None:
    s = SinkStaging(SimpleNamespace(records=[]))
    s.stage("h1", "/queue/t", rows("a", "b"), T0)
    s.stage("h2", "/queue/t", rows("c"), T0 + 500)
    assert s.discard(["h1", "nope"]) == 2
    s.stage("h3", "/queue/t", rows("d"), T0)
    assert s.collect_orphans(T0 + 700, max_age=600) == ["h3"]
    assert list(s.staged) == ["h2"] and s.collected == 1
    assert s.info()["staged_rows"] == 1


def test_partial_failure_retry_sends_only_the_rest() -> None:
    records: list = []
    s = SinkStaging(SimpleNamespace(records=records))
    s.stage("h1", "/queue/t", rows("a", "b"), T0)
    s.stage("h2", "/queue/t", rows("c", "d"), T0)
    sent = Sent(fail_at=3)
    with pytest.raises(ResourceFull):
        s.publish("q", 0, ["h1", "h2"], sent)
    assert [b for _, _, b in sent.out] == [b"a", b"b", b"c"]
    assert records == [] and s.last_batch("q") is None
    assert s.publish("q", 0, ["h1", "h2"], sent)["status"] == "published"
    assert [b for _, _, b in sent.out] == [b"a", b"b", b"c", b"d"]
    assert records == [SinkBatchPublished("q", 0)]


def test_staging_lives_on_the_broker_and_is_seeded_from_restore() -> None:
    class FakeBroker:
        def __init__(self) -> None:
            self.records: list = []
            self.sink_batches = {"q": 7}
            self.sink_staging = None

    b = FakeBroker()
    st = staging_of(b)
    assert staging_of(b) is st and st.last_batch("q") == 7
    st.stage("h", "/queue/t", rows("x"), T0)
    assert st.publish("q", 7, ["h"], Sent())["status"] == "duplicate"
    st.stage("h", "/queue/t", rows("x"), T0)
    st.publish("q", 8, ["h"], Sent())
    assert b.sink_batches == {"q": 8}  # the core's dict is the one kept up to date


def test_publish_many_takes_whole_handles_and_falls_back_per_row() -> None:
    records: list = []
    s = SinkStaging(SimpleNamespace(records=records))
    s.stage("h1", "/queue/log", rows("a", "b"), T0)
    s.stage("h2", "/queue/plain", rows("c"), T0)
    bulk: list = []

    def publish_many(dest, staged) -> int:
        if dest != "/queue/log":
            return 0  # not a log queue: the rows go one at a time
        bulk.extend(b for _, _, b in staged)
        return len(staged)

    sent = Sent()
    out = s.publish("q", 0, ["h1", "h2"], sent, publish_many)
    assert out == {"status": "published", "rows": 3, "last_batch_id": 0}
    assert bulk == [b"a", b"b"] and [b for _, _, b in sent.out] == [b"c"]
    assert s.staged == {} and s.rows_published == 3 and records == [SinkBatchPublished("q", 0)]


def test_publish_many_failing_sends_nothing_of_that_handle() -> None:
    records: list = []
    s = SinkStaging(SimpleNamespace(records=records))
    s.stage("h1", "/queue/log", rows("a", "b"), T0)

    def refuse(dest, staged) -> int:
        raise ResourceFull("no")

    with pytest.raises(ResourceFull):
        s.publish("q", 0, ["h1"], Sent(), refuse)
    assert len(s.staged["h1"].rows) == 2 and records == [] and s.last_batch("q") is None
