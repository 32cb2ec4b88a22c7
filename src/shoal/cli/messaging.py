"""`shoal send | receive`: messages through Shoal's own STOMP client (``--url``)."""

from __future__ import annotations

import argparse
import base64
import json
import sys
from pathlib import Path
from typing import Any

from shoal.cli.amqp import amqp_address, is_amqp_url
from shoal.cli.amqp import receive as amqp_receive
from shoal.cli.amqp import send as amqp_send
from shoal.cli.common import (
    CliError,
    Formatter,
    auth_options,
    handled,
    json_flag,
    key_value,
    non_negative,
    seconds,
    stomp_options,
)
from shoal.protocol.stomp import ACK_MODES


def _client_options(args: argparse.Namespace) -> dict[str, Any]:
    extra: dict[str, Any] = {}
    if args.user is not None:
        extra["login"] = args.user
    if args.password is not None:
        extra["passcode"] = args.password
    return extra


def _destination(dest: str) -> str:
    """`orders` means `/queue/orders`; anything starting with '/' is as given."""
    return dest if dest.startswith("/") else f"/queue/{dest}"


def _read_bodies(args: argparse.Namespace) -> list[bytes]:
    if args.body is not None:
        data = args.body.encode()
    elif args.file is not None:
        data = sys.stdin.buffer.read() if args.file == "-" else Path(args.file).read_bytes()
    elif not sys.stdin.isatty():
        data = sys.stdin.buffer.read()
        if not data:
            raise CliError("stdin is empty: pipe a body in, or give --body ('' for an empty one)")
    else:
        raise CliError("no message body: give --body TEXT or --file F, or pipe it on stdin")
    if not args.lines:
        return [data]
    return [line for line in data.split(b"\n") if line.strip(b"\r")]


@handled
def cmd_send(args: argparse.Namespace) -> int:
    import shoal.client

    bodies = _read_bodies(args)
    headers = dict(args.header or [])
    destination = _destination(args.destination)
    count = args.count
    total = 0
    if is_amqp_url(args.url):
        total, group = amqp_send(args, bodies, headers, amqp_address(destination))
        if not args.quiet:
            plural = "" if total == 1 else "s"
            where = f" in group {group}" if group else ""
            print(f"{total} message{plural} stored to {destination}{where}", file=sys.stderr)
        return 0
    with shoal.client.connect(args.url, **_client_options(args)) as c:
        persistent = args.persistent or None
        if args.auto_group:
            producer = shoal.client.Producer(c, auto_group=True, persistent=persistent)
        elif args.group is not None:
            producer = shoal.client.Producer(c, group=args.group, persistent=persistent)
        else:
            producer = shoal.client.Producer(c, persistent=persistent)
        for _ in range(count):
            for body in bodies:
                producer.send(destination, body, headers=headers, receipt=not args.no_receipt)
                total += 1
    if not args.quiet:
        what = "stored" if not args.no_receipt else "sent (no receipts asked)"
        group = f" in group {producer.group}" if producer.group else ""
        plural = "" if total == 1 else "s"
        print(f"{total} message{plural} {what} to {destination}{group}", file=sys.stderr)
    return 0


def _message_json(msg: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "destination": msg.destination,
        "message_id": msg.message_id,
        "group": msg.group,
        "group_seq": msg.group_seq,
        "redelivered": msg.redelivered,
        "delivery_count": msg.delivery_count,
        "headers": {k: v for k, v in msg.headers.items() if k != "content-length"},
    }
    try:
        out["body"] = msg.body.decode("utf-8")
    except UnicodeDecodeError:
        out["body_base64"] = base64.b64encode(msg.body).decode("ascii")
    return out


@handled
def cmd_receive(args: argparse.Namespace) -> int:
    destination = _destination(args.destination)
    count = args.count
    prefetch = args.prefetch if args.prefetch is not None else (min(count, 1000) if count else 100)
    out = sys.stdout.buffer
    if is_amqp_url(args.url):
        received = _receive_amqp(args, destination, prefetch, out)
    else:
        received = _receive_stomp(args, destination, prefetch, out)
    if count and received < count:
        waited = f"within {args.timeout:g} s" if args.timeout is not None else ""
        if received == 0:
            raise CliError(f"no message arrived on {destination} {waited}".rstrip())
        raise CliError(
            f"received {received} of {count} messages from {destination}; "
            f"the next did not arrive {waited}".rstrip()
        )
    return 0


def _receive_stomp(args: argparse.Namespace, destination: str, prefetch: int, out: Any) -> int:
    import shoal.client

    count = args.count
    # "auto" here settles each message as it arrives, but never lets the
    # broker push more than --count (a real auto subscription has no credit
    # limit, so messages past --count would be lost).
    wire_ack = "client-individual" if args.ack == "auto" else args.ack
    received = 0
    with shoal.client.connect(args.url, **_client_options(args)) as c:
        sub = c.subscribe(
            destination, ack=wire_ack, prefetch=prefetch, headers=dict(args.header or [])
        )
        while count == 0 or received < count:
            msg = sub.receive(args.timeout)
            if msg is None:
                break
            if args.ack == "auto":
                msg.ack()
            if args.json:
                out.write(json.dumps(_message_json(msg)).encode() + b"\n")
            else:
                out.write(msg.body + (b"" if msg.body.endswith(b"\n") else b"\n"))
            out.flush()
            if args.ack != "auto":
                msg.ack(receipt=received + 1 == count)
            received += 1
        sub.unsubscribe()
    return received


