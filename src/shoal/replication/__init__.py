"""Replication of a logical node's journal from its live process to its
backup (high availability: a primary/backup pair), the pure part: no I/O,
no clock, no threads. Its inputs are the journal's batches, the pair's
messages, ZooKeeper's epochs and in-sync flag, and the time.

- ``ReplicationPrimary``: one term of the live process.
- ``ReplicationBackup``: the passive process.
- ``messages``: what they say to each other, and its bytes.
"""

from shoal.replication.backup import Apply, Install, ReplicationBackup, Write
from shoal.replication.messages import (
    Ack,
    Copy,
    Data,
    Decoder,
    Hello,
    Message,
    ReplicationProtocolError,
    Stale,
    encode,
)
from shoal.replication.primary import CopyWanted, RecordInSync, ReplicationPrimary, Request

__all__ = [
    "Ack",
    "Apply",
    "Copy",
    "CopyWanted",
    "Data",
    "Decoder",
    "Hello",
    "Install",
    "Message",
    "RecordInSync",
    "ReplicationBackup",
    "ReplicationPrimary",
    "ReplicationProtocolError",
    "Request",
    "Stale",
    "Write",
    "encode",
]
