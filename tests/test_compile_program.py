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
    assert text.startswith("program llama-3.2-1b.decode on rngd (one of 1 chips):")
    assert "op 3 %l0.q [pass] layer 0" in text  # the embedding is cast to f32 as the norm fetches it
    assert "placement: TRF<-op" in text and "Packet[K:D]=32" in text
    assert " dma  chip 0" in text and " main chip 0" in text and "MB HBM" in text


def test_model_that_does_not_fit_says_how_many_chips_would(capsys) -> None:
    assert main(["compile", "llama-3.1-70b", "--phase", "decode", "--emit", "program"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "needs 141,779,878,400 bytes of HBM per chip" in err
    assert "'rngd' has 48,000,000,000" in err and "it would fit on 4 chips" in err


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
