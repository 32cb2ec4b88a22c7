"""Ad hoc load runs: `python -m bench.loadgen --broker activemq --messages 100000 ...`.

Either starts a broker (--broker shoal|activemq|rabbitmq, in a temp dir, stopped at
the end) or uses one already running (--port, and --broker-pid to read its CPU/RSS).
Prints the result as JSON. The standard matrix is `python -m bench.run`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
from pathlib import Path

from bench.loadgen.runner import LoadSpec, Target, run_load


def _add_spec_args(p: argparse.ArgumentParser) -> None:
    for f in dataclasses.fields(LoadSpec):
        name = "--" + f.name.replace("_", "-")
        default = f.default
        if isinstance(default, bool):
            p.add_argument(name, action=argparse.BooleanOptionalAction, default=default)
        elif f.name in ("prefetch",):
            p.add_argument(name, type=int, default=default, help="0: broker default")
        elif f.name == "group_header":
            p.add_argument(name, default=default, help="'' for none")
        else:
            p.add_argument(name, type=type(default), default=default)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.loadgen",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--broker", choices=["shoal", "activemq", "rabbitmq"])
    p.add_argument("--port", type=int, help="STOMP port of a running broker")
    p.add_argument("--broker-pid", type=int, default=0)
    p.add_argument("--login", help="login:passcode for CONNECT")
    p.add_argument("--warmup", type=int, default=0, help="warm-up messages first (W1 shape)")
    p.add_argument("--reps", type=int, default=1)
    p.add_argument("--workdir", type=Path)
    _add_spec_args(p)
    args = p.parse_args(argv)
    fields = {f.name for f in dataclasses.fields(LoadSpec)}
    spec_kw = {k: v for k, v in vars(args).items() if k in fields}
    if not spec_kw.get("prefetch"):
        spec_kw["prefetch"] = None
    if spec_kw.get("group_header") == "":
        spec_kw["group_header"] = None
    spec = LoadSpec(**spec_kw)
    if not args.broker and not args.port:
        p.error("--broker or --port")
    tmp = tempfile.TemporaryDirectory(prefix="bench-")
    work = args.workdir or Path(tmp.name)
    handle = None
    try:
        if args.broker:
            from bench.peers import start_broker

            handle = start_broker(args.broker, work / "broker")
            target = handle
        else:
            hdrs = {}
            if args.login:
                hdrs["login"], _, hdrs["passcode"] = args.login.partition(":")
            target = Target(args.port, args.broker_pid, hdrs)
        if args.warmup:
            warm = dataclasses.replace(
                spec,
                messages=args.warmup,
                destination="/queue/BENCH.WARMUP",
                rate=0,
                receipts=False,
                persistent=False,
            )
            r = run_load(target, warm, work / "warmup")
            print(f"warm-up: {r['throughput']:.0f} msg/s", file=sys.stderr)
        for rep in range(args.reps):
            s = dataclasses.replace(spec, destination=f"{spec.destination}.{rep}")
            r = run_load(target, s, work / f"rep{rep}")
            print(json.dumps(r, default=str))
    finally:
        if handle is not None:
            handle.stop()
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
