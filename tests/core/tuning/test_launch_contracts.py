"""Launch contracts: the block shapes a kernel's code supports, read from IR that clang-19 builds from
our own CUDA kernels (tests/data/contracts), and the built-in spaces keeping only those shapes."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from mneme.core import ir
from mneme.core.records import RecordedExecution
from mneme.core.tuning import contracts
from mneme.core.tuning.space import load_space

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from irbuild import IRBuildError, build_cuda_ir, build_hip_ir, cuda_available, hip_available  # noqa: E402

CONTRACTS_DIR = Path(__file__).resolve().parents[2] / "data" / "contracts"
available, why = cuda_available()
pytestmark = pytest.mark.skipif(not available, reason=why)


def kernel_ir(name: str) -> Path:
    try:
        return build_cuda_ir(CONTRACTS_DIR / f"{name}.cu")
    except IRBuildError as exc:
        pytest.skip(f"clang-19 could not build {name}.cu: {exc}")


def contract_of(name: str, block: tuple[int, int, int]) -> contracts.LaunchContract:
    ir.initialize()
    return contracts.infer(ir.load(kernel_ir(name).read_text()), name, block)


def recording(tmp_path: Path, name: str, grid, block):
    module = tmp_path / f"{name}.ll"
    shutil.copy(kernel_ir(name), module)
    rec = RecordedExecution.create(
        tmp_path, kernel_name=name, static_hash=f"{name}-s", backend="host", arch="x86_64", modules=[module]
    )
    inst = rec.add_instance(
        grid=grid,
        block=block,
        shared_mem=0,
        args=b"\0" * 24,
        prologue=tmp_path / "p.mneme",
        epilogue=tmp_path / "e.mneme",
    )
    return rec, inst


POWERS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


def block_values(space, axis="x") -> list[int]:
    return list(space.dims()[f"block_{axis}"].values)


# -- inference ---------------------------------------------------------------------------------------


def test_tiled_transpose_pins_the_block_it_compiles_in():
    contract = contract_of("transpose_tiled", (32, 8, 1))
    assert contract.allows((32, 8, 1))
    for other in [(16, 8, 1), (64, 8, 1), (32, 16, 1), (32, 4, 1), (256, 1, 1)]:
        rule = contract.violated(other)
        assert rule is not None and rule.kind == "pinned", other
    reasons = " ".join(r.reason for r in contract.rules)
    assert "never blockDim.x" in reasons and "blockIdx.x * 32" in reasons and "never blockDim.y" in reasons


def test_hotspot_tiles_pin_both_axes_of_their_compiled_in_tile():
    # after Rodinia's hotspot: a 16 x 16 patch with a shared halo, cells indexed from the tile, not blockDim
    contract = contract_of("hotspot_tiled", (16, 16, 1))
    assert contract.allows((16, 16, 1))
    for other in [(8, 16, 1), (16, 8, 1), (32, 16, 1), (16, 32, 1), (256, 1, 1), (32, 8, 1)]:
        assert contract.violated(other) is not None, other
    pinned = {r.axes for r in contract.rules if r.kind == "pinned"}
    assert pinned == {"x", "y"}
    assert any(r.kind == "shared" and "t (1296 bytes)" in r.reason for r in contract.rules)


def test_pathfinder_rows_pin_the_columns_a_block_compiles_in():
    # after Rodinia's pathfinder: 256 columns a block and a halo column each side, in shared memory
    contract = contract_of("pathfinder_rows", (256, 1, 1))
    assert [b for b in POWERS if contract.allows((b, 1, 1))] == [256]
    rule = contract.violated((128, 1, 1))
    assert rule.kind == "pinned" and "blockIdx.x * 256" in rule.reason
    assert any(r.kind == "shared" and "cost (1032 bytes)" in r.reason for r in contract.rules)


def test_shared_stencil_refuses_blocks_wider_than_its_tile():
    contract = contract_of("stencil_shared", (128, 1, 1))
    assert [r.kind for r in contract.rules] == ["shared"]
    assert "tile (520 bytes)" in contract.rules[0].reason
    for block in (1, 32, 64, 128):
        assert contract.allows((block, 1, 1)), block
    for block in (129, 256, 1024):
        assert not contract.allows((block, 1, 1)), block


def test_histogram_whose_threads_clear_one_bin_each_needs_exactly_256_threads():
    # bins[threadIdx.x] = 0 is the only store; atomicAdd(&bins[values[i]]) may read any of the 256 bins.
    contract = contract_of("histogram_shared", (256, 1, 1))
    assert [b for b in POWERS if contract.allows((b, 1, 1))] == [256]
    assert "bins (1024 bytes)" in contract.violated((512, 1, 1)).reason
    coverage = contract.violated((64, 1, 1))
    assert coverage.kind == "coverage" and "fewer than 256 threads" in coverage.reason
    assert "not derived from blockDim" in coverage.reason
    assert contract.grid_stride_axes == "x"


def test_tree_sum_with_strides_from_a_constant_needs_exactly_its_block():
    contract = contract_of("reduce_const", (256, 1, 1))
    assert [b for b in POWERS if contract.allows((b, 1, 1))] == [256]
    assert "threadIdx.x + 128 for threadIdx.x < 128" in contract.violated((128, 1, 1)).reason


def test_tree_sum_with_strides_from_blockdim_keeps_every_block_the_array_holds():
    contract = contract_of("reduce_blockdim", (256, 1, 1))
    assert [b for b in POWERS if contract.allows((b, 1, 1))] == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    assert [r.kind for r in contract.rules] == ["shared"]


def test_one_result_per_block_pins_the_block():
    contract = contract_of("reduce_partials", (256, 1, 1))
    assert [b for b in POWERS if contract.allows((b, 1, 1))] == [256]
    rule = contract.violated((128, 1, 1))
    assert rule.kind == "per_block" and "one result per block" in rule.reason


def test_bins_cleared_and_flushed_with_a_blockdim_stride_keep_every_block():
    contract = contract_of("histogram_strided", (256, 1, 1))
    assert contract.rules == ()
    assert all(contract.allows((b, 1, 1)) for b in POWERS)


@pytest.mark.skipif(not hip_available()[0], reason=hip_available()[1])
def test_hip_kernels_read_the_same_exact_and_free_blocks():
    # HIP's blockDim comes from the dispatch packet (a load), not a special register: still "adapts".
    ir.initialize()
    found = {}
    for name in ("histogram_shared", "reduce_blockdim"):
        try:
            path = build_hip_ir(CONTRACTS_DIR / f"{name}.hip")
        except IRBuildError as exc:
            pytest.skip(f"clang-19 could not build {name}.hip: {exc}")
        contract = contracts.infer(ir.load(path.read_text()), name, (256, 1, 1))
        found[name] = [b for b in POWERS if contract.allows((b, 1, 1))]
    assert found == {"histogram_shared": [256], "reduce_blockdim": [1, 2, 4, 8, 16, 32, 64, 128, 256]}


def test_a_warp_sum_with_one_atomic_total_keeps_every_block():
    # lane 0 of each warp adds to *total: one address for every block, so no per-block result.
    ir.initialize()
    path = build_cuda_ir(CONTRACTS_DIR.parent / "kernels" / "warp_reduce.cu")
    contract = contracts.infer(ir.load(path.read_text()), "warp_reduce", (256, 1, 1))
    assert contract.rules == ()


def test_grid_stride_saxpy_keeps_every_shape():
    contract = contract_of("saxpy_gridstride", (256, 1, 1))
    assert contract.rules == ()
    assert contract.grid_stride_axes == "x"
    assert all(contract.allows((b, 1, 1)) for b in (1, 32, 1024))


def test_launch_bounds_cap_the_threads_of_a_block():
    contract = contract_of("scale_bounded", (128, 1, 1))
    assert [r.kind for r in contract.rules] == ["max_threads"]
    assert contract.allows((256, 1, 1)) and contract.allows((16, 16, 1))
    assert not contract.allows((512, 1, 1)) and not contract.allows((32, 16, 1))
    assert "__launch_bounds__" in contract.rules[0].reason


def test_a_rule_the_recorded_launch_breaks_is_dropped_as_a_misreading():
    # recorded with 512 threads, the 256-bin histogram's rule cannot be right for this launch
    contract = contract_of("histogram_shared", (512, 1, 1))
    assert contract.rules == ()
    assert any("ignored" in note and "bins" in note for note in contract.notes)


def test_required_block_and_amdgpu_work_group_size_from_attributes():
    text = kernel_ir("saxpy_gridstride").read_text()
    text = text.replace("@saxpy_gridstride(", "@saxpy_gridstride(", 1)
    annotated = text + '\n!99 = !{ptr @saxpy_gridstride, !"reqntidx", i32 64}\n'
    contract = contracts.infer_from_text(annotated, "saxpy_gridstride", (64, 1, 1))
    assert contract.allows((64, 1, 1)) and not contract.allows((128, 1, 1)) and not contract.allows((32, 1, 1))
    assert "reqntid" in contract.rules[0].reason
    # A HIP kernel's __launch_bounds__(128) as clang writes it: the attribute the hip backend declares.
    amd = (
        "define amdgpu_kernel void @k(ptr addrspace(1) %p) #0 {\n  ret void\n}\n"
        'attributes #0 = { "amdgpu-flat-work-group-size"="1,128" }\n'
    )
    contract = contracts.infer_from_text(amd, "k", (64, 1, 1))
    assert contract.allows((128, 1, 1)) and not contract.allows((256, 1, 1))
    assert "amdgpu-flat-work-group-size" in contract.rules[0].reason


# -- the built-in spaces -----------------------------------------------------------------------------


def test_standard_space_keeps_only_the_shapes_the_transpose_supports(tmp_path):
    rec, inst = recording(tmp_path, "transpose_tiled", (8, 8, 1), (32, 8, 1))
    space = load_space("standard", rec, inst)
    assert block_values(space, "x") == [32] and block_values(space, "y") == [8]
    lines = space.contract_lines()
    assert any(line.startswith("launch contract removed block_x = 1, 2, 4, 8, 16, 64") for line in lines)
    assert space.describe()["launch_contract"]["rules"]
    free = load_space("standard", rec, inst, {"contracts": False})
    assert len(block_values(free, "x")) == 11 and free.contract.rules == ()


def test_quick_space_drops_blocks_that_overflow_shared_arrays(tmp_path):
    rec, inst = recording(tmp_path, "stencil_shared", (128, 1, 1), (128, 1, 1))
    space = load_space("quick", rec, inst)
    assert block_values(space) == [1, 2, 4, 8, 16, 32, 64, 128]
    configs = [space.derived(space.decode(p)) for p in space.sample_exhaustive()]
    assert configs and max(c.block.x for c in configs) == 128


def test_quick_space_keeps_only_the_block_an_exact_block_kernel_needs_and_says_why(tmp_path):
    rec, inst = recording(tmp_path, "histogram_shared", (64, 1, 1), (256, 1, 1))
    space = load_space("quick", rec, inst)
    assert block_values(space) == [256]
    lines = space.contract_lines()
    assert any(
        line.startswith(
            "launch contract removed block_x = 1, 2, 4, 8, 16, 32, 64, 128: shared array bins "
            "is written one element per thread"
        )
        for line in lines
    ), lines
    assert any("block_x = 512, 1024" in line for line in lines)


def test_launch_bounds_become_a_constraint_of_a_two_dimensional_space(tmp_path):
    rec, inst = recording(tmp_path, "scale_bounded", (16, 16, 1), (16, 8, 1))
    space = load_space("quick", rec, inst)
    blocks = {space.derived(space.decode(p)).block.as_tuple() for p in space.sample_exhaustive()}
    assert blocks and max(x * y for x, y, _ in blocks) == 256
    assert (16, 16, 1) in blocks and (32, 16, 1) not in blocks
    assert 512 not in block_values(space, "x")


def test_grid_stride_space_is_left_whole(tmp_path):
    rec, inst = recording(tmp_path, "saxpy_gridstride", (64, 1, 1), (256, 1, 1))
    space = load_space("standard", rec, inst)
    assert len(block_values(space)) == 11
    assert "launch_contract" not in space.describe()
    assert space.contract_lines() == []


def test_print_space_shows_what_the_contract_removed_and_why(tmp_path):
    from mneme.core.cli import cli

    rec, inst = recording(tmp_path, "stencil_shared", (64, 1, 1), (128, 1, 1))
    (tmp_path / "p.mneme").write_bytes(b"")  # --print-space reads no snapshot; the database must name files
    (tmp_path / "e.mneme").write_bytes(b"")
    db = rec.to_json()
    result = CliRunner().invoke(
        cli, ["tune", "-rdb", str(db), "--space", "quick", "--print-space", "--results", str(tmp_path / "out")]
    )
    output = " ".join(result.output.split())
    assert result.exit_code == 0, output
    assert "launch contract removed block_x = 256, 512, 1024" in output
    assert "shared array tile (520 bytes)" in output
