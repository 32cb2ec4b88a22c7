"""Durable storage behind one small interface (``base.Store``)."""

from shoal.records import Recovered
from shoal.store.base import Store
from shoal.store.memory import MemoryStore
from shoal.store.replay_fold import Replay, replay

__all__ = ["MemoryStore", "Recovered", "Replay", "Store", "replay"]
