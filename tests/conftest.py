"""Fixtures shared by every test directory."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tests/support.py
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench/

from skips import SkipReport, skip_missing
from support import ShoalProcess

# Random examples on every run, CI included (Hypothesis' own "ci" profile would
# fix them): the properties must hold under any --hypothesis-seed. A failure
# prints the blob that replays it (@reproduce_failure).
settings.register_profile(
    "shoal",
    max_examples=60,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("shoal")


def pytest_configure(config: pytest.Config) -> None:
    # missing tools fail under CI; kernel skips are named in the summary (tests/skips.py)
    config.pluginmanager.register(SkipReport(), "shoal-skip-report")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--screenshots",
        metavar="DIR",
        help="write the console screenshots into DIR (make screenshots: docs/) "
        "instead of the test's temp dir",
    )


@pytest.fixture
def screenshot_path(request, tmp_path):
    """Where a test saves a picture named ``name``: its temp dir, or --screenshots DIR."""
    chosen = request.config.getoption("screenshots")

    def path(name: str) -> Path:
        out = Path(chosen) / name if chosen else tmp_path / name
        out.parent.mkdir(parents=True, exist_ok=True)
        return out

    return path


@pytest.fixture
def shoal_server(tmp_path):
    """Factory: start a real `shoal serve` on loopback ports it binds itself (port 0,
    read back from its ready line: `.ports`); stopped afterwards. ``build``: "compiled"
    or "pure" (default: as SHOAL_PURE says); strict (the default), a broker that logged
    an unexpected exception or died by a signal fails the test when it stops."""
    started: list[ShoalProcess] = []

    def start(
        *,
        data: Path | str | None = "default",
        config: str | None = None,
        args: list[str] | None = None,
        build: str | None = None,
        strict: bool = True,
    ) -> ShoalProcess:
        data_dir = tmp_path / f"data{len(started)}" if data == "default" else data
        cfg = None
        if config is not None:
            cfg = tmp_path / f"shoal{len(started)}.toml"
            cfg.write_text(config)
        proc = ShoalProcess(data_dir, cfg, args or [], build=build, strict=strict)
        started.append(proc)
        return proc.start()

    yield start
    failures = []
    for proc in started:
        try:
            proc.stop()
        except AssertionError as exc:  # strict: stop the others all the same
            failures.append(str(exc))
    assert not failures, "\n\n".join(failures)


CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture
def browser_page(tmp_path):
    """A page in Debian's headless Chromium (playwright) and the page errors it raised."""
    if not Path(CHROMIUM).exists():
        skip_missing("chromium")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"),
            executable_path=CHROMIUM,
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1280, "height": 800},
        )
        try:
            page = context.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            yield page, errors
        finally:
            context.close()
