"""`shoal serve`: run the broker with a configuration file and flags on top."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from shoal import __version__
from shoal._native import running_build
from shoal.errors import ConfigError, ListenerUnavailable

if TYPE_CHECKING:
    from shoal.server.app import BrokerServer


def cmd_serve(args: argparse.Namespace) -> int:
    from shoal.server.app import run
    from shoal.server.config import load_config, parse_hostport

    config = load_config(args.config)
    changes: dict[str, Any] = {}
    if args.stomp:
        changes["stomp"] = parse_hostport("--stomp", args.stomp)
    if args.http is not None:
        changes["http"] = parse_hostport("--http", args.http) if args.http else None
    if args.stomp_tls:
        changes["stomp_tls"] = parse_hostport("--stomp-tls", args.stomp_tls)
    if args.amqp is not None:
        changes["amqp"] = parse_hostport("--amqp", args.amqp) if args.amqp else None
    for key in ("ws", "ws_tls", "amqp_tls"):
        if getattr(args, key):
            changes[key] = parse_hostport("--" + key.replace("_", "-"), getattr(args, key))
    if args.tls_cert:
        changes["tls_cert"] = args.tls_cert
    if args.tls_key:
        changes["tls_key"] = args.tls_key
    if args.data is not None:
        changes["data"] = Path(args.data) if args.data not in ("", ":memory:") else None
    if args.insecure:
        changes["insecure"] = True
    if args.repair:
        changes["repair"] = True
    config = config.replace(**changes)
    if config.stomp_tls is not None and not (config.tls_cert and config.tls_key):
        raise ConfigError("--stomp-tls", "needs --tls-cert and --tls-key")
    if config.ws_tls is not None and not (config.tls_cert and config.tls_key):
        raise ConfigError("--ws-tls", "needs --tls-cert and --tls-key")
    if config.amqp_tls is not None and not (config.tls_cert and config.tls_key):
        raise ConfigError("--amqp-tls", "needs --tls-cert and --tls-key")
    config.check_exposure()
    if config.cluster is not None:
        from shoal.server.cluster.zookeeper import require_kazoo

        require_kazoo()
    logging.basicConfig(
        level=getattr(logging, args.log_level.upper()),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )

    def ready(server: BrokerServer) -> None:
        listeners = ", ".join(f"{k} {h}:{p}" for k, (h, p) in server.addresses.items())
        print(f"shoal {__version__} ({build_label()}) ready: {listeners}", flush=True)

    try:
        return run(config, ready=ready)
    except ListenerUnavailable as exc:  # a usage problem: status 2, as argparse's
        print(f"shoal: error: {exc}", file=sys.stderr)
        return 2


def build_label() -> str:
    """``compiled``, or ``pure: <why>`` (SHOAL_PURE, a stale or missing build)."""
    build, reason = running_build()
    return f"{build}: {reason}" if reason else build


def register(subparsers: Any) -> None:
    """Add `shoal serve`."""
    serve = subparsers.add_parser(
        "serve", help="run the broker (STOMP + HTTP, journal under ./data)"
    )
    serve.add_argument("--config", help="TOML configuration file")
    serve.add_argument("--data", help="data directory for the journal ('' or :memory: for none)")
    serve.add_argument("--stomp", help="STOMP listener HOST:PORT (default 127.0.0.1:61613)")
    serve.add_argument("--http", help="HTTP listener HOST:PORT (default 127.0.0.1:8161; '' off)")
    serve.add_argument("--stomp-tls", help="TLS STOMP listener HOST:PORT")
    serve.add_argument("--ws", help="STOMP over WebSocket listener HOST:PORT (default off)")
    serve.add_argument("--ws-tls", help="STOMP over WebSocket with TLS (wss://) HOST:PORT")
    serve.add_argument(
        "--amqp", help="AMQP 1.0 listener HOST:PORT (default 127.0.0.1:5672; '' turns it off)"
    )
    serve.add_argument("--amqp-tls", help="AMQP 1.0 over TLS (amqps://) listener HOST:PORT")
    serve.add_argument("--tls-cert", help="PEM certificate for the TLS listeners")
    serve.add_argument("--tls-key", help="PEM private key for the TLS listeners")
    serve.add_argument(
        "--insecure",
        action="store_true",
        help="allow non-loopback listeners without authentication",
    )
    serve.add_argument(
        "--repair",
        action="store_true",
        help="keep every valid journal record and move damaged parts aside",
    )
    serve.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    serve.set_defaults(func=cmd_serve)
