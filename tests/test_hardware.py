"""The hardware spec: fact-sheet numbers, presets, `extends`, one-line validation errors, `tcpc hw`."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from simulator.errors import HardwareError, SimulatorError
from simulator.hardware import list_presets, load_hardware
from simulator.targets.rngd import RNGD
from simulator.targets.rngd.spec import DTYPES, Hardware
from tcp_compiler.cli import main

ROOT = Path(__file__).parents[1]
RNGD_TEXT = (RNGD.specs_dir / "rngd.toml").read_text()


@pytest.fixture(scope="module")
def rngd() -> Hardware:
    return load_hardware("rngd")


# --- numbers of tcp-hardware.md ---------------------------------------------------------------


def test_hierarchy(rngd: Hardware) -> None:
    assert rngd.system.chips == 1 and rngd.chip.clusters == 2 and rngd.pes == 8
    assert rngd.slices_per_cluster == 256 and rngd.slices == 512
    assert rngd.chip.lanes_per_slice == 8 and rngd.chip.flit_bytes == 32 and rngd.chip.packet_bytes == 64


@pytest.mark.parametrize(
    ("dtype", "macs"), [("bf16", 131_072), ("fp8", 262_144), ("i8", 262_144), ("i4", 524_288)]
)
def test_macs_per_cycle_per_chip(rngd: Hardware, dtype: str, macs: int) -> None:
    assert rngd.macs_per_cycle(dtype) == macs
    assert rngd.flops_per_second(dtype) == pytest.approx(2 * macs * 1e9)


def test_peaks_and_ridge(rngd: Hardware) -> None:
    assert rngd.flops_per_second("bf16") / 1e12 == pytest.approx(262.144)
    assert round(rngd.flops_per_second("bf16") / 1e12) == 262
    assert rngd.hbm_bytes_per_second == pytest.approx(1.44e12)
    assert rngd.hbm_peak_bytes_per_second == pytest.approx(1.5e12)
    for dtype in DTYPES:
        assert rngd.ridge_flops_per_byte(dtype) == pytest.approx(
            rngd.flops_per_second(dtype) / rngd.hbm_bytes_per_second
        )
    assert rngd.ridge_flops_per_byte("bf16") == pytest.approx(262.144e12 / 1.44e12)


def test_memories_links_and_time(rngd: Hardware) -> None:
    assert rngd.dm_bytes == 256 * 2**20
    assert rngd.trf_bytes == 32 * 2**20 and rngd.vrf_bytes == 4 * 2**20
    assert rngd.hbm.capacity_bytes == 48_000_000_000
    assert rngd.link_bytes_per_cycle == pytest.approx(64.0)
    assert rngd.seconds(1_000_000) == pytest.approx(1e-3)
    assert rngd.cycles(rngd.system.kernel_launch_s) == pytest.approx(10_000)


def test_contraction_tables(rngd: Hardware) -> None:
    assert rngd.contraction.macs_per_lane_cycle == {
        "bf16": 32,
        "f16": 32,
        "fp8": 64,
        "i8": 64,
        "i4": 128,
        "f32": 8,
    }
    assert rngd.contraction.packet_reducer_latency["bf16"] == 5
    assert (
        rngd.contraction.packet_reducer_latency["fp8"] == rngd.contraction.packet_reducer_latency["i8"] == 6
    )
    assert rngd.contraction.packet_reducer_latency["i4"] == 7
    assert rngd.contraction.accumulators_per_slice == 1024 and rngd.contraction.stream_supply_bytes == 32


def test_ir_dtype_names_map_onto_the_tables(rngd: Hardware) -> None:
    assert rngd.macs_per_cycle("fp8e4m3") == rngd.macs_per_cycle("fp8e5m2") == rngd.macs_per_cycle("fp8")
    with pytest.raises(HardwareError, match=r"contraction\.macs_per_lane_cycle\.bool"):
        rngd.macs_per_cycle("bool")


def test_assumed_values_are_the_knobs_of_the_fact_sheet(rngd: Hardware) -> None:
    assumed = set(rngd.assumed_keys)
    for key in (
        "hbm.sustained_bytes_per_cycle",
        "switch.hop_cycles",
        "system.link_latency_s",
        "system.kernel_launch_s",
        "contraction.stream_supply_bytes",
        "contraction.macs_per_lane_cycle.f32",
    ):
        assert key in assumed
    assert "hbm.peak_bytes_per_cycle" not in assumed and "chip.clock_hz" not in assumed


def test_hardware_is_hashable_and_loads_equal(rngd: Hardware) -> None:
    again = load_hardware("rngd")
    assert again == rngd and hash(again) == hash(rngd)
    assert {rngd: 1}[again] == 1
    assert load_hardware("rngd-2") != rngd


def test_each_value_is_declared_once_with_type_unit_and_range() -> None:
    params = Hardware.params()
    assert list(Hardware.tables()) == list(dict.fromkeys(k.split(".")[0] for k in params))
    hbm = params["hbm.sustained_bytes_per_cycle"]
    assert (hbm.kind, hbm.unit, hbm.lo, hbm.hi) == (float, "B/cycle", 1e-3, 1e9)
    macs = params["contraction.macs_per_lane_cycle"]
    assert macs.kind is int and macs.per == DTYPES
    assert Hardware.leaf_keys()[:2] == ("system.chips", "system.link_bytes_per_s")
    per_dtype = [p for p in params.values() if p.per == DTYPES]  # e.g. MACs, reducer latency, energy, area
    assert len(per_dtype) >= 2
    assert len(Hardware.leaf_keys()) == len(params) + len(per_dtype) * (len(DTYPES) - 1)


def test_values_read_and_set_by_their_address(rngd: Hardware) -> None:
    assert rngd.value("hbm.sustained_bytes_per_cycle") == rngd.hbm.sustained_bytes_per_cycle == 1440.0
    faster = rngd.with_value("hbm.sustained_bytes_per_cycle", 1500, source="assumed: a sweep point")
    assert faster.hbm.sustained_bytes_per_cycle == 1500.0
    assert isinstance(faster.hbm.sustained_bytes_per_cycle, float)
    assert faster.sources["hbm.sustained_bytes_per_cycle"] == "assumed: a sweep point"
    assert "hbm.sustained_bytes_per_cycle" in faster.assumed_keys
    assert rngd.hbm.sustained_bytes_per_cycle == 1440.0 and hash(faster) != hash(rngd)  # a new spec
    assert faster.hbm_bytes_per_second == 1500.0 * rngd.chip.clock_hz
    wider = rngd.with_value("contraction.macs_per_lane_cycle.fp8", 128)
    assert wider.macs_per_cycle("fp8") == 2 * rngd.macs_per_cycle("fp8")
    assert wider.packet_elements("bf16") == 32
    four = rngd.with_value("system.chips", 4)
    assert four.system.chips == 4 and four.parameters()[1:] == rngd.parameters()[1:]


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("hbm.sustained_bytes_per_cyle", 1, r"^hbm\.sustained_bytes_per_cyle: no such key \(did you mean "
         r"'hbm\.sustained_bytes_per_cycle'\?\)$"),
        ("hbm", 1, r"^hbm: no such key$"),
        ("contraction.macs_per_lane_cycle", 1, r"^contraction\.macs_per_lane_cycle: no such key"),
        ("contraction.macs_per_lane_cycle.f64", 1, r"^contraction\.macs_per_lane_cycle\.f64: no such key"),
        ("chip.clusters", 2.5, r"^chip\.clusters: expected an integer from 1 to 1,024, got float 2\.5$"),
        ("chip.clusters", True, r"^chip\.clusters: expected an integer from 1 to 1,024, got boolean true$"),
        ("hbm.peak_bytes_per_cycle", "fast",
         r"^hbm\.peak_bytes_per_cycle: expected a number from 0\.001 to 1e\+09, got string 'fast'$"),
        ("hbm.peak_bytes_per_cycle", 1000,
         r"^hbm\.sustained_bytes_per_cycle: 1440 exceeds hbm\.peak_bytes_per_cycle 1000$"),
    ],
)  # fmt: skip
def test_setting_a_bad_value_is_one_line_naming_the_key(rngd: Hardware, key: str, value, message) -> None:
    with pytest.raises(HardwareError, match=message):
        rngd.with_value(key, value)


def test_simulator_does_not_import_compiler_or_ir() -> None:
    code = (
        "import sys, simulator.hardware, simulator.errors\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('tcp_compiler', 'ir')]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


# --- presets, sources, extends ----------------------------------------------------------------


def test_presets_load_with_their_chip_counts() -> None:
    assert list_presets() == ["rngd", "rngd-2", "rngd-2x-hbm", "rngd-4", "rngd-8"]
    for name, chips in [("rngd", 1), ("rngd-2", 2), ("rngd-4", 4), ("rngd-8", 8)]:
        hw = load_hardware(name)
        assert hw.system.chips == chips and hw.name == name
        assert hw.macs_per_cycle("bf16") == 131_072  # the rest comes from rngd


@pytest.mark.parametrize("name", list_presets())
def test_every_value_of_every_preset_has_a_valid_source(name: str) -> None:
    hw = load_hardware(name)
    assert set(hw.sources) == set(Hardware.leaf_keys())
    for key in Hardware.leaf_keys():
        assert re.match(r"^(published|derived|assumed): \S", hw.sources[key]), (key, hw.sources[key])


def test_extends_a_preset_by_name_and_overrides(tmp_path: Path) -> None:
    spec = tmp_path / "fast.toml"
    spec.write_text(
        'extends = "rngd-4"\n[hbm]\n'
        'sustained_bytes_per_cycle = { value = 1500, source = "assumed: what-if study" }\n'
    )
    hw = load_hardware(str(spec))
    assert hw.system.chips == 4 and hw.hbm.sustained_bytes_per_cycle == 1500
    assert hw.sources["hbm.sustained_bytes_per_cycle"] == "assumed: what-if study"
    assert hw.sources["system.chips"].startswith("published:")
    assert hw.name == "fast" and hw.extends == "rngd-4"


def test_extends_a_relative_path_in_a_chain(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "base.toml").write_text(
        'extends = "rngd"\n[chip]\nclock_hz = { value = 2e9, source = "assumed: faster clock" }\n'
    )
    (tmp_path / "sub" / "top.toml").write_text(
        'extends = "../base.toml"\n[contraction.macs_per_lane_cycle]\n'
        'bf16 = { value = 64, source = "assumed: double bf16 rate" }\n'
    )
    hw = load_hardware(tmp_path / "sub" / "top.toml")
    assert hw.chip.clock_hz == 2e9 and hw.contraction.macs_per_lane_cycle["bf16"] == 64
    assert hw.contraction.macs_per_lane_cycle["fp8"] == 64  # untouched dtype comes from the base
    assert hw.flops_per_second("bf16") == pytest.approx(4 * 262.144e12)


def test_what_if_example_doubles_hbm(rngd: Hardware) -> None:
    hw = load_hardware("rngd-2x-hbm")
    assert hw.hbm.peak_bytes_per_cycle == 2 * rngd.hbm.peak_bytes_per_cycle
    assert hw.hbm.sustained_bytes_per_cycle == 2 * rngd.hbm.sustained_bytes_per_cycle
    assert hw.ridge_flops_per_byte("bf16") == pytest.approx(rngd.ridge_flops_per_byte("bf16") / 2)
    assert hw.is_assumed("hbm.peak_bytes_per_cycle")


def test_to_dict_is_json_and_complete(rngd: Hardware) -> None:
    d = json.loads(json.dumps(rngd.to_dict()))
    assert d["parameters"]["hbm"]["peak_bytes_per_cycle"]["value"] == 1500
    assert d["parameters"]["contraction"]["macs_per_lane_cycle"]["i4"]["value"] == 128
    assert d["derived"]["per_chip"]["dtypes"]["bf16"]["macs_per_cycle"] == 131_072
    assert d["derived"]["per_chip"]["dm_bytes"] == 256 * 2**20
    assert "hbm.sustained_bytes_per_cycle" in d["assumed"]


# --- validation -------------------------------------------------------------------------------

EXT = 'extends = "rngd"\n'
GOOD_SOURCE = 'source = "published: SPEC"'

# case -> (file text, dotted key the message must name, further text it must contain)
BAD_SPECS: dict[str, tuple[str, str, str]] = {
    "syntax": (
        EXT + "[hbm]\npeak_bytes_per_cycle = { value = 1500, " + GOOD_SOURCE + "\n",
        "hbm.peak_bytes_per_cycle",
        "bad.toml:3:",
    ),
    "unknown table": (EXT + "[hmb]\n", "hmb", "did you mean 'hbm'"),
    "unknown key": (
        EXT + "[hbm]\npeak_bytes_per_cycl = { value = 1500, " + GOOD_SOURCE + " }\n",
        "hbm.peak_bytes_per_cycl",
        "did you mean 'hbm.peak_bytes_per_cycle'",
    ),
    "unknown dtype": (
        EXT + "[contraction.macs_per_lane_cycle]\nbf8 = { value = 64, " + GOOD_SOURCE + " }\n",
        "contraction.macs_per_lane_cycle.bf8",
        "unknown dtype",
    ),
    "missing key": (
        re.sub(r"(?m)^row_miss_cycles = .*\n", "", RNGD_TEXT),
        "hbm.row_miss_cycles",
        "missing key",
    ),
    "float for int": (
        EXT + "[chip]\nclusters = { value = 2.5, " + GOOD_SOURCE + " }\n",
        "chip.clusters",
        "expected an integer from 1 to 1,024, got float 2.5",
    ),
    "string for number": (
        EXT + '[chip]\nclock_hz = { value = "1 GHz", ' + GOOD_SOURCE + " }\n",
        "chip.clock_hz",
        "expected a number",
    ),
    "bool as number": (
        EXT + "[hbm]\npeak_bytes_per_cycle = { value = true, " + GOOD_SOURCE + " }\n",
        "hbm.peak_bytes_per_cycle",
        "boolean true",
    ),
    "bool as integer": (
        EXT + "[dma]\nengines = { value = false, " + GOOD_SOURCE + " }\n",
        "dma.engines",
        "boolean false",
    ),
    "zero": (EXT + "[dma]\nengines = { value = 0, " + GOOD_SOURCE + " }\n", "dma.engines", "got int 0"),
    "negative": (
        EXT + "[chip]\nclock_hz = { value = -1e9, " + GOOD_SOURCE + " }\n",
        "chip.clock_hz",
        "from 1e+06 to 1e+11, got float -1e+09",
    ),
    "not finite": (
        EXT + "[chip]\nclock_hz = { value = inf, " + GOOD_SOURCE + " }\n",
        "chip.clock_hz",
        "to 1e+11, got float inf",
    ),
    "bare value": (EXT + "[chip]\nclock_hz = 1e9\n", "chip.clock_hz", "source"),
    "missing source": (
        EXT + "[hbm]\npeak_bytes_per_cycle = { value = 3000 }\n",
        "hbm.peak_bytes_per_cycle",
        "source",
    ),
    "bad source prefix": (
        EXT + '[hbm]\npeak_bytes_per_cycle = { value = 3000, source = "guess: more" }\n',
        "hbm.peak_bytes_per_cycle",
        "'published:', 'derived:' or 'assumed:'",
    ),
    "empty source reference": (
        EXT + '[hbm]\npeak_bytes_per_cycle = { value = 3000, source = "assumed:" }\n',
        "hbm.peak_bytes_per_cycle",
        "followed by a reference",
    ),
    "sustained above peak": (
        EXT + '[hbm]\nsustained_bytes_per_cycle = { value = 2000, source = "assumed: x" }\n',
        "hbm.sustained_bytes_per_cycle",
        "exceeds hbm.peak_bytes_per_cycle",
    ),
    "unknown extends": ('extends = "rngdd"\n', "extends", "did you mean 'rngd'"),
    "extends cycle": ('extends = "other.toml"\n', "extends", "cycle"),
    "extends missing file": ('extends = "nope.toml"\n', "extends", "cannot read"),
}


@pytest.mark.parametrize("case", sorted(BAD_SPECS))
def test_bad_spec_is_one_hardware_error_naming_file_and_key(case: str, tmp_path: Path) -> None:
    text, key, detail = BAD_SPECS[case]
    bad = tmp_path / "bad.toml"
    bad.write_text(text)
    (tmp_path / "other.toml").write_text('extends = "bad.toml"\n')
    with pytest.raises(HardwareError) as info:
        load_hardware(str(bad))
    message = str(info.value)
    assert "\n" not in message
    assert "bad.toml" in message or "other.toml" in message
    assert re.search(rf"(^|[: ]){re.escape(key)}(:|$| )", message), message
    assert detail in message, message


def test_unknown_preset_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(HardwareError, match=r"rngd9: unknown hardware preset"):
        load_hardware("rngd9")
    with pytest.raises(HardwareError, match=r"nope\.toml: cannot read"):
        load_hardware(str(tmp_path / "nope.toml"))


def test_hardware_error_is_one_line() -> None:
    assert str(HardwareError("a\nb")) == "a\\nb"
    assert issubclass(HardwareError, SimulatorError)


# --- tcpc hw ----------------------------------------------------------------------------------


def test_cli_show_prints_tables(capsys) -> None:
    assert main(["hw", "show", "rngd"]) == 0
    out = capsys.readouterr().out
    assert "262" in out and "assumed" in out
    assert "131,072" in out and "256 MiB" in out and "1,440 GB/s" in out


def test_cli_show_multi_chip_and_file(capsys) -> None:
    assert main(["hw", "show", "rngd-4"]) == 0
    assert "x 4 chips" in capsys.readouterr().out
    assert main(["hw", "show", str(ROOT / "simulator" / "specs" / "rngd-2x-hbm.toml")]) == 0
    assert "2,880 GB/s" in capsys.readouterr().out


def test_cli_show_json(capsys) -> None:
    assert main(["hw", "show", "rngd-8", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["name"] == "rngd-8" and report["parameters"]["system"]["chips"]["value"] == 8
    assert report["derived"]["system"]["chips"] == 8


def test_cli_list(capsys) -> None:
    assert main(["hw", "list", "--json"]) == 0
    assert [(p["name"], p["chips"]) for p in json.loads(capsys.readouterr().out)] == [
        ("rngd", 1), ("rngd-2", 2), ("rngd-2x-hbm", 1), ("rngd-4", 4), ("rngd-8", 8)
    ]
    assert main(["hw", "list"]) == 0
    assert "rngd-8" in capsys.readouterr().out
    assert main(["hw"]) == 0
    assert "show" in capsys.readouterr().out


def test_cli_bad_file_is_one_line_exit_2(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(BAD_SPECS["zero"][0])
    assert main(["hw", "show", str(bad)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and captured.err.startswith("tcpc: error: ")
    assert "bad.toml" in captured.err and "dma.engines" in captured.err


def test_console_script_bad_file_has_no_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(BAD_SPECS["syntax"][0])
    exe = shutil.which("tcpc")
    cmd = [exe] if exe else [sys.executable, "-m", "tcp_compiler"]
    result = subprocess.run([*cmd, "hw", "show", str(bad)], capture_output=True, text=True, check=False)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert "bad.toml:3:" in result.stderr and "hbm.peak_bytes_per_cycle" in result.stderr
