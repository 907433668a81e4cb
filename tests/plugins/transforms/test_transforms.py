"""IR transforms (plugins) shown by their effect on generated PTX / code objects, over the whole corpus."""

from __future__ import annotations

import re
import struct

import pytest
from irbuild import build_cuda_ir, build_hip_ir, corpus_kernels, cuda_available, hip_available

from mneme_cuda import codegen as cuda_codegen

from mneme.core import build, ir, pipeline, plugins
from mneme.core.errors import UsageError
from mneme.core.types import ExperimentConfiguration
from mneme.plugins.transforms import auto_init, launch_bounds, specialize

needs_hip = pytest.mark.skipif(not hip_available()[0], reason=hip_available()[1])
pytestmark = pytest.mark.skipif(not cuda_available()[0], reason=cuda_available()[1])
BASE = ExperimentConfiguration(grid=(8, 1, 1), block=(128, 1, 1))
POINTER = 0x7F00_0000_1000


def _args_for(mod, kernel, ints=1000, floats=2.5) -> bytes:
    """An argument buffer with recognizable values for every parameter."""
    params = ir.kernel_params(mod, kernel)
    buf = bytearray(params[-1].offset + params[-1].size)
    for p in params:
        if p.kind == "int":
            buf[p.offset : p.offset + p.size] = ints.to_bytes(p.size, "little")
        elif p.kind == "float":
            buf[p.offset : p.offset + 4] = struct.pack("<f", floats)
        elif p.kind == "pointer":
            buf[p.offset : p.offset + 8] = POINTER.to_bytes(8, "little")
    return bytes(buf)


def _ptx(mod, kernel, config, args=None, **kwargs) -> str:
    return build.compile(mod, kernel, config, "sm_90", args, emit="ptx", cache=False, **kwargs).data.decode()


def test_every_builtin_transform_is_a_registered_plugin():
    names = set(plugins.names("transform"))
    assert {
        "internalize",
        "prune",
        "specialize_args",
        "specialize_dims",
        "specialize_dims_assume",
        "set_launch_bounds",
        "remove_auto_init",
        "fast_math",
    } <= names
    assert all(plugins.provided("transform")[0].distribution == "mneme-gpu" for _ in range(1))


# -- specialize_dims ------------------------------------------------------------------------------


def test_specialize_dims_removes_every_ntid_and_nctaid_read_from_the_ptx():
    mod = ir.load(build_cuda_ir("saxpy"))
    plain = _ptx(mod, "saxpy", BASE)
    assert "%ntid.x" in plain and "%nctaid.x" in plain
    special = _ptx(mod, "saxpy", BASE.replace(specialize_dims=True))
    assert "%ntid" not in special and "%nctaid" not in special
    assert "1024" in special  # the grid-stride step: 128 threads * 8 blocks


def test_specialize_dims_on_a_2d_stencil_uses_both_axes():
    mod = ir.load(build_cuda_ir("stencil2d"))
    ptx = _ptx(mod, "stencil2d", BASE.replace(block=(16, 8, 1), grid=(4, 4, 1), specialize_dims=True))
    assert "%ntid" not in ptx
    assert re.search(r"shl\.b32\s+%r\d+, %r\d+, 4;|mul\.lo\.s32\s+%r\d+, %r\d+, 16;", ptx)  # ctaid.x * 16


def test_specialize_dims_assume_states_ranges_the_optimizer_uses():
    mod = ir.load(build_cuda_ir("reduce_sum"))
    pre = pipeline.preprocess(mod, "reduce_sum", BASE.replace(block=(256, 1, 1), specialize_dims_assume=True))
    text = str(pre.module)
    assert "range(i32 0, 256) i32 @llvm.nvvm.read.ptx.sreg.tid.x()" in text
    assert "range(i32 256, 257) i32 @llvm.nvvm.read.ptx.sreg.ntid.x()" in text
    assert "range(i32 0, 8) i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()" in text
    ptx = _ptx(mod, "reduce_sum", BASE.replace(block=(256, 1, 1), specialize_dims_assume=True))
    assert "%ntid" not in ptx  # an exact range is a constant to the optimizer


