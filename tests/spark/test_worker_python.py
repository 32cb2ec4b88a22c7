"""A job run with the virtual environment's Python but without activating it:
Spark's workers run ``python3`` from the PATH (PYSPARK_PYTHON unset), which has
no shoal. ``shoal.spark.register`` says so in one line naming PYSPARK_PYTHON,
before any query, instead of a raw ``No module named 'shoal'`` from a worker."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from shoal.spark import register
from shoal.spark.jobs import SetupError

pytestmark = [pytest.mark.spark]

JOB = """
from pyspark.sql import SparkSession

import shoal.spark

spark = (
    SparkSession.builder.master("local[1]")
    .config("spark.driver.host", "127.0.0.1")
    .config("spark.driver.bindAddress", "127.0.0.1")
    .config("spark.ui.enabled", "false")
    .getOrCreate()
)
try:
    shoal.spark.register(spark)
    print("registered", flush=True)
finally:
    spark.stop()
"""


def python_without_shoal(directory: Path) -> Path:
    """A ``python3`` that runs this interpreter without its site-packages (so no shoal)."""
    directory.mkdir(parents=True, exist_ok=True)
    python = directory / "python3"
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" -I -S "$@"\n')
    python.chmod(0o755)
    return python


def test_register_names_pyspark_python_when_the_workers_python_lacks_shoal(
    spark, tmp_path, monkeypatch
) -> None:
    bare = python_without_shoal(tmp_path / "bin")
    monkeypatch.setattr(spark.sparkContext, "pythonExec", str(bare))
    monkeypatch.setenv("PYSPARK_PYTHON", str(bare))
    with pytest.raises(SetupError) as err:
        register(spark)
    text = str(err.value)
    assert f"PYSPARK_PYTHON={bare}" in text and "No module named 'shoal'" in text
    assert "\n" not in text


def test_a_job_run_without_activating_the_venv_is_told_to_set_pyspark_python(tmp_path) -> None:
    bin_dir = tmp_path / "bin"
    python_without_shoal(bin_dir)  # what `python3` on the PATH finds
    job = tmp_path / "job.py"
    job.write_text(JOB)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_")}
    env.pop("VIRTUAL_ENV", None)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    done = subprocess.run(
        [sys.executable, str(job)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode != 0 and "registered" not in done.stdout
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("shoal.spark.jobs.SetupError: python3 ("), last
    assert "PYSPARK_PYTHON is not set" in last and "No module named 'shoal'" in last
    assert f"set PYSPARK_PYTHON to a Python that has it, e.g. {sys.executable}" in last
