"""`tcpc compile --emit program`: the mapped Program in readable form, and HBM capacity errors."""

from __future__ import annotations

from pathlib import Path

from tcp_compiler.cli import main


def test_emit_program_lists_ops_placements_and_commands(tmp_path: Path, capsys) -> None:
    out = tmp_path / "decode.program"
    assert (
        main(
            [
                "compile",
                "llama-3.2-1b",
                "--phase",
                "decode",
                "--past",
                "64",
                "--emit",
                "program",
                "-o",
                str(out),
            ]
        )
        == 0
    )
    text = out.read_text()
    assert text.startswith("program llama-3.2-1b.decode on rngd (one chip):")
    assert "op 3 %l0.q [pass] layer 0" in text  # the embedding is cast to f32 as the norm fetches it
    assert "placement: TRF<-op" in text and "Packet[K:D]=32" in text
    assert " dma  chip 0" in text and " main chip 0" in text and "MB HBM" in text


def test_model_that_does_not_fit_says_how_many_chips_would(capsys) -> None:
    assert main(["compile", "llama-3.1-70b", "--phase", "decode", "--emit", "program"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "needs 141,779,878,400 bytes of HBM per chip" in err
    assert "'rngd' has 48,000,000,000" in err and "it fits with --tp 4" in err


def test_sharded_model_fits_on_four_chips(capsys) -> None:
    assert (
        main(
            [
                "compile",
                "llama-3.1-70b",
                "--phase",
                "decode",
                "--past",
                "16",
                "--emit",
                "program",
                "--hw",
                "rngd-4",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "on rngd-4 (one of 4 chips)" in out
    assert "[all_reduce]" in out and " link chip 0" in out


def _totals(args: list[str], capsys) -> dict[str, int]:
    assert main(["compile", "llama-3.2-1b", *args, "--emit", "program"]) == 0
    last = capsys.readouterr().out.rstrip("\n").splitlines()[-1]
    assert last.startswith("total: ")
    parts = [p.split() for p in last.removeprefix("total: ").split(", ")]
    return {" ".join(p[1:]): int(p[0].replace(",", "")) for p in parts}


def _simulated(prompt: int, gen: int):
    from simulator.hardware import load_hardware
    from tcp_compiler.frontend.model import load_model
    from tcp_compiler.frontend.precision import precision
    from tcp_compiler.simulate import simulate_generation

    return simulate_generation(load_model("llama-3.2-1b").config, load_hardware("rngd"), precision("bf16"), 1,
                               prompt, gen, trace_steps=1)  # fmt: skip


def _figures(run) -> dict[str, int]:
    p = run.program
    flops, hbm = int(p.flops.sum()), int(p.hbm_bytes.sum())
    return {"commands": len(p), "cycles": run.cycles, "FLOPs": flops, "HBM bytes": hbm}


def test_emitted_prefill_program_is_the_one_simulate_times(capsys) -> None:
    """2048 tokens: the scores spill, so both must run the online-softmax form (compile once skipped it)."""
    totals = _totals(["--seq", "2048"], capsys)
    sim = _simulated(2048, 1)
    assert totals == _figures(sim.prefill)
    assert all(note["form"] == "online" for note in sim.attention)


def test_emitted_decode_program_is_simulates_first_step(capsys) -> None:
    totals = _totals(["--phase", "decode", "--past", "96"], capsys)
    assert totals == _figures(_simulated(96, 2).traced_steps[0])


def test_emit_ir_final_prints_the_graph_after_passes_and_attention_choice(capsys) -> None:
    assert main(["compile", "llama-3.2-1b", "--seq", "2048", "--emit", "ir-final"]) == 0
    final = capsys.readouterr().out
    assert main(["compile", "llama-3.2-1b", "--seq", "2048", "--emit", "ir"]) == 0
    built = capsys.readouterr().out
    assert "blk" in final and "blk" not in built  # online-softmax key blocks exist only after lowering
    assert "silu" in built and "= silu(" not in final  # decomposed by the passes


def test_a_prefill_too_big_for_hbm_is_refused_before_the_attention_rewrite(capsys, monkeypatch) -> None:
    """Batch 64 x 2048 tokens spills 32 GB besides attention: refused without building the tiles."""
    import simulator.targets.rngd.mapping.book as book  # the recipe book the pipeline reaches

    def never(*args, **kwargs):
        raise AssertionError("the attention rewrite ran for a graph that cannot fit")

    monkeypatch.setattr(book, "rewrite_attention", never)
    assert main(["compile", "llama-3.1-8b", "--batch", "64", "--seq", "2048", "--emit", "program"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "needs at least" in err and "--tp 2" in err and "--batch 41" in err
