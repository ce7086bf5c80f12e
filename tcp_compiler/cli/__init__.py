"""The `tcpc` command line. Each subcommand is one module with `add_parser` and `run`."""

from __future__ import annotations

import argparse
import gc
import sys
from typing import Any, NoReturn

from ir.errors import TirError
from simulator.errors import SimulatorError
from tcp_compiler import __version__
from tcp_compiler.cli import (
    calibrate_cmd,
    compile_cmd,
    hw_cmd,
    inspect_cmd,
    plan_cmd,
    run_cmd,
    search_cmd,
    serve_cmd,
    simulate_cmd,
    sweep_cmd,
    validate_cmd,
)
from tcp_compiler.cli.flags import describe
from tcp_compiler.errors import TcpcError

COMMANDS = [
    simulate_cmd,
    serve_cmd,
    plan_cmd,
    validate_cmd,
    calibrate_cmd,
    sweep_cmd,
    search_cmd,
    compile_cmd,
    run_cmd,
    inspect_cmd,
    hw_cmd,
]


class _Parser(argparse.ArgumentParser):
    """argparse with usage errors on one line, like every other tcpc error (and exit code 2); the
    subcommand parsers inherit it. No parser takes a prefix of a long flag (`--batch` for
    `--batch-bucket`): a prefix silently sets another flag than the one the user meant."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **{"allow_abbrev": False, **kwargs})

    def error(self, message: str) -> NoReturn:
        text = message.replace("\r", "\\r").replace("\n", "\\n")
        self.exit(2, f"tcpc: error: {text} (see '{self.prog} --help')\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="tcpc",
        description="Compile transformer models to an einsum IR and cost them on TCP (RNGD) hardware.",
    )
    parser.add_argument("--version", action="version", version=f"tcpc {__version__}")
    subparsers = parser.add_subparsers(title="commands", metavar="COMMAND")
    for command in COMMANDS:
        command.add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Runs one command; returns its exit code: 0, 2 for any bad input (one line on stderr), 1 when
    a sweep's every point failed, 130 when interrupted; 0 when the reader of stdout went away
    (`tcpc simulate | head` read what it wanted).
    --help and --version exit through SystemExit(0) as argparse does."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        if e.code in (0, None):
            raise
        return e.code if isinstance(e.code, int) else 2
    if not hasattr(args, "run"):
        parser.print_help()
        return 0
    args.argv = list(sys.argv[1:] if argv is None else argv)  # for the reports' provenance
    # Compiles make millions of long-lived objects (graph nodes, ops, report rows) and almost no
    # reference cycles: the default thresholds rescan that heap often, a fifth of a long prefill.
    gc.set_threshold(50_000, 20, 100)
    try:
        code = args.run(args)
        sys.stdout.flush()  # here, so a failing standard output is reported like any error
        return code
    except (TirError, TcpcError, SimulatorError) as e:
        print(f"tcpc: error: {describe(e)}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader went away (`| head`): it had what it wanted; stop quietly
        _detach_stdout()
        return 0
    except OSError as e:  # files are written through write_atomically, which names them
        if e.filename is not None:
            raise
        _detach_stdout()
        print(f"tcpc: error: cannot write standard output: {e.strerror}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("tcpc: interrupted", file=sys.stderr)
        return 130


def _detach_stdout() -> None:
    """Points standard output at /dev/null, so the interpreter's own final flush cannot fail too."""
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


if __name__ == "__main__":
    sys.exit(main())
