"""`tcpc calibrate`: values recovered from runs simulated with them (written as a real server's
result files), the fitted spec file loads and applies them, and bad input is one line."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from simulator.calibration import Observed, choose
from simulator.hardware import load_hardware
from tcp_compiler.cli import main
from tcp_compiler.frontend.model import load_model
from tcp_compiler.frontend.precision import precision
from tcp_compiler.pipeline import CompileOptions, keeping_fronts, lower
from tcp_compiler.report.serve_build import serve_report
from tcp_compiler.serve import Request, ServeOptions, serve
from tcp_compiler.serve.metrics import duration
from tcp_compiler.validation.calibrate import CostCache, candidates

MODEL = "llama-3.2-1b"
BASE = load_hardware("rngd")
# Perturbed assumed values: an HBM efficiency (sustained bandwidth), a power state and an energy
# value, each far from the default (1440, 25, 3.3).
TRUTH = {
    "hbm.sustained_bytes_per_cycle": 1000.0,
    "power.active_baseline_w": 12.0,
    "energy.dma_pj_per_byte": 9.0,
}


def _requests(n: int) -> list[Request]:
    return [Request(i, None, 48 + 40 * (i % 3), 6 + 5 * (i % 2)) for i in range(n)]


def write_result(path: Path, concurrency: int, spec, n: int = 6) -> Path:
    """A vLLM `bench serve --save-result` file (per-request arrays and a power_w) of the requests
    served in a closed loop on `spec`: what a real server's run would give if `spec` were it."""
    config, prec = load_model(MODEL).config, precision("bf16")
    result = serve(config, spec, prec, _requests(n), ServeOptions(concurrency=concurrency), token_gaps=True)
    seqs = result.sequences
    doc = {
        "max_concurrency": concurrency,
        "duration": duration(result),
        "completed": len(seqs),
        "input_lens": [s.request.prompt_len for s in seqs],
        "output_lens": [s.request.output_len for s in seqs],
        "ttfts": [s.first_token_s - s.arrival_s for s in seqs],
        "latencies": [s.finish_s - s.arrival_s for s in seqs],
        "itls": [list(s.itl) for s in seqs],
        "power_w": serve_report(result).energy.average_power_w,
    }
    path.write_text(json.dumps(doc))
    return path


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> list[Path]:
    folder = tmp_path_factory.mktemp("measured")
    truth = BASE.with_values(TRUTH)
    return [write_result(folder / f"c{c}.json", c, truth) for c in (1, 2, 4)]


def test_calibrate_recovers_the_values_runs_were_simulated_with(results, tmp_path, capsys) -> None:
    out = tmp_path / "fitted.toml"
    code = main(["calibrate", *map(str, results), "--model", MODEL, "--fit", ",".join(TRUTH), "-o", str(out)])
    assert code == 0
    printed = capsys.readouterr().out
    fitted = load_hardware(out)
    assert fitted.extends == "rngd"
    for address, v in TRUTH.items():
        assert fitted.value(address) == pytest.approx(v, rel=0.02), address
        assert fitted.sources[address] == "derived: fitted to 3 measured runs: c1.json, c2.json, c4.json"
    assert fitted.value("hbm.peak_bytes_per_cycle") == BASE.value("hbm.peak_bytes_per_cycle")
    # Each run left out is predicted by the values fitted to the others (near exactly: same truth).
    rows = [line for line in printed.splitlines() if re.search(r"c\d\.json|_s |power_w", line)]
    assert rows and "n/a" not in " ".join(rows)
    left_out = [float(v) for v in re.findall(r"([+-]\d+\.\d)%\s*\S*$", "\n".join(rows), re.M)]
    assert left_out and max(abs(v) for v in left_out) < 2.0


def test_calibrate_recovers_the_kernel_launch(tmp_path) -> None:
    """x3 the default launch: a few tenths of a percent of each figure at these loads (the host's
    fixed work is ~3 ms an iteration), recovered from three runs. Fitted beside the HBM bandwidth it
    could not be: at loads this light both only lengthen every iteration alike."""
    truth = BASE.with_value("system.kernel_launch_s", 30e-6)
    results = [str(write_result(tmp_path / f"c{c}.json", c, truth)) for c in (1, 2, 4)]
    out = tmp_path / "launch.toml"
    argv = ["calibrate", *results, "--model", MODEL, "--fit", "system.kernel_launch_s", "-o", str(out)]
    assert main(argv) == 0
    assert load_hardware(out).value("system.kernel_launch_s") == pytest.approx(30e-6, rel=0.02)


