"""`shoal send | receive | queues | queue | groups | journal | pipeline`.

Registered into the lead's parser by ``shoal.cli`` (``register(subparsers)``).
Messaging commands use Shoal's own client (``--url stomp://...``); admin
commands use the management HTTP API (``--http http://...``, ``--user`` /
``--password`` for Basic auth). Output is a table for people and JSON with
``--json`` for scripts. Errors are one line, ``shoal: error: ...``, and a
non-zero exit status; never a traceback.

Defaults can come from the environment: ``SHOAL_URL``, ``SHOAL_HTTP``,
``SHOAL_USER``, ``SHOAL_PASSWORD``.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import functools
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from shoal import cli_amqp
from shoal.broker.model import GROUP_STATES
from shoal.client.errors import ClientError

DEFAULT_URL = "stomp://127.0.0.1:61613"
DEFAULT_HTTP = "http://127.0.0.1:8161"
GROUP_KEYS = ("group", "owner", "backlog", "in_flight", "oldest_age_ms", "state", "node")


class CliError(ClientError):
    """A command-line problem found before talking to the broker."""

    code = "config"


# --- helpers ------------------------------------------------------------------


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected K=V, got {text!r}")
    return key, value


def _non_negative(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {n}")
    return n


def _seconds(text: str) -> float:
    try:
        s = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if s < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
    return s


def _states(text: str) -> str:
    parts = [s.strip() for s in text.split(",") if s.strip()]
    bad = [s for s in parts if s not in GROUP_STATES]
    if bad or not parts:
        raise argparse.ArgumentTypeError(
            f"expected {', '.join(GROUP_STATES)} (comma-separated), got {text!r}"
        )
    return ",".join(parts)


def _handled(func: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Turn the non-Shoal errors a command can meet into one-line messages."""

    @functools.wraps(func)
    def run(args: argparse.Namespace) -> int:
        try:
            return func(args)
        except BrokenPipeError:  # e.g. `shoal receive ... | head -1`
            with contextlib.suppress(OSError):
                sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - silence the final flush
            return 0
        except (FileNotFoundError, IsADirectoryError, PermissionError) as exc:
            where = f"{exc.filename}: " if exc.filename else ""
            raise CliError(f"{where}{exc.strerror or exc}") from None
        except (ValueError, TypeError) as exc:
            from shoal.errors import BrokerError

            if isinstance(exc, BrokerError):
                raise
            raise CliError(str(exc)) from None

    return run


def _out(line: str = "") -> None:
    sys.stdout.write(line + "\n")


def _print_json(obj: Any) -> None:
    _out(json.dumps(obj, indent=2, sort_keys=False))


