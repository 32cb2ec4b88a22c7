"""Durable storage behind one small interface (``base.Store``)."""

from shoal.store.base import Recovered, Store
from shoal.store.memory import MemoryStore
from shoal.store.state import Replay, replay

__all__ = ["MemoryStore", "Recovered", "Replay", "Store", "replay"]
