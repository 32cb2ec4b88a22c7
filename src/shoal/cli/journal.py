"""`shoal journal check | dump | repair`: offline tools on a journal directory
(no broker; `repair` refuses a journal a running broker holds)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from shoal.cli.common import CliError, handled, json_flag, non_negative
from shoal.cli.output import out, print_json


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


@handled
def cmd_journal_check(args: argparse.Namespace) -> int:
    directory = _journal_dir(args.directory)
    report = _journal_tools().check(directory)
    if args.json:
        print_json(report)
    else:
        ok = report.get("ok", True)
        out(f"journal {report.get('directory', directory)}: {'OK' if ok else 'CORRUPT'}")
        for key in ("bytes", "batches", "records", "queues", "live_messages", "parked_groups"):
            if key in report:
                out(f"  {key.replace('_', ' ')}: {report[key]}")
        segments = report.get("segments")
        if isinstance(segments, list):
            out(f"  segments: {len(segments)}")
        for d in report.get("torn_tail") or []:
            out(
                f"  torn tail: {d.get('segment')} at {d.get('offset')} ({d.get('bytes')} bytes),"
                f" cut on open: {d.get('reason')}"
            )
        for d in report.get("corruption") or []:
            out(
                f"  CORRUPT: {d.get('segment')} at {d.get('offset')} ({d.get('bytes')} bytes):"
                f" {d.get('reason')}"
            )
        for d in (report.get("torn_tail") or []) + (report.get("corruption") or []):
            held = d.get("messages") or []
            if held:
                out(
                    f"  in the damage at {d.get('offset')}: {len(held)} messages "
                    f"({_journal_messages(held)})"
                )
        if not ok:
            out(
                "  run `shoal journal repair DIR` (or `shoal serve --repair`) to keep every "
                "valid record and move damage aside"
            )
    return 0 if report.get("ok", True) else 1


def _journal_messages(held: list[dict[str, Any]]) -> str:
    return ", ".join(
        f"queue {m['queue']!r} id {m['id']}" + (f" group {m['group']!r}" if m["group"] else "")
        for m in held
    )


@handled
def cmd_journal_repair(args: argparse.Namespace) -> int:
    from shoal.errors import StoreError

    directory = _journal_dir(args.directory)
    try:
        report = _journal_tools().repair(directory)
    except StoreError as exc:
        raise CliError(str(exc)) from None
    if args.json:
        print_json(report)
        return 0
    out(f"journal {report['directory']}: repaired")
    for note in report["notes"]:
        out(f"  {note}")
    out(f"  messages dropped: {report['dropped']}")  # each listed in its note above
    return 0


@handled
def cmd_journal_dump(args: argparse.Namespace) -> int:
    directory = _journal_dir(args.directory)
    body_bytes = None if args.full_bodies else args.body_bytes
    for record in _journal_tools().dump(directory, body_bytes=body_bytes):
        sys.stdout.write(json.dumps(record, default=str) + "\n")
    return 0


# --- registration -----------------------------------------------------------------


def register(subparsers: Any) -> None:
    """Add `shoal journal check | dump | repair`."""
    journal = subparsers.add_parser(
        "journal", help="check, dump or repair a journal directory (offline)"
    ).add_subparsers(dest="journal_command", metavar="ACTION", required=True)
    p = journal.add_parser(
        "check",
        help="verify a journal: exit 1 if corrupt (a torn tail alone is fine)",
        description="Verify every record of a journal without changing it. DIR is the "
        "journal directory or the broker's data directory.",
    )
    p.add_argument("directory", metavar="DIR")
    json_flag(p)
    p.set_defaults(func=cmd_journal_check)
    p = journal.add_parser(
        "dump",
        help="print every record as a JSON line",
        description="Print every journal record, in order, as one JSON object per line "
        "(bodies base64, cut to --body-bytes).",
    )
    p.add_argument("directory", metavar="DIR")
    p.add_argument(
        "--body-bytes",
        type=non_negative,
        default=64,
        metavar="N",
        help="show at most N bytes of each body (default 64)",
    )
    p.add_argument("--full-bodies", action="store_true", help="show whole bodies")
    p.set_defaults(func=cmd_journal_dump)
    p = journal.add_parser(
        "repair",
        help="cut a torn tail and move damage aside, listing the messages dropped",
        description="Do offline what `shoal serve --repair` does: keep every valid record, "
        "move damaged bytes to files next to their segment and list the messages "
        "dropped (queue, id, group). Refuses a journal a running broker holds.",
    )
    p.add_argument("directory", metavar="DIR")
    json_flag(p)
    p.set_defaults(func=cmd_journal_repair)
