"""`tcpc run CHECKPOINT_DIR`: prefill and greedy decode through the IR interpreter."""

from __future__ import annotations

import argparse
import io
from collections.abc import Callable

import numpy as np

from tcp_compiler.cli import arg_types
from tcp_compiler.cli.output import check_outputs, write_atomically_bytes
from tcp_compiler.cli.status import check_length
from tcp_compiler.errors import CliError
from tcp_compiler.frontend.config import ModelConfig
from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import checkpoint_precision, precision

GET = ("download one (`huggingface-cli download meta-llama/Llama-3.2-1B --local-dir DIR`) or make a tiny "
       "random one (`python examples/make_tiny_checkpoint.py DIR` in tcpc's repository)")  # fmt: skip


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "run",
        help="run a checkpoint on token ids through the IR interpreter (prefill + greedy decode)",
        description="Prefill the prompt and run greedy decode steps through the numpy IR interpreter, "
        "in the checkpoint's own precision unless --dtype says otherwise.",
    )
    p.add_argument("checkpoint", help=f"a checkpoint directory (config.json + *.safetensors): {GET}")
    p.add_argument(
        "--prompt-ids", required=True, type=arg_types.token_ids, metavar="IDS",
        help="comma-separated token ids, e.g. 1,2,3",
    )  # fmt: skip
    p.add_argument(
        "--decode-steps", type=arg_types.decode_steps, default=0, metavar="N",
        help="greedy decode steps (default 0)",
    )  # fmt: skip
    arg_types.add_dtype(p, None, "precision (default: the checkpoint's)")
    p.add_argument(
        "--group-size", type=arg_types.group_size, metavar="N",
        help="w4 only: elements per scale (default 128)",
    )  # fmt: skip
    p.add_argument("--logits-out", metavar="FILE.npz", help="save prefill / decode_k logits and tokens")
    p.set_defaults(run=run)


def check_args(args: argparse.Namespace, cfg: ModelConfig) -> Callable[[], None]:
    """The rules between flags and the model (each flag's own range is its argparse type): ids in
    the vocabulary, and the prompt plus the fed-back decode tokens within the position limit
    `tcpc simulate` applies too (`status.check_length`, whose note is returned to say after the run)."""
    if max(args.prompt_ids) >= cfg.vocab:
        raise CliError(
            f"--prompt-ids: token id {max(args.prompt_ids)} is not below the vocabulary {cfg.vocab}"
        )
    return check_length(cfg, len(args.prompt_ids) + args.decode_steps)


def run(args: argparse.Namespace) -> int:
    # here: every tcpc command builds this parser
    from tcp_compiler.runtime.generate import NonFiniteError, generate
    from tcp_compiler.runtime.sampling import SamplingParams

    check_outputs({"--logits-out": args.logits_out})
    ids = args.prompt_ids
    model = load_model(args.checkpoint)
    if model.checkpoint is None:
        raise CliError(f"{args.checkpoint}: run needs a directory with *.safetensors weights; {GET}")
    cfg = model.config
    past_context = check_args(args, cfg)
    stored = model.scheme.format if model.scheme is not None else None
    prec = precision(args.dtype, args.group_size) if args.dtype else checkpoint_precision(cfg.dtype, stored)
    try:
        result = generate(
            cfg,
            model.checkpoint.load,
            [ids],
            prec,
            args.decode_steps,
            SamplingParams(max_tokens=args.decode_steps + 1),
        )
    except NonFiniteError as e:
        raise NonFiniteError(f"{args.checkpoint}: {e}") from None
    tokens = result.token_matrix[0]
    print(f"{cfg.name} ({cfg.family}, {prec.name}): prompt {ids} -> generated {tokens.tolist()}")
    past_context()
    if args.logits_out:
        arrays = {"prefill": result.prefill_logits[0], "tokens": tokens}
        arrays.update({f"decode_{k}": logits[0] for k, logits in enumerate(result.decode_logits)})
        buffer = io.BytesIO()
        np.savez(buffer, **arrays)
        write_atomically_bytes(args.logits_out, buffer.getvalue())
        print(f"wrote {args.logits_out}: {', '.join(arrays)}")
    return 0