@needs_hip
def test_specialize_dims_on_amdgpu_replaces_the_implicit_argument_loads():
    mod = ir.load(build_hip_ir("saxpy"))
    assert "@llvm.amdgcn.implicitarg.ptr()" in str(mod)
    pre = pipeline.preprocess(mod, "saxpy", BASE.replace(specialize_dims=True))
    assert not re.search(r"load i(16|32), ptr addrspace\(4\)", str(pre.module))
    assume = pipeline.preprocess(mod, "saxpy", BASE.replace(specialize_dims_assume=True))
    text = str(assume.module)
    assert (
        "icmp eq i16" in text
        and "@llvm.assume" in text
        and "range(i32 0, 128) i32 @llvm.amdgcn.workitem.id.x()" in text
    )

    def scalar_loads(cfg):
        asm = build.compile(mod, "saxpy", cfg, "gfx90a", emit="asm", cache=False).data.decode()
        return re.findall(r"s_load_dword\w* [^\n]*", asm[asm.index("saxpy:") : asm.index(".Lfunc_end0")])

    # the kernel no longer loads the group size (kernarg 0x24) nor the block count
    plain, special = scalar_loads(BASE), scalar_loads(BASE.replace(specialize_dims=True))
    assert any(load.endswith("0x24") for load in plain)
    assert len(special) == len(plain) - 2 and not any(load.endswith("0x24") for load in special)


# -- specialize_args ------------------------------------------------------------------------------


def test_specialize_args_folds_the_value_and_drops_the_parameter_load():
    mod = ir.load(build_cuda_ir("vector_add"))
    args = _args_for(mod, "vector_add", ints=777)
    plain = _ptx(mod, "vector_add", BASE, args)
    assert "vector_add_param_3" in plain.split("{", 1)[1]
    special = _ptx(mod, "vector_add", BASE.replace(specialize=True), args, specialize_indexes=[3])
    body = special.split("{", 1)[1]
    assert re.search(r"\b77[67];", body)  # i < 777 (or i > 776)
    assert "vector_add_param_3]" not in body and "vector_add_param_0]" in body
    everything = _ptx(mod, "vector_add", BASE.replace(specialize=True), args).split("{", 1)[1]
    assert "ld.param" not in everything and str(POINTER) in everything


def test_specialize_args_reads_floats_and_selected_indexes_only():
    mod = ir.load(build_cuda_ir("saxpy"))
    args = _args_for(mod, "saxpy", ints=4096, floats=2.5)
    _, replaced = specialize.specialize_args(mod, "saxpy", args, [1])
    assert replaced == {1: "0x4004000000000000"}  # 2.5 as LLVM writes a float
    ptx = _ptx(mod, "saxpy", BASE.replace(specialize=True), args, specialize_indexes=[1])
    body = ptx.split("{", 1)[1]
    assert "0f40200000" in body  # 2.5f in PTX
    assert "saxpy_param_1]" not in body and "saxpy_param_0]" in body


def test_specialize_args_uses_the_recorded_layout_and_specializable_flags():
    from types import SimpleNamespace as Arg

    mod = ir.load(build_cuda_ir("saxpy"))
    args = _args_for(mod, "saxpy", ints=512)
    layout = [
        Arg(offset=p.offset, size=p.size, kind=p.kind, specializable=p.kind == "int")
        for p in ir.kernel_params(mod, "saxpy")
    ]
    pre = pipeline.preprocess(mod, "saxpy", BASE.replace(specialize=True), args, layout)
    text = str(pre.module)
    assert "store i32 512, ptr" in text  # the front end spills parameters to allocas first
    assert re.search(r"store float %\d+, ptr", text)  # the float stayed a parameter


def test_specialize_args_index_out_of_range_raises():
    mod = ir.load(build_cuda_ir("vector_add"))
    with pytest.raises(UsageError, match=r"index 4 is out of range: kernel 'vector_add' has 4 parameters"):
        specialize.specialize_args(mod, "vector_add", bytes(32), [0, 4])


def test_specialize_args_without_recorded_bytes_says_what_is_missing():
    mod = ir.load(build_cuda_ir("vector_add"))
    with pytest.raises(UsageError, match="no recorded argument bytes"):
        pipeline.preprocess(mod, "vector_add", BASE.replace(specialize=True))


