"""The cost rules behind `tcpc inspect`: FLOPs, bytes read and written, totals and intensity."""

from __future__ import annotations

import pytest

import ir
from ir import BF16, BOOL, F32, I4, I8, I32, TensorType
from ir.analysis import node_cost
from ir.ops import OpCost
from ir.ops.elementwise import BINARY, UNARY

T = TensorType.of


def cost_of(kind: str, *operand_types: TensorType, type: TensorType | None = None, **attrs) -> OpCost:
    """The cost of one `kind` op fed by graph inputs of the given types."""
    g = ir.Graph(kind)
    xs = [g.input(f"x{i}", t) for i, t in enumerate(operand_types)]
    node = g.add(kind, *xs, name="y", type=type, **attrs)
    return node_cost(g, node)


# -- FLOPs -----------------------------------------------------------------------------------------


def test_gemm_flops_are_2mnk() -> None:
    c = cost_of("einsum", T(F32, M=64, K=32), T(F32, K=32, N=16), eq="M K, K N -> M N")
    assert c.flops == 2 * 64 * 32 * 16 == 65536


@pytest.mark.parametrize(
    ("eq", "types", "flops"),
    [
        ("B S D, D F -> B S F", [T(BF16, B=2, S=8, D=16), T(BF16, D=16, F=4)], 2 * 2 * 8 * 16 * 4),
        # GQA: the group axis G counts once, though only q carries it
        (
            "B H G S K, B H T K -> B H G S T",
            [T(F32, B=1, H=2, G=4, S=8, K=16), T(F32, B=1, H=2, T=8, K=16)],
            2 * 1 * 2 * 4 * 8 * 16 * 8,
        ),
        # three operands: 2 x product x (3 - 1)
        ("A B, B C, C D -> A D", [T(F32, A=2, B=3), T(F32, B=3, C=4), T(F32, C=4, D=5)], 2 * 120 * 2),
        # one operand: one add per point (the reduce rule)
        ("A B -> B", [T(F32, A=3, B=4)], 12),
        # outer product: no contracted axis
        ("A, B -> A B", [T(F32, A=7), T(F32, B=9)], 2 * 63),
    ],
)
def test_einsum_flops(eq, types, flops) -> None:
    assert cost_of("einsum", *types, eq=eq).flops == flops


def test_einsum_flops_do_not_depend_on_dtype() -> None:
    types = {d: (T(d, M=8, K=4), T(d, K=4, N=2)) for d in (F32, BF16, I8)}
    flops = {d: cost_of("einsum", *ts, eq="M K, K N -> M N").flops for d, ts in types.items()}
    assert set(flops.values()) == {2 * 8 * 4 * 2}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_flops_one_per_result_element(name) -> None:
    dtype = BOOL if UNARY[name][1] == ("bool",) else F32
    assert cost_of(name, T(dtype, A=3, B=5)).flops == 15


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_flops_one_per_result_element(name) -> None:
    dtype = BOOL if BINARY[name][1] == ("bool",) else F32
    # broadcast: [A, B] with [B, C] -> [A, B, C]; FLOPs follow the result, not the operands
    assert cost_of(name, T(dtype, A=2, B=3), T(dtype, B=3, C=4)).flops == 24


def test_where_flops_one_per_result_element() -> None:
    assert cost_of("where", T(BOOL, S=4), T(F32, A=2, S=4), T(F32)).flops == 8


@pytest.mark.parametrize(("axes", "out_numel"), [(["B"], 8), (["A", "C"], 3), (["A", "B", "C"], 1)])
def test_reduce_flops_one_per_input_element(axes, out_numel) -> None:
    c = cost_of("reduce", T(F32, A=2, B=3, C=4), op="sum", axes=axes)
    assert c.flops == 24
    assert c.bytes_read == 24 * 4
    assert c.bytes_written == out_numel * 4


@pytest.mark.parametrize(
    ("kind", "operands", "type", "attrs"),
    [
        ("reshape", [T(F32, A=2, B=6)], T(F32, C=12), {}),
        ("transpose", [T(F32, A=2, B=6)], T(F32, B=6, A=2), {}),
        ("slice", [T(F32, A=2, B=6)], None, {"axis": "B", "start": 1, "stop": 3}),
        ("concat", [T(F32, A=2, B=6), T(F32, A=2, B=1)], None, {"axis": "B"}),
        ("gather", [T(F32, V=9, D=2), T(I32, S=3)], None, {"axis": "V"}),
        ("all_gather", [T(F32, A=2, B=6)], None, {"axis": "A", "chips": 2}),
    ],
)
def test_data_movement_has_no_flops(kind, operands, type, attrs) -> None:
    assert cost_of(kind, *operands, type=type, **attrs).flops == 0


# -- bytes -----------------------------------------------------------------------------------------


def test_reshape_moves_no_bytes() -> None:
    assert cost_of("reshape", T(BF16, A=64, B=32), type=T(BF16, C=2048)) == OpCost()


def test_transpose_reads_and_writes_the_tensor() -> None:
    c = cost_of("transpose", T(BF16, A=64, B=32), type=T(BF16, B=32, A=64))
    assert (c.bytes_read, c.bytes_written) == (4096, 4096)


def test_gather_reads_index_and_selected_rows_not_the_table() -> None:
    # table bf16[V=32000, D=64] (4 MB); ids i32[B=2, S=3] pick 6 rows of 128 bytes
    c = cost_of("gather", T(BF16, V=32000, D=64), T(I32, B=2, S=3), axis="V")
    rows = 2 * 3 * 64 * 2
    assert c.bytes_read == 2 * 3 * 4 + rows
    assert c.bytes_written == rows
    assert c.bytes_read < T(BF16, V=32000, D=64).nbytes


