"""`shoal cluster status`, `forget` and `rebalance` through the management
HTTP API (``--http``)."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from shoal.cli.admin import admin_client
from shoal.cli.common import CliError, Formatter, auth_options, handled, http_options, json_flag
from shoal.cli.output import out, print_json, table
from shoal.client.errors import ManagementError

JOIN_WAIT = 60.0  # s `cluster status --wait` waits for the nodes to join


@handled
def cmd_cluster_status(args: argparse.Namespace) -> int:
    client = admin_client(args)
    status = _members_joined(client, args.wait) if args.wait else client.cluster()
    if args.json:
        print_json(status)
        return 0
    zk = status.get("zookeeper", {})
    grouping = status["grouping"]
    if grouping != "zookeeper":  # Artemis' local/remote handlers: who decides
        grouping += f" (local handler {status.get('local_handler') or 'unknown'})"
    out(
        f"cluster {status['cluster']}, node {status['node']} (link {status['link']}); "
        f"grouping {grouping}, ZooKeeper {zk.get('connect')} {zk.get('state')}"
    )
    if not status.get("joined", True):
        out(
            "JOINING: this node is not a member yet (waiting for ZooKeeper); "
            "it delivers none of its groups"
        )
    elif status.get("fenced"):
        out("FENCED: this node delivers none of its groups until ZooKeeper confirms them")
    rows = [
        (
            n["node"],
            n["link"],
            n["state"],
            ("yes" if n.get("joined", True) else "joining") if n["member"] else "no",
            n["bindings_held"],
            n.get("forward_backlog"),
            ",".join(n["queues_with_consumers"]) or None,
        )
        for n in status["nodes"]
    ]
    table(rows, ("NODE", "LINK", "STATE", "MEMBER", "BINDINGS", "BACKLOG", "CONSUMED QUEUES"))
    out(
        f"decisions {status['decisions']}, pending {status['decisions_pending']}, "
        f"timeouts {status['decision_timeouts']}; forwarded {status['forwarded']}, "
        f"duplicates dropped {status['duplicates_dropped']}"
    )
    out(
        f"ungrouped messages: {status['message_load_balancing']}, {status['balanced']} sent "
        f"to other nodes; rebalance: {status['groups_moved']} groups moved, "
        f"{status['moves_waiting']} waiting to drain"
    )
    return 0


def _members_joined(client: Any, count: int) -> dict[str, Any]:
    """The status once ``count`` nodes are members that have joined (this one
    included, when counted); a node still starting (not answering) is asked again."""
    deadline = time.monotonic() + JOIN_WAIT
    while True:
        try:
            status: dict[str, Any] = client.cluster()
        except ManagementError as exc:
            if exc.status or time.monotonic() > deadline:  # an answer, or never one
                raise
        else:
            members = sum(1 for n in status["nodes"] if n["member"] and n.get("joined", True))
            if members >= count:
                return status
            if time.monotonic() > deadline:
                raise CliError(
                    f"{members} of {count} nodes are members after {JOIN_WAIT:g} s "
                    "(see each node's log)"
                )
        time.sleep(0.2)


FORGET_WAIT = 60.0  # s the CLI waits for the node to finish releasing


@handled
def cmd_cluster_forget(args: argparse.Namespace) -> int:
    node = args.node
    if not args.yes:
        if not sys.stdin.isatty():
            raise CliError(
                f"refusing to forget node {node!r} without confirmation: stdin is not a "
                "terminal; pass --yes"
            )
        answer = input(
            f"Release every group binding of node {node!r}? Its groups move to other "
            "nodes; messages still on it lose their order against the new ones. [y/N] "
        )
        if answer.strip().lower() not in ("y", "yes"):
            out("not forgotten")
            return 1
    client = admin_client(args)
    client.forget_node(node)
    entry = _finished(client, "forgets", "node", node, f"node {node!r}: still releasing")
    if args.json:
        print_json(entry)
    elif entry["state"] == "done":
        out(f"node {node} forgotten: {entry['released']} bindings released")
    else:
        raise CliError(f"forgetting node {node!r} failed: {entry.get('error')}")
    return 0 if entry["state"] == "done" else 1


def _finished(client: Any, kind: str, key: str, name: str, late: str) -> dict[str, Any]:
    """Wait for the status entry of a forget or a rebalance to leave 'running'."""
    deadline = time.monotonic() + FORGET_WAIT
    while True:
        entry = next((e for e in client.cluster().get(kind, []) if e[key] == name), None)
        if entry is not None and entry["state"] != "running":
            return dict(entry)
        if time.monotonic() > deadline:
            raise CliError(f"{late} after {FORGET_WAIT:g} s")
        time.sleep(0.1)


@handled
def cmd_cluster_rebalance(args: argparse.Namespace) -> int:
    queue = args.queue
    client = admin_client(args)
    client.rebalance_queue(queue)
    entry = _finished(client, "rebalances", "queue", queue, f"queue {queue!r}: still planning")
    if args.json:
        print_json(entry)
    elif entry["state"] == "done":
        moves = entry["moves"]
        out(
            f"queue {queue}: {len(moves)} of {entry['groups']} groups move, to nodes with "
            f"consumers {', '.join(entry['targets'])}; each moves once drained on its node"
        )
        for group, node in sorted(moves.items()):
            out(f"  {group} -> {node}")
    else:
        raise CliError(f"rebalancing queue {queue!r} failed: {entry.get('error')}")
    return 0 if entry["state"] == "done" else 1


def register(subparsers: Any) -> None:
    """Add `shoal cluster status`, `forget` and `rebalance`."""
    cluster = subparsers.add_parser(
        "cluster", help="inspect a cluster of shoal nodes (docs/cluster.md)"
    ).add_subparsers(dest="cluster_command", metavar="ACTION", required=True)
    p = cluster.add_parser(
        "status",
        parents=[http_options(), auth_options()],
        formatter_class=Formatter,
        help="nodes, link addresses and states, bindings held, forward backlog",
        description="The cluster as the node at --http sees it: every node with its link\n"
        "address, link state, queues with consumers, the bindings this node\n"
        "knows it holds, and the messages waiting to be forwarded to it.\n"
        "--json prints what /api/cluster serves.",
    )
    p.add_argument(
        "--wait",
        type=int,
        metavar="N",
        default=0,
        help=f"wait (up to {JOIN_WAIT:g} s) until N nodes are members: for a cluster just started",
    )
    json_flag(p)
    p.set_defaults(func=cmd_cluster_status)
    p = cluster.add_parser(
        "forget",
        parents=[http_options(), auth_options()],
        formatter_class=Formatter,
        help="release every group binding of a lost node (asks first; --yes skips)",
        description="Release the group bindings of NODE, a node that is gone (out of\n"
        "membership: a live node is refused). Its groups get a fresh decision\n"
        "with their next message; messages queued on other nodes for it are\n"
        "routed again, in order. Messages stranded on NODE itself lose their\n"
        "order against the new ones if it comes back (docs/cluster.md).",
    )
    p.add_argument("node", metavar="NODE", help="the lost node's id")
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    json_flag(p)
    p.set_defaults(func=cmd_cluster_forget)
    p = cluster.add_parser(
        "rebalance",
        parents=[http_options(), auth_options()],
        formatter_class=Formatter,
        help="spread a queue's groups evenly over the nodes with consumers",
        description="Plan which groups of QUEUE move so that the nodes whose queue has\n"
        "consumers hold as many groups as each other (counts differ by at most\n"
        "one), and publish the plan. Each holder releases a planned group once\n"
        "it is drained there (nothing pending or in flight), binding it to its\n"
        "new node; a group that never drains stays (docs/cluster.md).",
    )
    p.add_argument("queue", metavar="QUEUE", help="the queue's name")
    json_flag(p)
    p.set_defaults(func=cmd_cluster_rebalance)