def test_specialize_args_with_a_short_argument_buffer_raises():
    mod = ir.load(build_cuda_ir("vector_add"))
    with pytest.raises(UsageError, match="ends before argument 3"):
        specialize.specialize_args(mod, "vector_add", bytes(20), [3])


def test_a_by_value_struct_argument_folds_into_constants(tmp_path):
    src = tmp_path / "byval.cu"
    src.write_text(
        "struct P { float scale; int count; };\n"
        'extern "C" __global__ void scaled(P p, float* out) { out[threadIdx.x] = p.scale * p.count; }\n'
    )
    mod = ir.load(build_cuda_ir(src))
    params = ir.kernel_params(mod, "scaled")
    assert params[0].kind == "struct" and params[0].size == 8
    args = struct.pack("<fi", 1.5, 6) + POINTER.to_bytes(8, "little")
    body = _ptx(mod, "scaled", BASE.replace(specialize=True), args, specialize_indexes=[0]).split("{", 1)[1]
    assert "scaled_param_0" not in body
    assert "1091567616" in body or "0f41100000" in body  # 1.5 * 6 = 9.0f, folded (0x41100000)


def test_null_pointer_and_negative_integers_fold():
    assert specialize.constant_text("ptr", bytes(8)) == "null"
    assert specialize.constant_text("i32", (-5 & 0xFFFFFFFF).to_bytes(4, "little")) == "-5"
    assert (
        specialize.constant_text("ptr addrspace(1)", (16).to_bytes(8, "little"))
        == "inttoptr (i64 16 to ptr addrspace(1))"
    )


# -- launch bounds --------------------------------------------------------------------------------


def test_launch_bounds_appear_as_maxntid_and_minnctapersm_in_the_ptx():
    mod = ir.load(build_cuda_ir("reduce_sum"))
    ptx = _ptx(mod, "reduce_sum", BASE.replace(set_launch_bounds=True, max_threads=256, min_blocks_per_sm=4))
    assert re.search(r"\.maxntid 256\b", ptx) and re.search(r"\.minnctapersm 4\b", ptx)
    assert ".maxntid" not in _ptx(mod, "reduce_sum", BASE)


def test_launch_bounds_above_1024_raise():
    mod = ir.load(build_cuda_ir("reduce_sum"))
    with pytest.raises(UsageError, match=r"max_threads must be 1\.\.1024, not 2048"):
        launch_bounds.set_launch_bounds(mod, "reduce_sum", 2048)


def test_launch_bounds_touch_only_the_selected_kernel():
    mod = ir.load(build_cuda_ir("scale_template"))
    new = launch_bounds.set_launch_bounds(mod, "_Z5scaleIfEvPT_S0_i", 128)
    ptx = cuda_codegen.codegen(new, "_Z5scaleIfEvPT_S0_i", BASE, "sm_90", emit="ptx").data.decode()
    assert ptx.count(".maxntid") == 1


@needs_hip
def test_launch_bounds_on_amdgpu_set_the_code_objects_flat_work_group_size():
    mod = ir.load(build_hip_ir("reduce_sum"))
    binary = build.compile(
        mod,
        "reduce_sum",
        BASE.replace(set_launch_bounds=True, max_threads=256, min_blocks_per_sm=2),
        "gfx90a",
        cache=False,
    )
    assert binary.kind == "hsaco" and binary.resources.max_threads_per_block == 256
    pre = pipeline.preprocess(
        mod, "reduce_sum", BASE.replace(set_launch_bounds=True, max_threads=256, min_blocks_per_sm=2)
    )
    assert '"amdgpu-flat-work-group-size"="1,256"' in str(pre.module) and '"amdgpu-waves-per-eu"="2"' in str(pre.module)


# -- auto-initialization --------------------------------------------------------------------------

AUTO_INIT_SRC = """
extern "C" __global__ void local_buf(const int* idx, float* out, int n) {
  float buf[16];
  for (int i = 0; i < n && i < 16; ++i) buf[i] = i * 0.5f;
  out[threadIdx.x] = buf[idx[threadIdx.x] & 15];
}
"""


