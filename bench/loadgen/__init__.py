"""STOMP load generator: producer and consumer processes on raw sockets, and the checks.

from bench.loadgen.runner import LoadSpec, run_load
"""
