"""`--executor` and `--ray-address`: where a sweep's points or a search's trials run, declared
once for both commands (tcp_compiler.executors)."""

from __future__ import annotations

import argparse
from contextlib import AbstractContextManager, nullcontext

from tcp_compiler.errors import CliError
from tcp_compiler.executors import EXECUTORS, Executor


def add_executor_flags(p: argparse.ArgumentParser, what: str) -> None:
    """The flags; `what`: what runs ("points", "trials")."""
    p.add_argument("--executor", choices=EXECUTORS, default="local",
                   help=f"where {what} run: local worker processes (default) or Ray tasks")  # fmt: skip
    p.add_argument("--ray-address", metavar="ADDR",
                   help="with --executor ray: the cluster (default: a local Ray, started, then stopped)")


def executor_of(args: argparse.Namespace) -> Executor:
    """The executor the flags name (Ray imported only when it runs)."""
    from tcp_compiler.executors import local_executor, ray_executor

    if args.ray_address and args.executor != "ray":
        raise CliError("--ray-address applies to --executor ray")
    return ray_executor(args.ray_address) if args.executor == "ray" else local_executor


def executor_session(args: argparse.Namespace, jobs: int) -> AbstractContextManager:
    """Held around work that runs the executor many times (a search's generations): one Ray for
    all of them, so it starts once and its workers keep their caches."""
    from tcp_compiler.executors import ray_session

    return ray_session(args.ray_address, jobs) if args.executor == "ray" else nullcontext()
