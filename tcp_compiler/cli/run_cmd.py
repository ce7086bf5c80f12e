"""`tcpc run CHECKPOINT_DIR`: prefill and greedy decode through the IR interpreter."""

from __future__ import annotations

import argparse
import io

import numpy as np

from tcp_compiler.cli.output import check_outputs, write_atomically_bytes
from tcp_compiler.errors import CliError
from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import PRECISIONS, checkpoint_precision, precision
from tcp_compiler.runtime.generate import generate
from tcp_compiler.runtime.sampling import SamplingParams


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "run",
        help="run a checkpoint on token ids through the IR interpreter (prefill + greedy decode)",
        description="Prefill the prompt and run greedy decode steps through the numpy IR interpreter, "
        "in the checkpoint's own precision unless --dtype says otherwise.",
    )
    p.add_argument("checkpoint", help="a Hugging Face checkpoint directory (config.json + *.safetensors)")
    p.add_argument("--prompt-ids", required=True, metavar="IDS", help="comma-separated token ids, e.g. 1,2,3")
    p.add_argument("--decode-steps", type=int, default=0, metavar="N", help="greedy decode steps (default 0)")
    p.add_argument("--dtype", choices=sorted(PRECISIONS), help="precision (default: the checkpoint's)")
    p.add_argument("--group-size", type=int, metavar="N", help="w4 only: elements per scale (default 128)")
    p.add_argument("--logits-out", metavar="FILE.npz", help="save prefill / decode_k logits and tokens")
    p.set_defaults(run=run)


def parse_ids(text: str) -> list[int]:
    try:
        ids = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise CliError(f"--prompt-ids: expected comma-separated integers, got {text!r}") from None
    if not ids:
        raise CliError("--prompt-ids: expected at least one token id")
    return ids


def run(args: argparse.Namespace) -> int:
    check_outputs({"--logits-out": args.logits_out})
    ids = parse_ids(args.prompt_ids)
    if args.decode_steps < 0:
        raise CliError(f"--decode-steps must be 0 or more, got {args.decode_steps}")
    model = load_model(args.checkpoint)
    if model.checkpoint is None:
        raise CliError(f"{args.checkpoint}: run needs a checkpoint directory with *.safetensors weights")
    cfg = model.config
    prec = precision(args.dtype, args.group_size) if args.dtype else checkpoint_precision(cfg.dtype)
    result = generate(
        cfg,
        model.checkpoint.load,
        [ids],
        prec,
        args.decode_steps,
        SamplingParams(max_tokens=args.decode_steps + 1),
    )
    tokens = result.token_matrix[0]
    print(f"{cfg.name} ({cfg.family}, {prec.name}): prompt {ids} -> generated {tokens.tolist()}")
    if args.logits_out:
        arrays = {"prefill": result.prefill_logits[0], "tokens": tokens}
        arrays.update({f"decode_{k}": logits[0] for k, logits in enumerate(result.decode_logits)})
        buffer = io.BytesIO()
        np.savez(buffer, **arrays)
        write_atomically_bytes(args.logits_out, buffer.getvalue())
        print(f"wrote {args.logits_out}: {', '.join(arrays)}")
    return 0
