"""`shoal cluster status` through the management HTTP API (``--http``)."""

from __future__ import annotations

import argparse
from typing import Any

from shoal.cli.admin import admin_client
from shoal.cli.common import Formatter, auth_options, handled, http_options, json_flag
from shoal.cli.output import out, print_json, table


@handled
def cmd_cluster_status(args: argparse.Namespace) -> int:
    status = admin_client(args).cluster()
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
    rows = [
        (
            n["node"],
            n["link"],
            n["state"],
            "yes" if n["member"] else "no",
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
    return 0


def register(subparsers: Any) -> None:
    """Add `shoal cluster status`."""
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
    json_flag(p)
    p.set_defaults(func=cmd_cluster_status)
