"""CPU seconds of `tcpc validate` on a measured run of 300 requests at concurrency 128 (target:
under 30 s CPU): a vLLM `bench serve --save-result --save-detailed` file is written with seeded
lengths and made-up times (the times do not change the work: the replay serves the lengths), then
`tcpc validate FILE --model MODEL` runs in this process and its CPU time is printed, the reading
of the file and the replay through the serving simulation included.

Run: python benchmarks/validate_speed.py [--requests N] [--concurrency C] [--prompt-len P]
     [--gen-len G] [--model M] [--dtype D]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import tempfile
import time
from pathlib import Path

import numpy as np

from tcp_compiler.cli import main as tcpc
from tcp_compiler.serve.workload import lengths

TPOT_S, TTFT_S = 0.02, 0.3  # made-up measured times: any positive values make the same work


def measured_file(path: Path, requests: int, concurrency: int, prompt: str, gen: str) -> None:
    rng = np.random.default_rng(0)
    inputs, outputs = lengths(prompt).draw(requests, rng), lengths(gen).draw(requests, rng)
    doc = {
        "backend": "vllm", "request_rate": "inf", "max_concurrency": concurrency, "num_prompts": requests,
        "completed": requests, "input_lens": inputs.tolist(), "output_lens": outputs.tolist(),
        "ttfts": [TTFT_S] * requests, "itls": [[TPOT_S] * (int(o) - 1) for o in outputs],
        "errors": [""] * requests,
    }  # fmt: skip
    path.write_text(json.dumps(doc))


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--concurrency", type=int, default=128)
    same = "as tcpc serve's (default %(default)s)"
    parser.add_argument("--prompt-len", default="uniform:64:1024", help=same)
    parser.add_argument("--gen-len", default="uniform:64:1024", help=same)
    parser.add_argument("--model", default="llama-3.1-8b")
    parser.add_argument("--dtype", default="bf16")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "measured.json"
        measured_file(path, args.requests, args.concurrency, args.prompt_len, args.gen_len)
        out = io.StringIO()
        start = time.process_time()
        with contextlib.redirect_stdout(out):
            code = tcpc(["validate", str(path), "--model", args.model, "--dtype", args.dtype])
        cpu = time.process_time() - start
    assert code == 0, out.getvalue()[-2000:]
    print(f"tcpc validate: {args.requests} requests at concurrency {args.concurrency}, prompts "
          f"{args.prompt_len}, outputs {args.gen_len}, {args.model} {args.dtype} on rngd: {cpu:.1f} s CPU "
          "(target 30 s)")  # fmt: skip


if __name__ == "__main__":
    main()
