"""`shoal send` / `shoal receive` over AMQP 1.0 (``--url amqp://...``), with Qpid Proton.

Shoal's own client speaks STOMP; for an ``amqp://`` or ``amqps://`` URL the
two messaging commands use Proton's blocking API instead, with the same
options and output. A send waits for the broker's ``accepted`` outcome (a
durable message is accepted after its fsync), so exit 0 still means stored.
"""

from __future__ import annotations

import argparse
import sys
import uuid
from typing import Any

from shoal.client.errors import ClientError


class AmqpCliError(ClientError):
    """The AMQP conversation failed (refused, rejected, timed out)."""

    code = "protocol"


def is_amqp_url(url: str) -> bool:
    return url.startswith(("amqp://", "amqps://"))


def _connect(args: argparse.Namespace) -> Any:
    from proton import ProtonException
    from proton.utils import BlockingConnection

    options: dict[str, Any] = {"timeout": 30}
    if args.user is not None:
        options.update(user=args.user, password=args.password or "", allowed_mechs="PLAIN")
    try:
        return BlockingConnection(args.url, **options)
    except ProtonException as exc:
        raise AmqpCliError(f"cannot connect to {args.url}: {exc}") from None


def send(
    args: argparse.Namespace, bodies: list[bytes], headers: dict[str, str], destination: str
) -> tuple[int, str | None]:
    """(messages sent, group id) once each was accepted."""
    from proton import Message, ProtonException
    from proton.utils import SendException

    group = f"auto-{uuid.uuid4().hex[:12]}" if args.auto_group else args.group
    total = 0
    conn = _connect(args)
    try:
        sender = conn.create_sender(destination)
        for _ in range(args.count):
            for body in bodies:
                m = Message(
                    body=body, durable=bool(args.persistent), properties=dict(headers) or None
                )
                if group is not None:
                    m.group_id = group
                    m.group_sequence = total + 1
                try:
                    sender.send(m)  # waits for the outcome, --no-receipt or not
                except SendException as exc:
                    raise AmqpCliError(
                        f"message {total + 1} was refused (outcome {exc.state})"
                    ) from None
                total += 1
    except ProtonException as exc:
        raise AmqpCliError(str(exc)) from None
    finally:
        conn.close()
    return total, group


def receive(args: argparse.Namespace, destination: str, prefetch: int, emit: Any) -> int:
    """Receive up to ``args.count`` messages, ``emit(message_dict, body)`` each; how many."""
    from proton import ProtonException, Timeout

    received = 0
    count = args.count
    conn = _connect(args)
    try:
        receiver = conn.create_receiver(destination, credit=max(1, prefetch))
        while count == 0 or received < count:
            try:
                m = receiver.receive(timeout=args.timeout)
            except Timeout:
                break
            body = m.body
            data = body.encode() if isinstance(body, str) else bytes(body or b"")
            emit(_message_json(m, destination), data)
            receiver.accept()
            received += 1
    except ProtonException as exc:
        raise AmqpCliError(str(exc)) from None
    finally:
        conn.close()
    return received


def _message_json(m: Any, destination: str) -> dict[str, Any]:
    return {
        "destination": destination,
        "message_id": None,
        "group": m.group_id,
        "group_seq": m.group_sequence or None,
        "redelivered": not m.first_acquirer,
        "delivery_count": m.delivery_count,
        "headers": {str(k): v for k, v in (m.properties or {}).items()},
    }


def amqp_address(destination: str) -> str:
    """`/queue/NAME` -> `queue://NAME` (and topics), as Shoal's AMQP listener reads them."""
    for prefix, scheme in (("/queue/", "queue://"), ("/topic/", "topic://")):
        if destination.startswith(prefix):
            return scheme + destination[len(prefix) :]
    if destination.startswith("/"):
        print(f"note: {destination} is passed to the AMQP listener as it is", file=sys.stderr)
    return destination
