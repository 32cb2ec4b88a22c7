"""One SparkSession for the whole test session, and helpers to feed a real broker.

Spark tests need Java (17 or 21) and the ``spark`` extra; they are marked
``spark`` (and ``slow`` where slow). The session follows docs/spark.md:
local[2], UI off, loopback only, PYSPARK_PYTHON = this interpreter,
4 shuffle partitions, 2 GB driver memory.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # spark_support.py
from skips import missing


def _spark_available() -> str | None:
    try:
        import pyspark  # noqa: F401
    except ImportError:
        return missing("pyspark", "make install")
    if shutil.which("java") is None:
        return missing("java (Spark needs Java 17 or 21)")
    return None


@pytest.fixture(scope="session")
def spark():
    reason = _spark_available()
    if reason:
        pytest.skip(reason)
    from shoal.spark.pipeline import build_spark

    session = build_spark(
        "local[2]",
        "shoal-tests",
        shuffle_partitions=4,
        driver_memory="2g",
        conf={"spark.sql.streaming.noDataMicroBatches.enabled": "true"},
    )
    yield session
    session.stop()


@pytest.fixture
def broker(shoal_server):
    """A real `shoal serve` with a journal in tmp_path."""
    return shoal_server()
