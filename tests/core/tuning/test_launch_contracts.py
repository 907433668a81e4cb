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
from irbuild import IRBuildError, build_cuda_ir, cuda_available  # noqa: E402

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
    rec = RecordedExecution.create(tmp_path, kernel_name=name, static_hash=f"{name}-s", backend="host",
                                   arch="x86_64", modules=[module])
    inst = rec.add_instance(grid=grid, block=block, shared_mem=0, args=b"\0" * 24,
                            prologue=tmp_path / "p.mneme", epilogue=tmp_path / "e.mneme")
    return rec, inst


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


def test_shared_stencil_refuses_blocks_wider_than_its_tile():
    contract = contract_of("stencil_shared", (128, 1, 1))
    assert [r.kind for r in contract.rules] == ["shared"]
    assert "tile (520 bytes)" in contract.rules[0].reason
    for block in (1, 32, 64, 128):
        assert contract.allows((block, 1, 1)), block
    for block in (129, 256, 1024):
        assert not contract.allows((block, 1, 1)), block


def test_histogram_with_256_shared_bins_keeps_blocks_up_to_256():
    contract = contract_of("histogram_shared", (256, 1, 1))
    assert contract.allows((256, 1, 1)) and contract.allows((64, 1, 1))
    assert not contract.allows((512, 1, 1)) and not contract.allows((1024, 1, 1))
    assert "bins (1024 bytes)" in contract.violated((512, 1, 1)).reason
    assert contract.grid_stride_axes == "x"


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
    amd = ('define amdgpu_kernel void @k(ptr addrspace(1) %p) #0 {\n  ret void\n}\n'
           'attributes #0 = { "amdgpu-flat-work-group-size"="1,128" }\n')
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
    rec, inst = recording(tmp_path, "histogram_shared", (64, 1, 1), (256, 1, 1))
    space = load_space("quick", rec, inst)
    assert block_values(space) == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    configs = [space.derived(space.decode(p)) for p in space.sample_exhaustive()]
    assert configs and max(c.block.x for c in configs) == 256


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
    result = CliRunner().invoke(cli, ["tune", "-rdb", str(db), "--space", "quick", "--print-space",
                                       "--results", str(tmp_path / "out")])
    output = " ".join(result.output.split())
    assert result.exit_code == 0, output
    assert "launch contract removed block_x = 256, 512, 1024" in output
    assert "shared array tile (520 bytes)" in output
