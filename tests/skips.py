"""Why a test skips, in words a CI run can act on (``SkipReport``: tests/conftest.py registers it).

Every skip reason starts with what stopped the test:

* ``missing: <what> (<how to get it>)``: a tool, package or build that
  ``make sysdeps``, ``make install`` or ``make compile`` provides. With the
  environment variable ``CI`` set such a skip is a failure: CI installs
  everything, so a skip there hides a test. A module skipped at import
  (``pytest.importorskip``: "could not import ...") counts as missing too;
  it cannot fail as a test, so the run's exit status fails instead.
* ``kernel: <what>``: a feature or permission this machine's kernel does not
  give (io_uring disabled, mounting without root). Still a skip; the run's
  summary lists these under "skipped for the kernel".
* anything else: a plain skip (a variable ``make test`` sets, an option).
"""

from __future__ import annotations

import os
import shutil
from collections import Counter
from collections.abc import Generator
from typing import NoReturn

import pytest

MISSING = "missing: "
KERNEL = "kernel: "
IMPORT_FAILED = "could not import "  # pytest.importorskip's words
CLEAN = (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED)


def missing(what: str, remedy: str = "make sysdeps") -> str:
    return f"{MISSING}{what} ({remedy})"


def kernel(what: str) -> str:
    return f"{KERNEL}{what}"


def skip_missing(what: str, remedy: str = "make sysdeps") -> NoReturn:
    __tracebackhide__ = True  # the skip is reported at its caller's line
    pytest.skip(missing(what, remedy))


def skip_kernel(what: str) -> NoReturn:
    __tracebackhide__ = True
    pytest.skip(kernel(what))


def needs_tools(*tools: str, remedy: str = "make sysdeps") -> pytest.MarkDecorator:
    """Skip (in CI: fail) unless every command is on PATH."""
    absent = [t for t in tools if shutil.which(t) is None]
    return pytest.mark.skipif(bool(absent), reason=missing(", ".join(absent), remedy))


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def skip_reason(report: pytest.TestReport | pytest.CollectReport) -> str | None:
    """The reason of a skip (not an xfail), or None."""
    if not report.skipped or hasattr(report, "wasxfail"):
        return None
    if isinstance(report.longrepr, tuple):
        reason = report.longrepr[2]
    else:
        reason = str(report.longrepr)
    return reason.removeprefix("Skipped: ")


def is_missing(reason: str) -> bool:
    return reason.startswith((MISSING, IMPORT_FAILED))


class SkipReport:
    """Fails missing-tool skips under CI and names kernel skips in the summary."""

    def __init__(self) -> None:
        self.kernel: Counter[str] = Counter()
        self.missing_modules: list[tuple[str, str]] = []  # (module, reason)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        reason = skip_reason(report)
        if reason is not None and in_ci() and is_missing(reason):
            report.outcome = "failed"
            report.longrepr = f"CI is set, so a missing prerequisite fails: {reason}"
        elif reason is not None and reason.startswith(KERNEL):
            self.kernel[reason] += 1
        return report

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        reason = skip_reason(report)
        if reason is None:
            return
        if is_missing(reason):
            self.missing_modules.append((report.nodeid, reason))
        elif reason.startswith(KERNEL):
            self.kernel[reason] += 1

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if in_ci() and self.missing_modules and session.exitstatus in CLEAN:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        tr = terminalreporter
        if self.kernel:
            tr.write_sep("=", "skipped for the kernel", yellow=True)
            for reason, n in sorted(self.kernel.items()):
                tr.write_line(f"{n} test{'s' * (n != 1)}: {reason.removeprefix(KERNEL)}")
        if in_ci() and self.missing_modules:
            tr.write_sep("=", "modules skipped with CI set (the run fails)", red=True)
            for nodeid, reason in self.missing_modules:
                tr.write_line(f"{nodeid}: {reason}")