def test_scatter_writes_only_the_update_rows() -> None:
    cache = T(BF16, B=2, H=4, P=1024, K=64)
    c = cost_of("scatter", cache, T(I32, B=2, T=1), T(BF16, B=2, H=4, T=1, K=64), axis="P")
    updates = 2 * 4 * 1 * 64 * 2
    assert c.bytes_read == 2 * 1 * 4 + updates
    assert c.bytes_written == updates
    assert c.bytes_written < cache.nbytes


def test_slice_reads_only_the_kept_part() -> None:
    c = cost_of("slice", T(F32, S=100, D=8), axis="S", start=99, stop=100)
    assert (c.bytes_read, c.bytes_written) == (32, 32)


@pytest.mark.parametrize(("dtype", "width"), [(F32, 4), (BF16, 2), (I8, 1), (I32, 4), (BOOL, 1)])
def test_elementwise_bytes_follow_the_dtype(dtype, width) -> None:
    kind = "and" if dtype == BOOL else "add"
    c = cost_of(kind, T(dtype, A=4, B=8), T(dtype, A=4, B=8))
    assert c.bytes_read == 2 * 32 * width
    assert c.bytes_written == 32 * (1 if dtype == BOOL else width)


def test_bf16_moves_half_the_bytes_of_f32() -> None:
    f = cost_of("einsum", T(F32, M=64, K=32), T(F32, K=32, N=16), eq="M K, K N -> M N")
    b = cost_of("einsum", T(BF16, M=64, K=32), T(BF16, K=32, N=16), eq="M K, K N -> M N")
    assert f.bytes_read == (64 * 32 + 32 * 16) * 4
    assert b.bytes_read * 2 == f.bytes_read
    assert b.bytes_written * 2 == f.bytes_written
    assert b.flops == f.flops


@pytest.mark.parametrize(("numel", "nbytes"), [(1, 1), (2, 1), (3, 2), (8, 4), (4097, 2049)])
def test_i4_packs_two_per_byte(numel, nbytes) -> None:
    assert T(I4, A=numel).nbytes == nbytes
    c = cost_of("cast", T(F32, A=numel), type=T(I4, A=numel))
    assert (c.bytes_read, c.bytes_written) == (4 * numel, nbytes)


def test_sources_cost() -> None:
    assert cost_of("input", type=T(F32, A=8)) == OpCost()
    assert cost_of("param", type=T(F32, A=8)) == OpCost()
    assert cost_of("const", type=T(BF16, A=8), value=1.0) == OpCost(0, 0, 16)
    assert cost_of("iota", type=T(I32, A=8), axis="A") == OpCost(0, 0, 32)


# -- totals and intensity --------------------------------------------------------------------------


@pytest.fixture
def small_graph() -> ir.Graph:
    """x f32[M=64, K=32] @ w f32[K=32, N=16] -> exp -> sum over N."""
    g = ir.Graph("small")
    x = g.input("x", T(F32, M=64, K=32))
    w = g.param("w", T(F32, K=32, N=16))
    y = g.add("einsum", x, w, eq="M K, K N -> M N", name="y")
    e = g.add("exp", y, name="e")
    s = g.add("reduce", e, op="sum", axes=["N"], name="s")
    g.set_outputs(s)
    return g


def test_graph_totals(small_graph) -> None:
    cost = ir.analyze(small_graph)
    einsum = OpCost(65536, (64 * 32 + 32 * 16) * 4, 64 * 16 * 4)
    exp = OpCost(64 * 16, 64 * 16 * 4, 64 * 16 * 4)
    reduce = OpCost(64 * 16, 64 * 16 * 4, 64 * 4)
    assert [nc.cost for nc in cost.per_node] == [OpCost(), OpCost(), einsum, exp, reduce]
    assert cost.total == einsum + exp + reduce
    assert cost.total.flops == 65536 + 1024 + 1024
    assert cost.flops_by_kind == {"input": 0, "param": 0, "einsum": 65536, "exp": 1024, "reduce": 1024}
    assert cost.counts_by_kind == {"input": 1, "param": 1, "einsum": 1, "exp": 1, "reduce": 1}


def test_intensity_is_flops_per_byte_moved(small_graph) -> None:
    cost = ir.analyze(small_graph)
    einsum = cost.per_node[2].cost
    assert einsum.intensity == pytest.approx(65536 / ((64 * 32 + 32 * 16) * 4 + 64 * 16 * 4))
    total = cost.total
    assert total.intensity == pytest.approx(total.flops / (total.bytes_read + total.bytes_written))
    assert OpCost().intensity == 0.0


def test_to_json_matches_the_totals(small_graph) -> None:
    data = ir.analyze(small_graph).to_json()
    assert data["graph"] == "small"
    assert data["op_count"] == 5
    assert data["total_flops"] == 67584
    assert data["total_bytes_read"] == sum(op["bytes_read"] for op in data["ops"])
    assert data["total_bytes_written"] == sum(op["bytes_written"] for op in data["ops"])
    assert [op["name"] for op in data["ops"]] == ["x", "w", "y", "e", "s"]
    assert data["ops"][2]["type"] == "f32[M=64, N=16]"


def test_collectives_count_link_bytes() -> None:
    x = T(F32, D=64)  # 256 bytes
    # ring all-reduce over 4 chips sends 2 (n-1)/n of the tensor
    assert cost_of("all_reduce", x, op="sum", chips=4).link_bytes == 2 * 256 * 3 // 4
    assert cost_of("reduce_scatter", x, op="sum", axis="D", chips=4).link_bytes == 256 * 3 // 4
    assert cost_of("all_gather", x, axis="D", chips=4).link_bytes == 4 * 256 * 3 // 4