def test_bad_fit_keys_are_one_line_errors_naming_them(results, tmp_path, capsys) -> None:
    out = tmp_path / "never.toml"
    cases = {
        "hbm.sustained_bytes_per_cycel": "no such key",
        "hbm.peak_bytes_per_cycle": "not an assumed value",
        "contraction.stream_supply_bytes": "integer",
        "hbm": "no such key",
    }
    for key, why in cases.items():
        code = main(["calibrate", str(results[0]), "--model", MODEL, "--fit", key, "-o", str(out)])
        err = capsys.readouterr().err
        assert code == 2 and len(err.strip().splitlines()) == 1, err
        assert key in err and why in err, err
        assert not out.exists()


def test_values_are_chosen_by_their_effect_skipping_those_already_described() -> None:
    runs_figures = 6
    effects = {
        "a.strong": np.linspace(1.0, 2.0, runs_figures),
        "a.same_direction": 3.0 * np.linspace(1.0, 2.0, runs_figures),  # what a.strong does, larger
        "a.other": np.array([1.0, 0.0, 1.0, 0.0, 1.0, 0.0]) * 0.5,
        "a.weak": np.full(runs_figures, 0.001),
        "a.none": np.zeros(runs_figures),
    }
    assert choose(effects, most=3) == ["a.same_direction", "a.other"]
    assert choose(effects, most=1) == ["a.same_direction"]


def test_energy_values_are_candidates_only_when_power_was_measured() -> None:
    def observed(power: float) -> Observed:
        return Observed("run", np.array([0.1, 0.01, 100.0, power]), lambda spec: np.zeros(4))

    without, with_power = candidates(BASE, [observed(np.nan)]), candidates(BASE, [observed(120.0)])
    assert "hbm.sustained_bytes_per_cycle" in without and "hbm.sustained_bytes_per_cycle" in with_power
    assert not [a for a in without if a.split(".")[0] in ("energy", "power", "operating_point", "area")]
    assert "energy.dma_pj_per_byte" in with_power and "power.idle_w" in with_power
    assert not [a for a in with_power if a.startswith("area.")]
    assert all(BASE.is_assumed(a) and BASE.param(a)[0].kind is float for a in with_power)


def test_a_value_no_measured_figure_moves_is_refused_and_nothing_written(results, tmp_path, capsys) -> None:
    doc = json.loads(results[0].read_text())
    del doc["power_w"]  # no power measured: the power states move no figure
    unpowered = tmp_path / "unpowered.json"
    unpowered.write_text(json.dumps(doc))
    out = tmp_path / "never.toml"
    code = main(["calibrate", str(unpowered), "--model", MODEL, "--fit", "power.idle_w", "-o", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and "cannot tell power.idle_w apart" in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_iteration_costs_are_reused_across_values_no_program_reads() -> None:
    """Power states, the area model and the host's work move no compiled program nor its timing:
    their costs are the same object; HBM bandwidth and energy values (joules priced per program)
    are not."""
    config, prec, options = load_model(MODEL).config, precision("bf16"), ServeOptions()
    cache = CostCache()

    def costs(spec):
        return cache.costs(config, spec, prec, CompileOptions(), options, 1)

    first = costs(BASE)
    free = {"power.idle_w": 30, "area.fixed_mm2": 100, "host.sample_s": 2e-3, "system.kernel_launch_s": 1e-4}
    assert costs(BASE.with_values(free)) is first
    assert costs(BASE.with_value("hbm.sustained_bytes_per_cycle", 1000.0)) is not first
    assert costs(BASE.with_value("energy.dma_pj_per_byte", 9.0)) is not first


def test_spec_free_lowering_is_kept_for_every_shape_while_calibrating() -> None:
    config, prec = load_model(MODEL).config, precision("bf16")
    shapes = [("prefill", n) for n in (16, 32, 48, 64, 80)] + [("decode", n) for n in (16, 32, 48, 64, 80)]
    with keeping_fronts(len(shapes)):
        for phase, n in shapes:
            lower(config, BASE, prec, phase, n)
        slower = BASE.with_value("hbm.sustained_bytes_per_cycle", 1000.0)
        graphs = [lower(config, slower, prec, phase, n).model for phase, n in shapes]
        again = [lower(config, BASE, prec, phase, n).model for phase, n in shapes]
    assert all(a is b for a, b in zip(graphs, again, strict=True))  # built once, for both specs
    assert lower(config, BASE, prec, *shapes[0]).model is not graphs[0]  # outside: 8 kept, oldest gone
