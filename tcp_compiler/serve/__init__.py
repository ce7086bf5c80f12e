"""Serving simulation (`tcpc serve`): requests, schedulers, paged KV and request-level latency,
each iteration timed by tcpc's own compiler and engine. docs/serving.md describes the model."""

from tcp_compiler.serve.costs import IterationCosts
from tcp_compiler.serve.options import ServeOptions
from tcp_compiler.serve.server import ServeResult, serve
from tcp_compiler.serve.workload import Request, lengths, load_trace, synthetic

__all__ = [
    "IterationCosts",
    "Request",
    "ServeOptions",
    "ServeResult",
    "lengths",
    "load_trace",
    "serve",
    "synthetic",
]
