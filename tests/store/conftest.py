"""Store fixtures: every behaviour test runs against both stores."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # store_helpers

from shoal.records import Recovered
from shoal.store.journal import JournalStore
from shoal.store.memory import MemoryStore


class StoreHarness:
    """Opens, restarts and crashes one kind of store over the same storage."""

    def __init__(self, kind: str, directory: Path) -> None:
        self.kind = kind
        self.directory = directory
        self.store: MemoryStore | JournalStore | None = None
        self._memory = MemoryStore()

    def _new(self) -> MemoryStore | JournalStore:
        if self.kind == "memory":
            return self._memory
        return JournalStore(self.directory, segment_size=64 * 1024, preallocate=True)

    def open(self) -> Recovered:
        self.store = self._new()
        return self.store.open()

    def restart(self) -> Recovered:
        """Clean shutdown (close syncs), then open again."""
        assert self.store is not None
        self.store.close()
        return self.open()

    def crash(self) -> Recovered:
        """Die without syncing, then open again."""
        assert self.store is not None
        self.store.crash()
        return self.open()

    def close(self) -> None:
        if self.store is not None:
            try:
                self.store.close()
            except Exception:
                pass


@pytest.fixture(params=["memory", "journal"])
def harness(request, tmp_path):
    h = StoreHarness(request.param, tmp_path / "journal")
    yield h
    h.close()


@pytest.fixture
def no_fsync(monkeypatch):
    """Make fsync free for tests that open a journal thousands of times
    (durability is not what they test; every byte still goes through write)."""
    monkeypatch.setattr(os, "fsync", lambda fd: None)
    monkeypatch.setattr(os, "fdatasync", lambda fd: None)