def test_remove_auto_init_drops_only_the_stores_clang_marked(tmp_path):
    src = tmp_path / "local_buf.cu"
    src.write_text(AUTO_INIT_SRC)
    mod = ir.load(build_cuda_ir(src, flags=("-ftrivial-auto-var-init=pattern",)))
    assert "!annotation" in str(mod)
    new, removed = auto_init.remove_auto_init(mod)
    assert removed == 1 and "i8 -1, i64 64" not in str(new)
    assert "store float" in str(new)  # the program's own stores stay
    cfg = BASE
    with_init = _ptx(mod, "local_buf", cfg)
    without = _ptx(mod, "local_buf", cfg, extra_transforms=["remove_auto_init"])
    assert "-1082130433" in with_init or "0fFFFFFFFF" in with_init or "-1;" in with_init
    assert without.count("st.local") < with_init.count("st.local")


def test_remove_auto_init_leaves_unmarked_ir_alone():
    mod = ir.load(build_cuda_ir("reduce_sum"))
    same, removed = auto_init.remove_auto_init(mod)
    assert same is mod and removed == 0


def test_unknown_extra_transform_lists_the_known_ones():
    mod = ir.load(build_cuda_ir("saxpy"))
    with pytest.raises(UsageError, match="unknown transform.*known: .*specialize_dims"):
        pipeline.preprocess(mod, "saxpy", BASE, extra_transforms=["unroll_everything"])


# -- fast math ------------------------------------------------------------------------------------


def test_fast_math_makes_ptx_use_flush_to_zero_and_approximate_math():
    mod = ir.load(build_cuda_ir("math_funcs"))
    exact = _ptx(mod, "math_funcs", BASE)
    fast = _ptx(mod, "math_funcs", BASE.replace(fast_math=True))
    assert fast.count(".ftz") > exact.count(".ftz") + 5
    assert "add.ftz.f32" in fast and "add.ftz.f32" not in exact


# -- variant hashes and the whole corpus ----------------------------------------------------------


def test_variant_hash_depends_on_the_transforms_and_their_values():
    mod = ir.load(build_cuda_ir("saxpy"))
    args = _args_for(mod, "saxpy")
    hashes = {
        pipeline.preprocess(mod, "saxpy", cfg, args).variant_hash
        for cfg in (
            BASE,
            BASE.replace(specialize_dims=True),
            BASE.replace(specialize_dims=True, block=(256, 1, 1)),
            BASE.replace(specialize=True),
            BASE.replace(set_launch_bounds=True, max_threads=128),
        )
    }
    assert len(hashes) == 5
    assert (
        pipeline.preprocess(mod, "saxpy", BASE).variant_hash
        == pipeline.preprocess(ir.clone(mod), "saxpy", BASE).variant_hash
    )


def test_preprocess_leaves_the_input_module_untouched():
    mod = ir.load(build_cuda_ir("saxpy"))
    before = ir.module_hash(mod)
    pipeline.preprocess(mod, "saxpy", BASE.replace(specialize_dims=True, set_launch_bounds=True, max_threads=128))
    assert ir.module_hash(mod) == before


ALL_ON = BASE.replace(
    block=(64, 2, 1),
    grid=(3, 2, 1),
    specialize=True,
    specialize_dims=True,
    set_launch_bounds=True,
    max_threads=128,
    min_blocks_per_sm=2,
)
ASSUME = ALL_ON.replace(specialize_dims=False, specialize_dims_assume=True, fast_math=True)


@pytest.mark.parametrize("source,kernel", corpus_kernels())
def test_every_corpus_kernel_takes_every_transform_to_a_cubin(source, kernel):
    mod = ir.link([build_cuda_ir(source)], kernel)
    args = _args_for(mod, kernel)
    for cfg in (ALL_ON, ASSUME):
        binary = build.compile(mod, kernel, cfg, "sm_90", args, cache=False)
        assert binary.kind == "cubin" and binary.data[:4] == b"\x7fELF"
        assert binary.resources.registers > 0


@needs_hip
@pytest.mark.parametrize("source,kernel", corpus_kernels())
def test_every_corpus_kernel_takes_every_transform_to_a_code_object(source, kernel):
    mod = ir.link([build_hip_ir(source)], kernel)
    args = _args_for(mod, kernel)
    for cfg in (ALL_ON, ASSUME):
        binary = build.compile(mod, kernel, cfg, "gfx90a", args, cache=False)
        assert binary.kind == "hsaco" and binary.data[:4] == b"\x7fELF"
        assert binary.resources.max_threads_per_block == 128