def _table(rows: Sequence[Sequence[Any]], headers: Sequence[str]) -> None:
    cells = [[("-" if v is None else str(v)) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    numeric = [
        all(isinstance(r[i], int | float) or r[i] is None for r in rows) and bool(rows)
        for i in range(len(headers))
    ]

    def fmt(row: Sequence[str]) -> str:
        parts = [
            c.rjust(w) if num else c.ljust(w)
            for c, w, num in zip(row, widths, numeric, strict=True)
        ]
        return "  ".join(parts).rstrip()

    _out(fmt(list(headers)))
    for row in cells:
        _out(fmt(row))


def _age(ms: Any) -> str | None:
    if ms is None:
        return None
    ms = int(ms)
    if ms < 1000:
        return f"{ms}ms"
    s = ms / 1000
    if s < 60:
        return f"{s:.1f}s"
    if s < 3600:
        return f"{int(s // 60)}m{int(s % 60):02d}s"
    return f"{int(s // 3600)}h{int(s % 3600 // 60):02d}m"


def _admin(args: argparse.Namespace) -> Any:
    from shoal.client.admin import Admin

    return Admin(args.http, user=args.user, password=args.password, timeout=args.http_timeout)


def _client_options(args: argparse.Namespace) -> dict[str, Any]:
    extra: dict[str, Any] = {}
    if args.user is not None:
        extra["login"] = args.user
    if args.password is not None:
        extra["passcode"] = args.password
    return extra


def _queue_name(name: str) -> str:
    """Accept `/queue/NAME` where the API wants NAME."""
    return name.removeprefix("/queue/")


def _destination(dest: str) -> str:
    """`orders` means `/queue/orders`; anything starting with '/' is as given."""
    return dest if dest.startswith("/") else f"/queue/{dest}"


# --- messaging ----------------------------------------------------------------


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


@_handled
def cmd_send(args: argparse.Namespace) -> int:
    import shoal.client

    bodies = _read_bodies(args)
    headers = dict(args.header or [])
    destination = _destination(args.destination)
    count = args.count
    total = 0
    if cli_amqp.is_amqp_url(args.url):
        total, group = cli_amqp.send(args, bodies, headers, cli_amqp.amqp_address(destination))
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


@_handled
def cmd_receive(args: argparse.Namespace) -> int:
    destination = _destination(args.destination)
    count = args.count
    prefetch = args.prefetch if args.prefetch is not None else (min(count, 1000) if count else 100)
    out = sys.stdout.buffer
    if cli_amqp.is_amqp_url(args.url):
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

    return cli_amqp.receive(args, cli_amqp.amqp_address(destination), prefetch, emit)


# --- admin: queues --------------------------------------------------------------


@_handled
def cmd_queues(args: argparse.Namespace) -> int:
    queues = _admin(args).queues()
    if args.json:
        _print_json(queues)
        return 0
    if not queues:
        _out("no queues")
        return 0
    rows = [
        (
            q.get("name"),
            q.get("type", "classic"),
            q.get("depth"),
            q.get("in_flight"),
            q.get("consumers"),
            q.get("groups"),
            (q.get("settings") or {}).get("group-mode"),
            q.get("enqueued"),
            q.get("delivered"),
            _age(q.get("oldest_age_ms")),
        )
        for q in queues
    ]
    _table(rows, ("NAME", "TYPE", "DEPTH", "IN_FLIGHT", "CONSUMERS", "GROUPS", "MODE",
                  "ENQUEUED", "DELIVERED", "OLDEST"))
    return 0


def _setting_value(raw: str) -> Any:
    """CLI text -> JSON value: true/false/null and integers typed, else a string."""
    try:
        value = json.loads(raw)
    except ValueError:
        return raw
    if value is None or isinstance(value, bool | int):
        return value
    return raw


@_handled
def cmd_queue_create(args: argparse.Namespace) -> int:
    settings: dict[str, Any] = {}
    for key, raw in args.setting or []:
        settings[key] = _setting_value(raw)
    if args.group_header is not None:
        settings["group-header"] = args.group_header
    if args.shared_groups:
        if args.group_mode == "sticky":
            raise CliError("--shared-groups and --group-mode sticky contradict each other")
        settings["group-mode"] = "shared"
    if args.group_mode is not None:
        settings["group-mode"] = args.group_mode
    if args.group_buckets is not None:
        settings["group-buckets"] = args.group_buckets
    if args.group_rebalance:
        settings["group-rebalance"] = True
    if args.exclusive:
        settings["exclusive"] = True
    name = _queue_name(args.name)
    info = _admin(args).create_queue(name, settings)
    if args.json:
        _print_json(info)
        return 0
    shown = ", ".join(f"{k}={json.dumps(v)}" for k, v in settings.items())
    _out(f"created queue {name}" + (f" ({shown})" if shown else ""))
    return 0


@_handled
def cmd_queue_delete(args: argparse.Namespace) -> int:
    name = _queue_name(args.name)
    _admin(args).delete_queue(name)
    _out(f"deleted queue {name}")
    return 0


@_handled
def cmd_queue_purge(args: argparse.Namespace) -> int:
    name = _queue_name(args.name)
    result = _admin(args).purge_queue(name) or {}
    n = result.get("purged")
    if args.json:
        _print_json(result)
    else:
        _out(f"purged {n if n is not None else 'all waiting'} message{'s' if n != 1 else ''}"
             f" from {name}")
    return 0


# --- admin: cluster --------------------------------------------------------------


@_handled
def cmd_cluster_status(args: argparse.Namespace) -> int:
    status = _admin(args).cluster()
    if args.json:
        _print_json(status)
        return 0
    zk = status.get("zookeeper", {})
    _out(f"cluster {status['cluster']}, node {status['node']} (link {status['link']}); "
         f"grouping {status['grouping']}, ZooKeeper {zk.get('connect')} {zk.get('state')}")
    rows = [
        (n["node"], n["link"], n["state"], "yes" if n["member"] else "no", n["bindings_held"],
         n.get("forward_backlog"), ",".join(n["queues_with_consumers"]) or None)
        for n in status["nodes"]
    ]
    _table(rows, ("NODE", "LINK", "STATE", "MEMBER", "BINDINGS", "BACKLOG", "CONSUMED QUEUES"))
    _out(f"decisions {status['decisions']}, pending {status['decisions_pending']}, "
         f"timeouts {status['decision_timeouts']}; forwarded {status['forwarded']}, "
         f"duplicates dropped {status['duplicates_dropped']}")
    return 0


# --- admin: groups ---------------------------------------------------------------


@_handled
def cmd_groups_list(args: argparse.Namespace) -> int:
    queue = _queue_name(args.queue)
    groups = _admin(args).groups(queue, state=args.state, owner=args.owner, limit=args.limit)
    groups = [{k: g.get(k) for k in GROUP_KEYS} for g in groups]
    if args.json:
        _print_json(groups)
        return 0
    if not groups:
        _out(f"no groups in {queue}" + (f" in state {args.state}" if args.state else ""))
        return 0
    rows = [
        (g["group"], g["owner"], g["state"], g["backlog"], g["in_flight"], _age(g["oldest_age_ms"]))
        for g in groups
    ]
    _table(rows, ("GROUP", "OWNER", "STATE", "BACKLOG", "IN_FLIGHT", "OLDEST"))
    return 0


@_handled
def cmd_groups_reset(args: argparse.Namespace) -> int:
    queue = _queue_name(args.queue)
    result = _admin(args).reset_groups(queue, args.group) or {}
    if args.json:
        _print_json(result)
        return 0
    n = result.get("reset")
    what = f"group {args.group!r}" if args.group is not None else (
        f"{n} group{'s' if n != 1 else ''}" if n is not None else "every group"
    )
    _out(f"reset requested for {what} of {queue}; groups move once their in-flight "
         "messages are settled")
    return 0


def _group_op(op: str) -> Callable[[argparse.Namespace], int]:
    @_handled
    def run(args: argparse.Namespace) -> int:
        queue = _queue_name(args.queue)
        admin = _admin(args)
        result = (admin.park_group if op == "park" else admin.resume_group)(queue, args.group)
        result = result or {}
        if args.json:
            _print_json(result)
            return 0
        state = result.get("state")
        verb = "parked" if op == "park" else "resumed"
        _out(f"{verb} group {args.group!r} of {queue}" + (f" (now {state})" if state else ""))
        return 0

    return run


# --- journal ----------------------------------------------------------------------


def _journal_dir(raw: str) -> Path:
    """DIR may be the journal itself or the data directory holding `journal/`."""
    path = Path(raw)
    if not path.exists():
        raise CliError(f"{raw}: no such directory")
    if not path.is_dir():
        raise CliError(f"{raw}: not a directory")
    inner = path / "journal"
    if inner.is_dir() and not any(p.suffix == ".seg" for p in path.iterdir()):
        return inner
    return path


def _journal_tools() -> Any:
    try:
        from shoal.store.journal import tools
    except ImportError as exc:  # pragma: no cover - the store ships with shoal
        raise CliError(f"journal tools are not available: {exc}") from None
    return tools


@_handled
def cmd_journal_check(args: argparse.Namespace) -> int:
    directory = _journal_dir(args.directory)
    report = _journal_tools().check(directory)
    if args.json:
        _print_json(report)
    else:
        ok = report.get("ok", True)
        _out(f"journal {report.get('directory', directory)}: {'OK' if ok else 'CORRUPT'}")
        for key in ("bytes", "batches", "records", "queues", "live_messages", "parked_groups"):
            if key in report:
                _out(f"  {key.replace('_', ' ')}: {report[key]}")
        segments = report.get("segments")
        if isinstance(segments, list):
            _out(f"  segments: {len(segments)}")
        for d in report.get("torn_tail") or []:
            _out(f"  torn tail: {d.get('segment')} at {d.get('offset')} ({d.get('bytes')} bytes),"
                 f" cut on open: {d.get('reason')}")
        for d in report.get("corruption") or []:
            _out(f"  CORRUPT: {d.get('segment')} at {d.get('offset')} ({d.get('bytes')} bytes):"
                 f" {d.get('reason')}")
        for d in (report.get("torn_tail") or []) + (report.get("corruption") or []):
            held = d.get("messages") or []
            if held:
                _out(f"  in the damage at {d.get('offset')}: {len(held)} messages "
                     f"({_journal_messages(held)})")
        if not ok:
            _out("  run `shoal journal repair DIR` (or `shoal serve --repair`) to keep every "
                 "valid record and move damage aside")
    return 0 if report.get("ok", True) else 1


def _journal_messages(held: list[dict[str, Any]]) -> str:
    return ", ".join(
        f"queue {m['queue']!r} id {m['id']}" + (f" group {m['group']!r}" if m["group"] else "")
        for m in held
    )


@_handled
def cmd_journal_repair(args: argparse.Namespace) -> int:
    from shoal.errors import StoreError

    directory = _journal_dir(args.directory)
    try:
        report = _journal_tools().repair(directory)
    except StoreError as exc:
        raise CliError(str(exc)) from None
    if args.json:
        _print_json(report)
        return 0
    _out(f"journal {report['directory']}: repaired")
    for note in report["notes"]:
        _out(f"  {note}")
    _out(f"  messages dropped: {report['dropped']}")  # each listed in its note above
    return 0


@_handled
def cmd_journal_dump(args: argparse.Namespace) -> int:
    directory = _journal_dir(args.directory)
    body_bytes = None if args.full_bodies else args.body_bytes
    for record in _journal_tools().dump(directory, body_bytes=body_bytes):
        sys.stdout.write(json.dumps(record, default=str) + "\n")
    return 0


# --- registration -----------------------------------------------------------------


class _Formatter(argparse.RawDescriptionHelpFormatter):
    pass


def _parents() -> tuple[argparse.ArgumentParser, argparse.ArgumentParser, argparse.ArgumentParser]:
    auth = argparse.ArgumentParser(add_help=False)
    auth.add_argument("--user", default=os.environ.get("SHOAL_USER"),
                      help="user name (default $SHOAL_USER)")
    auth.add_argument("--password", default=os.environ.get("SHOAL_PASSWORD"),
                      help="password (default $SHOAL_PASSWORD)")
    stomp = argparse.ArgumentParser(add_help=False)
    stomp.add_argument(
        "--url", default=os.environ.get("SHOAL_URL", DEFAULT_URL),
        help="broker URL, stomp://[user:pass@]host:port[?options], stomp+ssl://..., "
             "or amqp://host:port (AMQP 1.0, via Qpid Proton; --user/--password for PLAIN) "
             f"(default $SHOAL_URL or {DEFAULT_URL})",
    )
    http = argparse.ArgumentParser(add_help=False)
    http.add_argument(
        "--http", default=os.environ.get("SHOAL_HTTP", DEFAULT_HTTP),
        help=f"management API base URL (default $SHOAL_HTTP or {DEFAULT_HTTP})",
    )
    http.add_argument("--http-timeout", type=_seconds, default=30.0, metavar="S",
                      help="seconds to wait for the API (default 30)")
    return auth, stomp, http


def _json_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print JSON for scripts")


def register(subparsers: Any) -> None:
    """Add Shoal's client and admin commands to the `shoal` parser."""
    auth, stomp, http = _parents()
    admin_parents = [http, auth]
    msg_parents = [stomp, auth]

    # send
    p = subparsers.add_parser(
        "send", parents=msg_parents, formatter_class=_Formatter,
        help="send messages (waits for the broker's receipt: exit 0 means stored)",
        description="Send one message, or --count copies, or one per input line with --lines.\n"
                    "The body comes from --body, --file, or stdin. Each send waits for the\n"
                    "broker's receipt, so exit status 0 means every message was stored.",
        epilog="examples:\n"
               "  shoal send orders --body 'buy 10' --group AAPL --persistent\n"
               "  seq 5 | shoal send /queue/orders --lines --auto-group\n"
               "  shoal send orders --file order.json --header content-type=application/json",
    )
    p.add_argument("destination", metavar="DEST",
                   help="/queue/NAME, /topic/NAME (a bare NAME means /queue/NAME)")
    body = p.add_mutually_exclusive_group()
    body.add_argument("--body", metavar="TEXT", help="message body")
    body.add_argument("--file", metavar="F", help="read the body from file F ('-': stdin)")
    p.add_argument("--lines", action="store_true",
                   help="send each non-empty input line as a message")
    p.add_argument("--header", "-H", action="append", type=_key_value, metavar="K=V",
                   help="add a header (repeatable)")
    p.add_argument("--count", type=_non_negative, default=1, metavar="N",
                   help="send the body N times (default 1)")
    grp = p.add_mutually_exclusive_group()
    grp.add_argument("--group", metavar="G", help="message group id (JMSXGroupID)")
    grp.add_argument("--auto-group", action="store_true",
                     help="use one random group id for everything sent")
    p.add_argument("--persistent", action="store_true",
                   help="journal the messages (persistent:true)")
    p.add_argument("--no-receipt", action="store_true",
                   help="do not wait for receipts (faster; exit 0 no longer means stored)")
    p.add_argument("--quiet", "-q", action="store_true", help="print nothing on success")
    p.set_defaults(func=cmd_send)

    # receive
    p = subparsers.add_parser(
        "receive", parents=msg_parents, formatter_class=_Formatter,
        help="receive messages and print their bodies (or JSON lines)",
        description="Receive --count messages (default 1; 0: until --timeout passes with\n"
                    "nothing new, or forever) and print each body on its own line, or one\n"
                    "JSON object per line with --json. Messages are acknowledged once\n"
                    "printed; with --count N the broker never hands over more than N.",
        epilog="examples:\n"
               "  shoal receive orders\n"
               "  shoal receive /queue/orders --count 0 --timeout 2 --json",
    )
    p.add_argument("destination", metavar="DEST",
                   help="/queue/NAME, /topic/NAME (a bare NAME means /queue/NAME)")
    p.add_argument("--count", type=_non_negative, default=1, metavar="N",
                   help="messages to receive (default 1; 0: no limit)")
    p.add_argument("--ack", choices=("auto", "client", "client-individual"),
                   default="client-individual",
                   help="acknowledgement: auto (as each arrives), client (cumulative, after "
                        "printing) or client-individual (each after printing; the default)")
    p.add_argument("--timeout", type=_seconds, metavar="S",
                   help="give up when no message arrives for S seconds (exit 1 if fewer than "
                        "--count arrived)")
    p.add_argument("--prefetch", type=_non_negative, metavar="N",
                   help="messages the broker may push ahead (default: --count, at most 1000)")
    p.add_argument("--header", "-H", action="append", type=_key_value, metavar="K=V",
                   help="add a SUBSCRIBE header (repeatable)")
    _json_flag(p)
    p.set_defaults(func=cmd_receive)

    # queues
    p = subparsers.add_parser("queues", parents=admin_parents,
                              help="list queues (depth, in flight, consumers, groups)")
    _json_flag(p)
    p.set_defaults(func=cmd_queues)

    # queue create/delete/purge
    queue = subparsers.add_parser("queue", help="create, delete or purge a queue").add_subparsers(
        dest="queue_command", metavar="ACTION", required=True)
    p = queue.add_parser(
        "create", parents=admin_parents, formatter_class=_Formatter,
        help="create a queue with group settings",
        description="Create a queue. Group options as in Qpid's\n"
                    "`qpid-config add queue NAME --group-header H --shared-groups`;\n"
                    "any other queue setting with --setting K=V (kebab-case names).",
        epilog="example:\n"
               "  shoal queue create orders --group-header JMSXGroupID --group-mode shared \\\n"
               "      --group-buckets 1024 --setting max-delivery-attempts=5",
    )
    p.add_argument("name", metavar="NAME")
    p.add_argument("--group-header", metavar="H", help="header holding the group id "
                   "(default JMSXGroupID)")
    p.add_argument("--group-mode", choices=("sticky", "shared"),
                   help="sticky: a group stays with its consumer; shared: only while it holds "
                        "unsettled messages (Qpid)")
    p.add_argument("--shared-groups", action="store_true", help="same as --group-mode shared")
    p.add_argument("--group-buckets", type=int, metavar="N",
                   help="-1 track every group exactly, 0 no grouping, N hash into N buckets")
    p.add_argument("--group-rebalance", action="store_true",
                   help="spread groups evenly when a consumer joins")
    p.add_argument("--exclusive", action="store_true", help="one consumer receives everything")
    p.add_argument("--setting", action="append", type=_key_value, metavar="K=V",
                   help="any queue setting, e.g. poison-policy=park (repeatable)")
    _json_flag(p)
    p.set_defaults(func=cmd_queue_create)
    p = queue.add_parser("delete", parents=admin_parents, help="delete a queue and its messages")
    p.add_argument("name", metavar="NAME")
    p.set_defaults(func=cmd_queue_delete)
    p = queue.add_parser("purge", parents=admin_parents,
                         help="drop every message of a queue that is not in flight")
    p.add_argument("name", metavar="NAME")
    _json_flag(p)
    p.set_defaults(func=cmd_queue_purge)

    # groups
    groups = subparsers.add_parser(
        "groups", help="inspect and steer message groups"
    ).add_subparsers(dest="groups_command", metavar="ACTION", required=True)
    p = groups.add_parser(
        "list", parents=admin_parents, formatter_class=_Formatter,
        help="list a queue's groups: owner, backlog, in flight, age, state",
        description="List the groups of QUEUE. --json prints a JSON list of objects with\n"
                    "the keys group, owner, backlog, in_flight, oldest_age_ms, state and\n"
                    "node (the cluster node holding the group; null on a single node).",
    )
    p.add_argument("queue", metavar="QUEUE")
    p.add_argument("--state", type=_states,
                   help="only groups in this state (ready, owned, draining, parked; "
                        "comma-separated for several)")
    p.add_argument("--owner", help="only groups owned by this consumer or connection id "
                   "('none': unowned)")
    p.add_argument("--limit", type=_non_negative, metavar="N", help="show at most N groups")
    _json_flag(p)
    p.set_defaults(func=cmd_groups_list)
    p = groups.add_parser(
        "reset", parents=admin_parents,
        help="unbind one group (--group) or all; returns once requested",
        description="Reset group ownership. Each group moves once its current owner has "
                    "settled its in-flight messages, so order is kept.",
    )
    p.add_argument("queue", metavar="QUEUE")
    p.add_argument("--group", metavar="G", help="only this group (default: every group)")
    _json_flag(p)
    p.set_defaults(func=cmd_groups_reset)
    for op, text in (("park", "hold a group: nothing more of it is delivered until resumed"),
                     ("resume", "deliver a parked group again")):
        p = groups.add_parser(op, parents=admin_parents, help=text, description=text)
        p.add_argument("queue", metavar="QUEUE")
        p.add_argument("--group", metavar="G", required=True, help="the group")
        _json_flag(p)
        p.set_defaults(func=_group_op(op))

    # cluster
    cluster = subparsers.add_parser(
        "cluster", help="inspect a cluster of shoal nodes (docs/cluster.md)"
    ).add_subparsers(dest="cluster_command", metavar="ACTION", required=True)
    p = cluster.add_parser(
        "status", parents=admin_parents, formatter_class=_Formatter,
        help="nodes, link addresses and states, bindings held, forward backlog",
        description="The cluster as the node at --http sees it: every node with its link\n"
                    "address, link state, queues with consumers, the bindings this node\n"
                    "knows it holds, and the messages waiting to be forwarded to it.\n"
                    "--json prints what /api/cluster serves.",
    )
    _json_flag(p)
    p.set_defaults(func=cmd_cluster_status)

    # journal
    journal = subparsers.add_parser(
        "journal", help="check, dump or repair a journal directory (offline)"
    ).add_subparsers(dest="journal_command", metavar="ACTION", required=True)
    p = journal.add_parser(
        "check", help="verify a journal: exit 1 if corrupt (a torn tail alone is fine)",
        description="Verify every record of a journal without changing it. DIR is the "
                    "journal directory or the broker's data directory.",
    )
    p.add_argument("directory", metavar="DIR")
    _json_flag(p)
    p.set_defaults(func=cmd_journal_check)
    p = journal.add_parser(
        "dump", help="print every record as a JSON line",
        description="Print every journal record, in order, as one JSON object per line "
                    "(bodies base64, cut to --body-bytes).",
    )
    p.add_argument("directory", metavar="DIR")
    p.add_argument("--body-bytes", type=_non_negative, default=64, metavar="N",
                   help="show at most N bytes of each body (default 64)")
    p.add_argument("--full-bodies", action="store_true", help="show whole bodies")
    p.set_defaults(func=cmd_journal_dump)
    p = journal.add_parser(
        "repair", help="cut a torn tail and move damage aside, listing the messages dropped",
        description="Do offline what `shoal serve --repair` does: keep every valid record, "
                    "move damaged bytes to files next to their segment and list the messages "
                    "dropped (queue, id, group). Refuses a journal a running broker holds.",
    )
    p.add_argument("directory", metavar="DIR")
    _json_flag(p)
    p.set_defaults(func=cmd_journal_repair)

    # pipeline (Spark), only when the optional part is installed
    try:
        from shoal.spark.pipeline import add_pipeline_parser
    except ImportError:
        return
    add_pipeline_parser(subparsers)