def _receive_amqp(args: argparse.Namespace, destination: str, prefetch: int, out: Any) -> int:
    """The AMQP link's credit is --prefetch; each message is accepted once printed."""
    if args.header:
        raise CliError("--header is a STOMP SUBSCRIBE header; not available over amqp://")

    def emit(info: dict[str, Any], body: bytes) -> None:
        if args.json:
            info = dict(info)
            try:
                info["body"] = body.decode("utf-8")
            except UnicodeDecodeError:
                info["body_base64"] = base64.b64encode(body).decode("ascii")
            out.write(json.dumps(info).encode() + b"\n")
        else:
            out.write(body + (b"" if body.endswith(b"\n") else b"\n"))
        out.flush()

    return amqp_receive(args, amqp_address(destination), prefetch, emit)


# --- registration -----------------------------------------------------------------


def register(subparsers: Any) -> None:
    """Add `shoal send` and `shoal receive`."""
    msg_parents = [stomp_options(), auth_options()]

    # send
    p = subparsers.add_parser(
        "send",
        parents=msg_parents,
        formatter_class=Formatter,
        help="send messages (waits for the broker's receipt: exit 0 means stored)",
        description="Send one message, or --count copies, or one per input line with --lines.\n"
        "The body comes from --body, --file, or stdin. Each send waits for the\n"
        "broker's receipt, so exit status 0 means every message was stored.",
        epilog="examples:\n"
        "  shoal send orders --body 'buy 10' --group AAPL --persistent\n"
        "  seq 5 | shoal send /queue/orders --lines --auto-group\n"
        "  shoal send orders --file order.json --header content-type=application/json",
    )
    p.add_argument(
        "destination",
        metavar="DEST",
        help="/queue/NAME, /topic/NAME (a bare NAME means /queue/NAME)",
    )
    body = p.add_mutually_exclusive_group()
    body.add_argument("--body", metavar="TEXT", help="message body")
    body.add_argument("--file", metavar="F", help="read the body from file F ('-': stdin)")
    p.add_argument(
        "--lines", action="store_true", help="send each non-empty input line as a message"
    )
    p.add_argument(
        "--header",
        "-H",
        action="append",
        type=key_value,
        metavar="K=V",
        help="add a header (repeatable)",
    )
    p.add_argument(
        "--count",
        type=non_negative,
        default=1,
        metavar="N",
        help="send the body N times (default 1)",
    )
    grp = p.add_mutually_exclusive_group()
    grp.add_argument("--group", metavar="G", help="message group id (JMSXGroupID)")
    grp.add_argument(
        "--auto-group", action="store_true", help="use one random group id for everything sent"
    )
    p.add_argument(
        "--persistent", action="store_true", help="journal the messages (persistent:true)"
    )
    p.add_argument(
        "--no-receipt",
        action="store_true",
        help="do not wait for receipts (faster; exit 0 no longer means stored)",
    )
    p.add_argument("--quiet", "-q", action="store_true", help="print nothing on success")
    p.set_defaults(func=cmd_send)

    # receive
    p = subparsers.add_parser(
        "receive",
        parents=msg_parents,
        formatter_class=Formatter,
        help="receive messages and print their bodies (or JSON lines)",
        description="Receive --count messages (default 1; 0: until --timeout passes with\n"
        "nothing new, or forever) and print each body on its own line, or one\n"
        "JSON object per line with --json. Messages are acknowledged once\n"
        "printed; with --count N the broker never hands over more than N.",
        epilog="examples:\n"
        "  shoal receive orders\n"
        "  shoal receive /queue/orders --count 0 --timeout 2 --json",
    )
    p.add_argument(
        "destination",
        metavar="DEST",
        help="/queue/NAME, /topic/NAME (a bare NAME means /queue/NAME)",
    )
    p.add_argument(
        "--count",
        type=non_negative,
        default=1,
        metavar="N",
        help="messages to receive (default 1; 0: no limit)",
    )
    p.add_argument(
        "--ack",
        choices=ACK_MODES,
        default="client-individual",
        help="acknowledgement: auto (as each arrives), client (cumulative, after "
        "printing) or client-individual (each after printing; the default)",
    )
    p.add_argument(
        "--timeout",
        type=seconds,
        metavar="S",
        help="give up when no message arrives for S seconds (exit 1 if fewer than --count arrived)",
    )
    p.add_argument(
        "--prefetch",
        type=non_negative,
        metavar="N",
        help="messages the broker may push ahead (default: --count, at most 1000)",
    )
    p.add_argument(
        "--header",
        "-H",
        action="append",
        type=key_value,
        metavar="K=V",
        help="add a SUBSCRIBE header (repeatable)",
    )
    json_flag(p)
    p.set_defaults(func=cmd_receive)
