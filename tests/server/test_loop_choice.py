"""`shoal serve` runs on uvloop when it is installed, unless SHOAL_NO_UVLOOP is set."""

from __future__ import annotations

import asyncio

import pytest

from shoal.server import app

uvloop = pytest.importorskip("uvloop")


def loop_used(monkeypatch: pytest.MonkeyPatch) -> type:
    seen: list[type] = []

    async def fake_serve(config: object, *, ready: object = None) -> int:
        seen.append(type(asyncio.get_running_loop()))
        return 0

    monkeypatch.setattr(app, "serve", fake_serve)
    assert app.run(None) == 0  # type: ignore[arg-type]
    return seen[0]


def test_uvloop_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SHOAL_NO_UVLOOP", raising=False)
    assert loop_used(monkeypatch) is uvloop.Loop


def test_shoal_no_uvloop_runs_the_stdlib_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHOAL_NO_UVLOOP", "1")
    assert not issubclass(loop_used(monkeypatch), uvloop.Loop)
