"""Where the broker's instructions per message go, by library: one build, several workloads.

    python -m bench.profile --workload AW1 --workload W1

Each workload runs once on a fresh broker of this working tree's build under
callgrind, counted after the warm-up, as ``bench.instructions`` does (same
shapes: ``AW1`` is W1 over AMQP 1.0 with Proton clients). The counts are then
split by the shared object that executed them (self cost): the interpreter
(libpython), the compiled modules (mypyc), Proton's engine and its cffi
binding, libc. Also counted per message: calls into Proton through cffi
(``_cffi_f_*``) and the GIL taken back after one (``PyEval_RestoreThread``:
cffi releases the GIL around every call), with the callers that take it most.

This says where a workload's cost sits; ``bench.instructions`` compares
builds. Results go to bench/recorded/profile-<date>.json.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from bench.builds import REPO, measured_phases, short_revs, write_record
from bench.instructions import AW1, MESSAGES, instructions_once

# shared objects, by the start of their file name, into the groups reported
_GROUPS = (
    ("libpython", "interpreter (libpython)"),
    ("_native_lib__mypyc", "compiled modules (mypyc)"),
    ("cproton_ffi", "Proton engine and its cffi stubs"),
    ("_cffi_backend", "cffi runtime"),
    ("libc.", "libc (locks, memcpy, malloc)"),
)
_NAMED = re.compile(r"\((\d+)\)(?: (.*))?")
# What releasing and taking back the GIL executes (the locks also serve other
# users: compare with a workload that makes no cffi calls)
_GIL_FUNCTIONS = (
    "take_gil",
    "drop_gil",
    "PyEval_SaveThread",
    "PyEval_RestoreThread",
    "pthread_mutex_lock",
    "__pthread_mutex_unlock_usercnt",
    "pthread_cond_signal",
)


def _name(table: dict[str, str], spec: str) -> str:
    m = _NAMED.match(spec)
    if m is None:
        return spec
    if m.group(2) is not None:
        table[m.group(1)] = m.group(2)
    return table.get(m.group(1), m.group(1))


def parse_callgrind(path: Path) -> dict:
    """Self cost per shared object, and calls per callee with their callers."""
    objects: dict[str, str] = {}
    functions: dict[str, str] = {}
    by_object: Counter[str] = Counter()
    by_function: Counter[str] = Counter()
    calls: Counter[str] = Counter()
    restore_callers: Counter[str] = Counter()
    ob = fn = cfn = ""
    after_calls = False
    with path.open(errors="replace") as f:
        for line in f:
            c = line[:1]
            if c.isdigit() or c in "+-*":
                if after_calls:  # the inclusive cost of the call just named
                    after_calls = False
                    continue
                parts = line.split()
                if len(parts) >= 2:
                    by_object[ob] += int(parts[1])
                    by_function[fn] += int(parts[1])
            elif line.startswith("ob="):
                ob = _name(objects, line[3:].strip())
            elif line.startswith("fn="):
                fn = _name(functions, line[3:].strip())
            elif line.startswith("cfn="):
                cfn = _name(functions, line[4:].strip())
            elif line.startswith("cob="):
                _name(objects, line[4:].strip())
            elif line.startswith("calls="):
                n = int(line[6:].split()[0])
                calls[cfn] += n
                if cfn == "PyEval_RestoreThread":
                    restore_callers[fn] += n
                after_calls = True
    return {
        "by_object": by_object,
        "by_function": by_function,
        "calls": calls,
        "restore_callers": restore_callers,
    }


def summarize(parsed: dict, messages: int) -> dict:
    total = sum(parsed["by_object"].values())
    groups: Counter[str] = Counter()
    for obj, cost in parsed["by_object"].items():
        base = obj.rsplit("/", 1)[-1]
        label = next((lab for prefix, lab in _GROUPS if base.startswith(prefix)), "other")
        groups[label] += cost
    cffi_calls = sum(n for f, n in parsed["calls"].items() if f.startswith("_cffi_f_"))
    return {
        "per_message": total / messages,
        "by_group_per_message": {k: v / messages for k, v in groups.most_common()},
        "cffi_calls_per_message": cffi_calls / messages,
        "gil_retakes_per_message": parsed["calls"]["PyEval_RestoreThread"] / messages,
        "gil_and_lock_instructions_per_message": sum(
            cost
            for f, cost in parsed["by_function"].items()
            if f.split("@")[0] in _GIL_FUNCTIONS or f.split("'")[0] in _GIL_FUNCTIONS
        )
        / messages,
        "gil_retakes_by_caller_per_message": {
            f: n / messages for f, n in parsed["restore_callers"].most_common(12)
        },
    }


def history(runs: list[tuple[str, dict]]) -> list[str]:
    """docs/benchmark-history.md's section for every recorded run, newest first."""
    from bench.report import history_section

    rows = [
        [
            f"`{name}`",
            d["build"],
            w,
            f"{row['per_message']:,.0f}",
            f"{row['cffi_calls_per_message']:.1f}",
            f"{row['gil_and_lock_instructions_per_message']:,.0f}",
        ]
        for name, d in runs
        for w, row in d["rows"].items()
    ]
    columns = ["run", "build", "workload", "instructions per message"]
    columns += ["calls into Proton through cffi", "instructions in the GIL and its locks"]
    intro = (
        "`python -m bench.profile --workload AW1 --workload W1`: each workload under "
        "callgrind as `bench.instructions` runs it, the count split by the library that "
        "executed it (the split itself is in each file). Newest first."
    )
    return history_section("Instructions by library", intro, columns, rows, runs)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.profile",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--workload", action="append", default=[], help="W1, ..., AW1 (repeatable)")
    p.add_argument("--messages", type=int, default=MESSAGES)
    p.add_argument("--out", type=Path)
    a = p.parse_args(argv)
    if shutil.which("valgrind") is None:
        p.error("valgrind is not installed (apt-get install valgrind)")
    started = time.time()
    rows = {}
    with tempfile.TemporaryDirectory(prefix="bench-profile-") as tmp:
        for name in a.workload or [AW1, "W1"]:
            key, spec = (AW1, None) if name == AW1 else measured_phases(name, 0, a.messages)[0]
            work = Path(tmp) / key.replace("/", "-")
            run = instructions_once(REPO, key, spec, work, a.messages)
            row = summarize(parse_callgrind(work / "callgrind.out"), run["received"])
            row["counted_per_message"] = run["per_message"]  # callgrind's own total
            rows[key] = row
            groups = ", ".join(f"{k} {v:,.0f}" for k, v in row["by_group_per_message"].items())
            print(
                f"{key}: {row['per_message']:,.0f} instructions/msg ({groups}); "
                f"{row['cffi_calls_per_message']:.1f} cffi calls and "
                f"{row['gil_retakes_per_message']:.1f} GIL retakes per message "
                f"({row['gil_and_lock_instructions_per_message']:,.0f} instructions in "
                "the GIL and its locks)",
                file=sys.stderr,
                flush=True,
            )
    doc = {
        "kind": "profile",
        "command": "python -m bench.profile " + " ".join(argv or sys.argv[1:]),
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "build": short_revs({"head": REPO})["head"],
        "messages": a.messages,
        "rows": rows,
    }
    write_record(doc, "profile", a.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
