"""The durable store: append-only, CRC-framed segment files (``docs/journal.md``)."""

from shoal.store.journal.writer import DEFAULT_SEGMENT_SIZE, JournalStore

__all__ = ["DEFAULT_SEGMENT_SIZE", "JournalStore"]
