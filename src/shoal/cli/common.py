"""What the command families share: the error type, argument types, the
connection options (``--url``, ``--http``, ``--user``, ``--password``) and the
wrapper that turns stray exceptions into one-line errors."""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import sys
from collections.abc import Callable

from shoal.client.errors import ClientError

DEFAULT_URL = "stomp://127.0.0.1:61613"
DEFAULT_HTTP = "http://127.0.0.1:8161"


class CliError(ClientError):
    """A command-line problem found before talking to the broker."""

    code = "config"


class Formatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the line breaks of descriptions and examples."""


# --- argument types -------------------------------------------------------------


def key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected K=V, got {text!r}")
    return key, value


def non_negative(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {n}")
    return n


def seconds(text: str) -> float:
    try:
        s = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if s < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
    return s


# --- shared options -------------------------------------------------------------


def auth_options() -> argparse.ArgumentParser:
    """``--user`` / ``--password``: STOMP login or HTTP Basic auth."""
    auth = argparse.ArgumentParser(add_help=False)
    auth.add_argument(
        "--user", default=os.environ.get("SHOAL_USER"), help="user name (default $SHOAL_USER)"
    )
    auth.add_argument(
        "--password",
        default=os.environ.get("SHOAL_PASSWORD"),
        help="password (default $SHOAL_PASSWORD)",
    )
    return auth


def stomp_options() -> argparse.ArgumentParser:
    """``--url``: the broker's address, for the messaging commands."""
    stomp = argparse.ArgumentParser(add_help=False)
    stomp.add_argument(
        "--url",
        default=os.environ.get("SHOAL_URL", DEFAULT_URL),
        help="broker URL, stomp://[user:pass@]host:port[?options], stomp+ssl://..., "
        "or amqp://host:port (AMQP 1.0, via Qpid Proton; --user/--password for PLAIN) "
        f"(default $SHOAL_URL or {DEFAULT_URL})",
    )
    return stomp


def http_options() -> argparse.ArgumentParser:
    """``--http`` / ``--http-timeout``: the management API, for the admin commands."""
    http = argparse.ArgumentParser(add_help=False)
    http.add_argument(
        "--http",
        default=os.environ.get("SHOAL_HTTP", DEFAULT_HTTP),
        help=f"management API base URL (default $SHOAL_HTTP or {DEFAULT_HTTP})",
    )
    http.add_argument(
        "--http-timeout",
        type=seconds,
        default=30.0,
        metavar="S",
        help="seconds to wait for the API (default 30)",
    )
    return http


def json_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print JSON for scripts")


# --- errors -----------------------------------------------------------------------


def handled(func: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
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
