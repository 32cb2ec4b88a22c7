"""Per-group state in order: ``applyInPandasWithState`` with rows sorted by sequence.

Spark hands a group's rows of one micro-batch to the function as an iterator
of pandas chunks, in the order of the map tasks after a hash shuffle, not in
sequence order. Across micro-batches the engine keeps order (batch N+1 only
has offsets above batch N's). :func:`apply_in_group_order` wraps
``groupBy(...).applyInPandasWithState`` so that the user function sees:

* all of the group's new rows of the batch in one DataFrame,
* sorted by the sequence column (default ``offset``: the bucket offset,
  which totally orders a group because a group lives in one bucket),
* without rows at or below the last sequence already processed (kept in the
  state next to the user's own state), so a replayed row is never applied
  twice.

The user state is any picklable Python object (stored pickled in the state
store); the function returns ``(output, new_state)``::

    def match(key, orders, book):
        book = book or OrderBook()
        trades = [...]
        return pd.DataFrame(trades, columns=[...]), book

    trades = apply_in_group_order(orders, "symbol", match, "symbol string, ...")
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterator
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql.types import BinaryType, LongType, StructField, StructType

STATE_SCHEMA = StructType(
    [StructField("last_seq", LongType(), True), StructField("blob", BinaryType(), True)]
)

# func(key tuple, rows sorted by seq, user state or None) -> (DataFrame | list | None, new state)
GroupFn = Callable[[tuple[Any, ...], Any, Any], tuple[Any, Any]]


def ordered(
    func: GroupFn, seq_col: str = "offset"
) -> Callable[[Any, Iterator[Any], Any], Iterator[Any]]:
    """The function Spark calls: concat, sort by ``seq_col``, drop seen rows, keep state."""

    def run(key: tuple[Any, ...], pdfs: Iterator[Any], state: Any) -> Iterator[Any]:
        import pandas as pd

        if state.exists:
            last_seq, blob = state.get
            user = pickle.loads(blob) if blob is not None else None
        else:
            last_seq, user = None, None
        if state.hasTimedOut:
            frames: list[Any] = []
        else:
            frames = [p for p in pdfs if len(p)]
        if not frames:
            if state.hasTimedOut:
                out, user = func(key, pd.DataFrame(), user)
                state.update((last_seq, pickle.dumps(user, protocol=pickle.HIGHEST_PROTOCOL)))
                yield from _frames(out)
            return
        pdf = frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)
        seq = pdf[seq_col].to_numpy()
        if len(seq) > 1 and not (seq[1:] > seq[:-1]).all():  # not strictly increasing
            pdf = pdf.sort_values(seq_col, kind="stable")
            pdf = pdf.drop_duplicates(subset=[seq_col], keep="first")
        if last_seq is not None and pdf[seq_col].iloc[0] <= last_seq:
            pdf = pdf[pdf[seq_col] > last_seq]
        if not len(pdf):
            return
        pdf = pdf.reset_index(drop=True)
        out, user = func(key, pdf, user)
        state.update(
            (int(pdf[seq_col].iloc[-1]), pickle.dumps(user, protocol=pickle.HIGHEST_PROTOCOL))
        )
        yield from _frames(out)

    return run


def _frames(out: Any) -> Iterator[Any]:
    if out is None:
        return
    if isinstance(out, list | tuple):
        for o in out:
            if o is not None and len(o):
                yield o
    elif len(out):
        yield out


def apply_in_group_order(
    df: DataFrame,
    group_col: str,
    func: GroupFn,
    output_schema: StructType | str,
    *,
    seq_col: str = "offset",
    output_mode: str = "append",
    timeout_conf: str = "NoTimeout",
) -> DataFrame:
    """``df.groupBy(group_col).applyInPandasWithState`` with ordered, deduplicated rows."""
    return df.groupBy(group_col).applyInPandasWithState(
        ordered(func, seq_col), output_schema, STATE_SCHEMA, output_mode, timeout_conf
    )
