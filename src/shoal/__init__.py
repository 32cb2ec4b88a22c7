"""Shoal: a message broker where related messages stay together."""

from shoal import _native

__version__ = "0.1.0"

# Before any compiled module can load: honour SHOAL_PURE, skip stale builds.
_native.install()
