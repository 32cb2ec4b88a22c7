"""Shoal: a message broker where related messages stay together."""

__version__ = "0.1.0"
