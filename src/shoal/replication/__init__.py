"""Replication of a logical node's journal from its live process to its
backup (C11-C14 in the design; docs/cluster.md), the pure part: no I/O, no
clock, no threads. The server's replication listener, ZooKeeper's epochs and
in-sync flag, and the journal drive it.

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
