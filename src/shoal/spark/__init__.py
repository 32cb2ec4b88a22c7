"""Shoal and Apache Spark: log-queue source, exactly-once sink, ordered per-group state.

``shoal.spark.register(spark)`` makes ``format("shoal")`` available; see
docs/spark.md. Importing this package does not import pyspark; the
submodules do.
"""

from __future__ import annotations

from typing import Any


def register(spark: Any) -> None:
    """Register the ``shoal`` data source on a SparkSession."""
    from shoal.spark.datasource import ShoalDataSource

    spark.dataSource.register(ShoalDataSource)
