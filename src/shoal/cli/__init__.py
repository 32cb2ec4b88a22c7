"""`shoal` command line: serve the broker and talk to it.

One module per command family, each with a ``register(subparsers)`` that adds
its commands to the parser built here:

- ``serve.py``      ``shoal serve``: run the broker
- ``messaging.py``  ``shoal send | receive`` (``--url``): Shoal's own STOMP client,
                    or ``amqp.py`` (Qpid Proton) for an ``amqp://`` URL
- ``admin.py``      ``shoal queues | queue | groups`` through the management HTTP API
                    (``--http``), and ``shoal user`` on the users file
- ``cluster.py``    ``shoal cluster status`` through the management HTTP API
- ``journal.py``    ``shoal journal check | dump | repair``, offline on a journal directory
- ``output.py``     tables for people, JSON for scripts (``--json``)
- ``common.py``     what the families share: ``CliError``, argument types, the
                    ``--url`` / ``--http`` / ``--user`` options, one-line error handling

A new family is a module with its own ``register`` added to ``build_parser``'s
list. ``shoal pipeline`` comes from ``shoal.spark.pipeline`` when the Spark extra is
installed. Errors print one line, ``shoal: error: ...``, and exit non-zero;
never a traceback. Defaults can come from the environment: ``SHOAL_URL``,
``SHOAL_HTTP``, ``SHOAL_USER``, ``SHOAL_PASSWORD``.
"""

from __future__ import annotations

import argparse
import sys

from shoal import __version__
from shoal.cli import admin, cluster, journal, messaging, serve
from shoal.errors import BrokerError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="shoal", description="Shoal: a message broker where related messages stay together."
    )
    parser.add_argument("--version", action="version", version=f"shoal {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for family in (serve, messaging, admin, cluster, journal):
        family.register(sub)
    try:
        from shoal.spark.pipeline import add_pipeline_parser
    except ImportError:  # the Spark extra is not installed
        pass
    else:
        add_pipeline_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except BrokerError as exc:
        print(f"shoal: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
