"""The layers' import rules (docs/architecture.md), read from the sources with
``ast``: every import counts, those under ``TYPE_CHECKING`` and those inside
functions included.

- ``shoal.cluster`` is the pure grouping decisions: it imports neither the
  server nor the broker, and nothing that does I/O or keeps time.
- ``shoal.replication`` is the pure replication core (a primary/backup
  pair): the same rules as ``shoal.cluster``, and neither the store nor the
  cluster's grouping (the server joins them).
- ``shoal.broker`` is the pure core: it imports nothing of the server (the
  cluster's I/O, ``shoal.server.cluster``, included), the store, management,
  the client, the command line or Spark.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

# what a pure decision module may not import: the server, the broker, and
# anything that does I/O or keeps time
PURE = (
    "shoal.server",
    "shoal.broker",
    "asyncio",
    "socket",
    "selectors",
    "ssl",
    "threading",
    "subprocess",
    "kazoo",
    "time",
)

# package -> the modules (and their submodules) it may not import
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "shoal.cluster": PURE,
    "shoal.replication": (*PURE, "shoal.store", "shoal.cluster"),
    "shoal.broker": (
        "shoal.server",
        "shoal.store",
        "shoal.management",
        "shoal.client",
        "shoal.cli",
        "shoal.spark",
    ),
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported(source: str, module: str, is_package: bool = False) -> set[str]:
    """Every module ``source`` (the text of ``module``) imports, by full name;
    ``from a import b`` names both ``a`` and ``a.b`` (``b`` may be a module)."""
    names: set[str] = set()
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                origin = ".".join([*base, node.module] if node.module else base)
            else:
                origin = node.module or ""
            names.add(origin)
            names.update(f"{origin}.{alias.name}" for alias in node.names)
    return names


def breaks(name: str, forbidden: tuple[str, ...]) -> bool:
    return any(name == f or name.startswith(f + ".") for f in forbidden)


def modules_of(package: str) -> list[Path]:
    return sorted((SRC / Path(*package.split("."))).rglob("*.py"))


CASES = [(package, path) for package in FORBIDDEN for path in modules_of(package)]


@pytest.mark.parametrize(
    ("package", "path"), CASES, ids=[module_name(path) for _package, path in CASES]
)
def test_a_layer_imports_nothing_of_the_layers_above_it(package: str, path: Path) -> None:
    module = module_name(path)
    names = imported(path.read_text(), module, path.name == "__init__.py")
    wrong = sorted(n for n in names if breaks(n, FORBIDDEN[package]))
    assert not wrong, f"{module} imports {', '.join(wrong)}, which {package} may not"


def test_every_layer_has_modules_to_check() -> None:
    assert all(modules_of(package) for package in FORBIDDEN)


def test_the_reader_sees_type_only_lazy_and_relative_imports() -> None:
    source = """
from typing import TYPE_CHECKING
if TYPE_CHECKING:
    from shoal.server.session_api import ServerState
def later():
    import shoal.store.memory
from . import grouping
from ..server import cluster
"""
    names = imported(source, "shoal.cluster.example")
    assert {
        "shoal.server.session_api",
        "shoal.store.memory",
        "shoal.cluster.grouping",
        "shoal.server.cluster",
    } <= names
    assert breaks("shoal.server.cluster", FORBIDDEN["shoal.cluster"])
    assert breaks("shoal.server.cluster.link", FORBIDDEN["shoal.broker"])
    assert not breaks("shoal.servers", FORBIDDEN["shoal.broker"])
    assert not breaks("shoal.cluster.grouping", FORBIDDEN["shoal.broker"])
