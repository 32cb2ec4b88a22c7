"""Shoal and Apache Spark: log-queue source, exactly-once sink, ordered per-group state.

``shoal.spark.register(spark)`` makes ``format("shoal")`` available; see
docs/spark.md. ``explain(exc)`` turns a failed query's exception into the
one line that says what went wrong. Importing this package does not import
pyspark; the submodules do.
"""

from __future__ import annotations

import re
from typing import Any

# "shoal.spark.options.ShoalOptionError: shoal source: ..." inside a Spark error's text
_OURS = re.compile(r"(?:^|\s)(?:[\w.]+\.)?\w+: (shoal(?: source| sink| pipeline)?: .*)$")
_PYTHON_ERROR = re.compile(r"^\s*(?:[\w.]+\.)?(\w+(?:Error|Exception|Unavailable|Failed)): (.+)$")


def register(spark: Any) -> None:
    """Register the ``shoal`` data source on a SparkSession."""
    from shoal.spark.datasource import ShoalDataSource

    spark.dataSource.register(ShoalDataSource)


def explain(exc: BaseException | str) -> str:
    """The cause of a failure, in one line, whole.

    Spark wraps an error raised in the connector in its own exceptions and a
    Python traceback; the line that matters is the connector's message
    (``shoal source: ...``, ``shoal sink: ...``), else the last Python error
    in the text, else its first line.
    """
    lines = [ln.rstrip() for ln in str(exc).splitlines() if ln.strip()]
    for line in reversed(lines):
        found = _OURS.search(line)
        if found:
            return found.group(1)
    for line in reversed(lines):
        found = _PYTHON_ERROR.match(line)
        if found:
            return f"{found.group(1)}: {found.group(2)}"
    return lines[0].strip() if lines else type(exc).__name__
