"""Broker.group_page: filtered, sorted, paged G15 rows (same answers as
sorting group_infos, without a row per group); group_info by id or bucket."""

from __future__ import annotations

import random
from typing import Any

import pytest

from shoal.errors import NotFound

from .conftest import Harness

STATE_ORDER = {"ready": 0, "owned": 1, "draining": 2, "parked": 3}


def reference(
    rows: list[dict[str, Any]],
    *,
    state=None,
    owner=None,
    contains=None,
    sort="group",
    descending=False,
    offset=0,
    limit=100,
):
    """The slow, obvious answer over group_infos rows."""
    if state is not None:
        rows = [r for r in rows if r["state"] in state]
    if owner is not None:
        if owner == "none":
            rows = [r for r in rows if r["owner"] is None]
        else:
            rows = [
                r
                for r in rows
                if r["owner"] is not None
                and (
                    r["owner"] == owner or ("/" not in owner and r["owner"].split("/")[0] == owner)
                )
            ]
    if contains is not None:
        rows = [r for r in rows if contains in r["group"]]

    def key(r):
        if sort == "group":
            return r["group"]
        if sort == "state":
            return (STATE_ORDER[r["state"]], r["group"])
        if sort in ("owner", "oldest_age_ms"):
            blank = "" if sort == "owner" else 0
            return (r[sort] is not None, r[sort] or blank, r["group"])
        return (r[sort], r["group"])

    out = sorted(rows, key=key, reverse=descending)
    return out[offset : offset + limit], len(rows)


@pytest.fixture
def busy() -> Harness:
    """Three consumers, 60 groups in every state, ages that differ."""
    h = Harness()
    h.sub(2, "a", prefetch_count=5)
    h.sub(3, "b", prefetch_count=5)
    h.sub(4, "c", prefetch_count=1000)
    rng = random.Random(7)
    for i in range(300):
        h.now += 0.01
        h.send(str(i), group=f"g{rng.randrange(60):02d}")
    for d in list(h.by_sub[(4, "c")])[:40]:
        h.ack(d)
    h.b.park_group("q", "g07", h.now)
    h.b.park_group("q", "zz-new", h.now)
    h.b.reset_groups("q", "g03", h.now)
    h.b.reset_groups("q", "g11", h.now)
    h.now += 1.0
    return h


CASES = [
    {},
    {"sort": "group", "descending": True},
    {"state": {"owned"}},
    {"state": {"draining", "parked"}},
    {"state": {"ready"}},
    {"owner": "none"},
    {"owner": "2"},
    {"owner": "3/b"},
    {"owner": "9"},
    {"contains": "1"},
    {"sort": "backlog", "descending": True, "limit": 7},
    {"sort": "in_flight"},
    {"sort": "oldest_age_ms", "descending": True, "offset": 3, "limit": 5},
    {"sort": "oldest_age_ms"},
    {"sort": "owner", "limit": 1000},
    {"sort": "state", "descending": True},
    {"sort": "reassigned", "descending": True, "limit": 3},
    {"offset": 55, "limit": 10},
    {"offset": 500},
    {"limit": 0},
    {"state": {"owned"}, "owner": "4", "contains": "g", "sort": "backlog", "limit": 4},
]


@pytest.mark.parametrize("kw", CASES, ids=[str(c) for c in CASES])
def test_group_page_matches_sorting_every_row(busy, kw):
    rows = busy.b.group_infos("q", busy.now)
    want = reference(rows, **kw)
    got = busy.b.group_page("q", now=busy.now, **kw)
    assert got == want


def test_group_page_large_table_uses_a_heap_for_top_pages():
    h = Harness()
    h.sub(2, "a", prefetch_count=0)
    for i in range(2000):
        h.send("x", group=f"k{i:05d}")
    page, total = h.b.group_page("q", sort="group", descending=True, limit=3)
    assert total == 2000 and [r["group"] for r in page] == ["k01999", "k01998", "k01997"]
    page, total = h.b.group_page("q", state="owned", offset=1990, limit=20)
    assert total == 2000 and len(page) == 10


def test_group_page_on_buckets_names_buckets():
    h = Harness()
    h.sub(2, "a", dest="/queue/q?group-buckets=3")
    for g in ("a", "b", "c", "d", "e"):
        h.send("x", group=g)
    page, total = h.b.group_page("q", contains="#")
    assert total == len(h.b.queue("q").groups) and all(r["group"].startswith("#") for r in page)


def test_group_page_rejects_unknown_sort_and_state(busy):
    with pytest.raises(ValueError, match="sort"):
        busy.b.group_page("q", sort="colour")
    with pytest.raises(ValueError, match="states"):
        busy.b.group_page("q", state="asleep")
    with pytest.raises(NotFound):
        busy.b.group_page("nope")


def test_group_state_counts_match_the_rows(busy):
    counts = dict.fromkeys(STATE_ORDER, 0)
    for r in busy.b.group_infos("q", busy.now):
        counts[r["state"]] += 1
    assert busy.b.group_state_counts("q") == counts
    assert counts["parked"] == 2 and counts["draining"] >= 1 and counts["owned"] >= 1


def test_group_info_by_id_or_bucket_label():
    h = Harness()
    h.sub(2, "a", dest="/queue/q?group-buckets=4")
    h.send("x", group="order-7")
    (label,) = h.b.queue("q").groups and [g.name for g in h.b.queue("q").groups.values()]
    by_id = h.b.group_info("q", "order-7", h.now)
    assert by_id is not None and by_id["group"] == label and by_id["state"] == "owned"
    assert h.b.group_info("q", label, h.now) == by_id
    other = next(f"#{k}" for k in range(4) if f"#{k}" != label)
    assert h.b.group_info("q", other, h.now) is None
    h.b.park_group("q", "order-7", h.now)
    assert h.b.group_info("q", label, h.now)["state"] == "parked"
    h.b.resume_group("q", label, h.now)
    assert h.b.group_info("q", "order-7", h.now)["state"] == "owned"
