"""Random and mutated text never raises anything but the project's own errors.

parse() may only raise ParseError; verify() of whatever parses may only raise VerifyError; and
whatever verifies prints and parses back to the same text.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ir

SEED = """# every construct of the grammar
graph "fuzz.seed" {
  %x = input() : f32[B=2, S=4, D=8]
  %w = param() : f32[D=8, F=3]
  %y = einsum(%x, %w) {eq = "B S D, D F -> B S F"} : f32[B=2, S=4, F=3]
  %m = reduce(%y) {op = max, axes = [F, S]} : f32[B=2]
  %c = const() {values = [1, -2.5, inf, -inf, nan, 1e-05]} : bf16[A=6]
  %i = iota() {axis = S} : i32[S=4]
  %g = gather(%x, %i) {axis = S} : f32[B=2, S=4, D=8]
  %t = const() {value = true} : bool[]
  %z = where(%t, %x, %g) : f32[B=2, S=4, D=8]
  %s = slice(%z) {axis = S, start = 3, stop = 4} : f32[B=2, S=1, D=8]
  return %y, %m, %s
}
"""
EXAMPLES = [SEED] + [p.read_text() for p in sorted(Path(__file__).parents[1].glob("examples/ir/*.tir"))]
TOKENS = [
    "%",
    "%x",
    "=",
    "(",
    ")",
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    "->",
    "#",
    '"',
    "\\",
    "\n",
    " ",
    "graph",
    "return",
    "einsum",
    "f32",
    "bf16",
    "i4",
    "A=3",
    "A=0",
    "inf",
    "nan",
    "-",
    "1e999",
    "true",
    "[[[[",
    "%y = exp(%x) : f32[]",
    "\x00",
    "é",
    "S=-1",
    "eq",
    "axes = [B, B]",
    "value = 1",
    "A=" + "9" * 400,
    "1" + "0" * 5000,
    '"\\ud800"',
    "S=4294967297",
]
SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _check(text: str) -> None:
    try:
        g = ir.parse(text, "fuzz.tir")
    except ir.ParseError as e:
        assert str(e).startswith("fuzz.tir:") and "\n" not in str(e)
        return
    try:
        ir.verify(g, "fuzz.tir")
    except ir.VerifyError as e:
        assert "\n" not in str(e)
        return
    printed = ir.print_graph(g)
    assert ir.print_graph(ir.parse(printed)) == printed


@st.composite
def mutated(draw) -> str:
    text = draw(st.sampled_from(EXAMPLES))
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(text)))
        j = draw(st.integers(i, min(len(text), i + 40)))
        how = draw(st.sampled_from(["delete", "insert", "replace", "duplicate"]))
        if how == "delete":
            text = text[:i] + text[j:]
        elif how == "insert":
            text = text[:i] + draw(st.sampled_from(TOKENS)) + text[i:]
        elif how == "replace":
            text = text[:i] + draw(st.text(max_size=5)) + text[j:]
        else:
            text = text[:j] + text[i:j] + text[j:]
    return text


@SETTINGS
@given(st.text(max_size=300))
def test_random_text(text: str) -> None:
    _check(text)


@SETTINGS
@given(st.lists(st.sampled_from(TOKENS), max_size=60).map("".join))
def test_random_token_soup(text: str) -> None:
    _check(text)


@SETTINGS
@given(mutated())
def test_mutated_examples(text: str) -> None:
    _check(text)


def test_seed_itself_is_valid() -> None:
    g = ir.parse(SEED, "seed.tir")
    ir.verify(g, "seed.tir")


def test_deep_nesting_is_a_parse_error() -> None:
    text = "graph g { %c = const() {values = " + "[" * 5000 + "]" * 5000 + "} : f32[] return %c }"
    try:
        _check(text)
    except RecursionError:  # pragma: no cover - the point of the test
        raise AssertionError("deep nesting escaped as RecursionError") from None


def test_syntax_error_names_line_column_and_expectation() -> None:
    text = "graph g {\n  %x = input() : f32[A=2]\n  %y = exp(%x : f32[A=2]\n  return %y\n}\n"
    try:
        ir.parse(text, "bad.tir")
    except ir.ParseError as e:
        assert str(e) == "bad.tir:3:15: expected ')' or ',', got ':'"
    else:
        raise AssertionError("no ParseError")


def test_unknown_op_suggests_the_closest() -> None:
    text = "graph g {\n  %x = input() : f32[A=2]\n  %y = exq(%x) : f32[A=2]\n  return %y\n}\n"
    try:
        ir.parse(text, "bad.tir")
    except ir.ParseError as e:
        assert str(e).startswith("bad.tir:3:8: unknown op 'exq'; did you mean ")
        assert "'exp'" in str(e)
    else:
        raise AssertionError("no ParseError")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("graph g {\n  %x = input() : f32[A=" + "9" * 400 + "]\n  return %x\n}\n", "over the limit"),
        ("graph g {\n  %x = input() : f32[A=4294967297]\n  return %x\n}\n", "axis 'A' has size 4294967297"),
        (
            "graph g {\n  %x = input() : f32[A=65536, B=65536, C=65536, D=65536]\n  return %x\n}\n",
            "elements",
        ),
        (
            "graph g {\n  %c = const() {value = 1" + "0" * 5000 + "} : f32[]\n  return %c\n}\n",
            "(5001 digits) does not fit 64 bits",
        ),
        ("graph g {\n  %c = const() {value = 9223372036854775808} : f32[]\n  return %c\n}\n", "64 bits"),
        ('graph "g\\ud800" {\n  %x = input() : f32[A=2]\n  return %x\n}\n', "lone surrogate"),
        ('graph g {\n  %x = input() {eq = "\\udfff"} : f32[A=2]\n  return %x\n}\n', "lone surrogate"),
    ],
)
def test_out_of_range_numbers_and_bad_unicode_are_parse_errors(text: str, expected: str) -> None:
    """Sizes and integers are bounded before any arithmetic, strings are valid Unicode: no
    OverflowError, 4,300-digit ValueError or UnicodeEncodeError can escape later."""
    with pytest.raises(ir.ParseError) as info:
        ir.parse(text, "big.tir")
    message = str(info.value)
    assert message.startswith("big.tir:2:") or message.startswith("big.tir:1:"), message
    assert expected in message and "\n" not in message and len(message) < 300, message
    message.encode("utf-8")  # printable


def test_the_largest_allowed_axis_parses() -> None:
    g = ir.parse("graph g {\n  %x = input() : f32[A=4294967296]\n  return %x\n}\n")
    assert g["x"].type.shape == (4294967296,)


def test_load_refuses_devices_fifos_folders_and_huge_files(tmp_path: Path) -> None:
    """/dev/zero never ends and a FIFO blocks: neither is read; a file over the limit is refused
    from its size alone."""
    import os

    from ir.parser import MAX_FILE_BYTES

    fifo = tmp_path / "pipe.tir"
    os.mkfifo(fifo)
    big = tmp_path / "big.tir"
    with open(big, "wb") as f:
        f.truncate(MAX_FILE_BYTES + 1)  # sparse: no 8 MB written
    for path, expected in (
        ("/dev/zero", "not a regular file"),
        (fifo, "not a regular file"),
        (tmp_path, "it is a folder"),
        (big, "limit for .tir files"),
    ):
        with pytest.raises(ir.ParseError, match=expected) as info:
            ir.load(path)
        assert str(info.value).startswith(f"{path}: cannot read: ")
