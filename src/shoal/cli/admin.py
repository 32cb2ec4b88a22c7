"""`shoal queues | queue | groups` through the management HTTP API (``--http``),
and `shoal user` on the users file the broker reads."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from shoal.broker.model import GROUP_STATES
from shoal.cli.common import (
    CliError,
    Formatter,
    auth_options,
    handled,
    http_options,
    json_flag,
    key_value,
    non_negative,
)
from shoal.cli.output import age, out, print_json, table
from shoal.errors import ConfigError

GROUP_KEYS = ("group", "owner", "backlog", "in_flight", "oldest_age_ms", "state", "node")


def _states(text: str) -> str:
    parts = [s.strip() for s in text.split(",") if s.strip()]
    bad = [s for s in parts if s not in GROUP_STATES]
    if bad or not parts:
        raise argparse.ArgumentTypeError(
            f"expected {', '.join(GROUP_STATES)} (comma-separated), got {text!r}"
        )
    return ",".join(parts)


def admin_client(args: argparse.Namespace) -> Any:
    from shoal.client.admin import Admin

    return Admin(args.http, user=args.user, password=args.password, timeout=args.http_timeout)


def _queue_name(name: str) -> str:
    """Accept `/queue/NAME` where the API wants NAME."""
    return name.removeprefix("/queue/")


# --- queues -----------------------------------------------------------------------


@handled
def cmd_queues(args: argparse.Namespace) -> int:
    queues = admin_client(args).queues()
    if args.json:
        print_json(queues)
        return 0
    if not queues:
        out("no queues")
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
            age(q.get("oldest_age_ms")),
        )
        for q in queues
    ]
    table(
        rows,
        (
            "NAME",
            "TYPE",
            "DEPTH",
            "IN_FLIGHT",
            "CONSUMERS",
            "GROUPS",
            "MODE",
            "ENQUEUED",
            "DELIVERED",
            "OLDEST",
        ),
    )
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


@handled
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
    info = admin_client(args).create_queue(name, settings)
    if args.json:
        print_json(info)
        return 0
    shown = ", ".join(f"{k}={json.dumps(v)}" for k, v in settings.items())
    out(f"created queue {name}" + (f" ({shown})" if shown else ""))
    return 0


@handled
def cmd_queue_delete(args: argparse.Namespace) -> int:
    name = _queue_name(args.name)
    admin_client(args).delete_queue(name)
    out(f"deleted queue {name}")
    return 0


@handled
def cmd_queue_purge(args: argparse.Namespace) -> int:
    name = _queue_name(args.name)
    result = admin_client(args).purge_queue(name) or {}
    n = result.get("purged")
    if args.json:
        print_json(result)
    else:
        out(
            f"purged {n if n is not None else 'all waiting'} message{'s' if n != 1 else ''}"
            f" from {name}"
        )
    return 0


# --- admin: groups ---------------------------------------------------------------


@handled
def cmd_groups_list(args: argparse.Namespace) -> int:
    queue = _queue_name(args.queue)
    groups = admin_client(args).groups(queue, state=args.state, owner=args.owner, limit=args.limit)
    groups = [{k: g.get(k) for k in GROUP_KEYS} for g in groups]
    if args.json:
        print_json(groups)
        return 0
    if not groups:
        out(f"no groups in {queue}" + (f" in state {args.state}" if args.state else ""))
        return 0
    rows = [
        (g["group"], g["owner"], g["state"], g["backlog"], g["in_flight"], age(g["oldest_age_ms"]))
        for g in groups
    ]
    table(rows, ("GROUP", "OWNER", "STATE", "BACKLOG", "IN_FLIGHT", "OLDEST"))
    return 0


@handled
def cmd_groups_reset(args: argparse.Namespace) -> int:
    queue = _queue_name(args.queue)
    result = admin_client(args).reset_groups(queue, args.group) or {}
    if args.json:
        print_json(result)
        return 0
    n = result.get("reset")
    what = (
        f"group {args.group!r}"
        if args.group is not None
        else (f"{n} group{'s' if n != 1 else ''}" if n is not None else "every group")
    )
    out(
        f"reset requested for {what} of {queue}; groups move once their in-flight "
        "messages are settled"
    )
    return 0


def _group_op(op: str) -> Callable[[argparse.Namespace], int]:
    @handled
    def run(args: argparse.Namespace) -> int:
        queue = _queue_name(args.queue)
        admin = admin_client(args)
        result = (admin.park_group if op == "park" else admin.resume_group)(queue, args.group)
        result = result or {}
        if args.json:
            print_json(result)
            return 0
        state = result.get("state")
        verb = "parked" if op == "park" else "resumed"
        out(f"{verb} group {args.group!r} of {queue}" + (f" (now {state})" if state else ""))
        return 0

    return run


# --- users -----------------------------------------------------------------------


def cmd_user_add(args: argparse.Namespace) -> int:
    import getpass

    from shoal.security import add_user

    password = args.password
    if password is None:
        if not sys.stdin.isatty():
            password = sys.stdin.readline().rstrip("\n")
        else:
            password = getpass.getpass(f"password for {args.name}: ")
    if not password:
        raise ConfigError("password", "must not be empty")
    add_user(Path(args.users_file), args.name, password, args.role or [])
    print(f"user {args.name!r} saved to {args.users_file}")
    return 0


def cmd_user_token(args: argparse.Namespace) -> int:
    from shoal.security import add_token

    token = add_token(Path(args.users_file), args.name)
    print(token)
    print(
        f"token for {args.name!r} saved (hashed) to {args.users_file}; "
        "send it as 'Authorization: Bearer <token>'",
        file=sys.stderr,
    )
    return 0


# --- registration -----------------------------------------------------------------


def register(subparsers: Any) -> None:
    """Add `shoal queues`, `shoal queue ...`, `shoal groups ...` and `shoal user ...`."""
    admin_parents = [http_options(), auth_options()]

    # queues
    p = subparsers.add_parser(
        "queues", parents=admin_parents, help="list queues (depth, in flight, consumers, groups)"
    )
    json_flag(p)
    p.set_defaults(func=cmd_queues)

    # queue create/delete/purge
    queue = subparsers.add_parser("queue", help="create, delete or purge a queue").add_subparsers(
        dest="queue_command", metavar="ACTION", required=True
    )
    p = queue.add_parser(
        "create",
        parents=admin_parents,
        formatter_class=Formatter,
        help="create a queue with group settings",
        description="Create a queue. Group options as in Qpid's\n"
        "`qpid-config add queue NAME --group-header H --shared-groups`;\n"
        "any other queue setting with --setting K=V (kebab-case names).",
        epilog="example:\n"
        "  shoal queue create orders --group-header JMSXGroupID --group-mode shared \\\n"
        "      --group-buckets 1024 --setting max-delivery-attempts=5",
    )
    p.add_argument("name", metavar="NAME")
    p.add_argument(
        "--group-header", metavar="H", help="header holding the group id (default JMSXGroupID)"
    )
    p.add_argument(
        "--group-mode",
        choices=("sticky", "shared"),
        help="sticky: a group stays with its consumer; shared: only while it holds "
        "unsettled messages (Qpid)",
    )
    p.add_argument("--shared-groups", action="store_true", help="same as --group-mode shared")
    p.add_argument(
        "--group-buckets",
        type=int,
        metavar="N",
        help="-1 track every group exactly, 0 no grouping, N hash into N buckets",
    )
    p.add_argument(
        "--group-rebalance", action="store_true", help="spread groups evenly when a consumer joins"
    )
    p.add_argument("--exclusive", action="store_true", help="one consumer receives everything")
    p.add_argument(
        "--setting",
        action="append",
        type=key_value,
        metavar="K=V",
        help="any queue setting, e.g. poison-policy=park (repeatable)",
    )
    json_flag(p)
    p.set_defaults(func=cmd_queue_create)
    p = queue.add_parser("delete", parents=admin_parents, help="delete a queue and its messages")
    p.add_argument("name", metavar="NAME")
    p.set_defaults(func=cmd_queue_delete)
    p = queue.add_parser(
        "purge", parents=admin_parents, help="drop every message of a queue that is not in flight"
    )
    p.add_argument("name", metavar="NAME")
    json_flag(p)
    p.set_defaults(func=cmd_queue_purge)

    # groups
    groups = subparsers.add_parser(
        "groups", help="inspect and steer message groups"
    ).add_subparsers(dest="groups_command", metavar="ACTION", required=True)
    p = groups.add_parser(
        "list",
        parents=admin_parents,
        formatter_class=Formatter,
        help="list a queue's groups: owner, backlog, in flight, age, state",
        description="List the groups of QUEUE. --json prints a JSON list of objects with\n"
        "the keys group, owner, backlog, in_flight, oldest_age_ms, state and\n"
        "node (the cluster node holding the group; null on a single node).",
    )
    p.add_argument("queue", metavar="QUEUE")
    p.add_argument(
        "--state",
        type=_states,
        help="only groups in this state (ready, owned, draining, parked; "
        "comma-separated for several)",
    )
    p.add_argument(
        "--owner", help="only groups owned by this consumer or connection id ('none': unowned)"
    )
    p.add_argument("--limit", type=non_negative, metavar="N", help="show at most N groups")
    json_flag(p)
    p.set_defaults(func=cmd_groups_list)
    p = groups.add_parser(
        "reset",
        parents=admin_parents,
        help="unbind one group (--group) or all; returns once requested",
        description="Reset group ownership. Each group moves once its current owner has "
        "settled its in-flight messages, so order is kept.",
    )
    p.add_argument("queue", metavar="QUEUE")
    p.add_argument("--group", metavar="G", help="only this group (default: every group)")
    json_flag(p)
    p.set_defaults(func=cmd_groups_reset)
    for op, text in (
        ("park", "hold a group: nothing more of it is delivered until resumed"),
        ("resume", "deliver a parked group again"),
    ):
        p = groups.add_parser(op, parents=admin_parents, help=text, description=text)
        p.add_argument("queue", metavar="QUEUE")
        p.add_argument("--group", metavar="G", required=True, help="the group")
        json_flag(p)
        p.set_defaults(func=_group_op(op))

    # user
    user = subparsers.add_parser("user", help="manage broker users").add_subparsers(
        dest="user_command", metavar="ACTION", required=True
    )
    add = user.add_parser("add", help="add or update a user (password read from stdin/tty)")
    add.add_argument("name")
    add.add_argument("--role", action="append", help="role to grant (repeatable)")
    add.add_argument("--password", help="password (prefer stdin or the prompt)")
    add.add_argument("--users-file", default="users.json", help="users file (default users.json)")
    add.set_defaults(func=cmd_user_add)
    token = user.add_parser("token", help="create an HTTP API token for a user (printed once)")
    token.add_argument("name")
    token.add_argument("--users-file", default="users.json", help="users file (default users.json)")
    token.set_defaults(func=cmd_user_token)
