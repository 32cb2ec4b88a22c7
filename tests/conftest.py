"""Fixtures shared by every test directory."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tests/support.py
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench/

from support import ShoalProcess

settings.register_profile(
    "ci", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("ci")


@pytest.fixture
def shoal_server(tmp_path):
    """Factory: start a real `shoal serve` on loopback ports it binds itself (port 0,
    read back from its ready line: `.ports`); stopped afterwards."""
    started: list[ShoalProcess] = []

    def start(
        *,
        data: Path | str | None = "default",
        config: str | None = None,
        args: list[str] | None = None,
    ) -> ShoalProcess:
        data_dir = tmp_path / f"data{len(started)}" if data == "default" else data
        cfg = None
        if config is not None:
            cfg = tmp_path / f"shoal{len(started)}.toml"
            cfg.write_text(config)
        proc = ShoalProcess(data_dir, cfg, args or [])
        started.append(proc)
        return proc.start()

    yield start
    for proc in started:
        proc.stop()
