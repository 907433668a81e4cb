"""mneme.core.ir on real clang-19 device IR: loading, errors, kernels, parameters, hashing, linking."""

from __future__ import annotations

import pytest
from irbuild import build_cuda_ir, build_hip_ir, corpus, corpus_kernels, cuda_available, hip_available

from mneme.core import ir
from mneme.core.ir import _bitcode
from mneme.core.errors import IRError

needs_hip = pytest.mark.skipif(not hip_available()[0], reason=hip_available()[1])
pytestmark = pytest.mark.skipif(not cuda_available()[0], reason=cuda_available()[1])


def _set_bits(data: bytearray, bit: int, width: int, value: int) -> None:
    for i in range(width):
        pos = bit + i
        if value >> i & 1:
            data[pos >> 3] |= 1 << (pos & 7)
        else:
            data[pos >> 3] &= ~(1 << (pos & 7)) & 0xFF


# -- loading --------------------------------------------------------------------------------------


def test_load_reads_a_path_text_and_bitcode_to_the_same_code():
    path = build_cuda_ir("saxpy")
    from_path = ir.load(path)
    from_text = ir.load(path.read_text())
    from_bitcode = ir.load(from_path.as_bitcode())
    assert from_path.triple == "nvptx64-nvidia-cuda"
    assert ir.module_hash(from_path) == ir.module_hash(from_text) == ir.module_hash(from_bitcode)


def test_load_reads_a_bitcode_file(tmp_path):
    bc = build_cuda_ir("vector_add", emit="bc", out_dir=tmp_path)
    assert bc.suffix == ".bc"
    assert ir.kernels(ir.load(bc)) == ["vector_add"]


def test_malformed_ir_text_raises_irerror_naming_the_input(tmp_path):
    bad = tmp_path / "broken.ll"
    bad.write_text(build_cuda_ir("vector_add").read_text().replace("ret void", "ret i32 zork", 1))
    with pytest.raises(IRError, match=r"broken\.ll: malformed LLVM IR"):
        ir.load(bad)


def test_ir_that_parses_but_does_not_verify_raises_instead_of_aborting():
    text = "define i32 @f(i32 %x) {\nentry:\n  br label %next\nnext:\n  ret i32 %y\n  %y = add i32 %x, 1\n}\n"
    with pytest.raises(IRError, match="bad.ll"):
        ir.load(text, name="bad.ll")


def test_corrupt_bitcode_raises_irerror_naming_the_input():
    data = bytearray(ir.load(build_cuda_ir("saxpy")).as_bitcode())
    corrupt = bytes(data[: len(data) // 2])
    with pytest.raises(IRError, match=r"saxpy\.bc: cannot read LLVM bitcode.*corrupt or truncated"):
        ir.load(corrupt, name="saxpy.bc")


def test_bitcode_from_a_newer_llvm_names_the_producer_and_the_reader():
    data = bytearray(ir.load(build_cuda_ir("saxpy")).as_bitcode())
    ident = ir.bitcode_identification(bytes(data))
    assert ident["producer"].startswith("LLVM") and ident["epoch"] == 0
    # a future LLVM: producer "LLVM99..." and a bitcode epoch this reader does not know
    nine = _bitcode._CHAR6.index("9")
    for bit in ident["producer_bits"][4:6]:
        _set_bits(data, bit, 6, nine)
    _set_bits(data, ident["epoch_bit"], 1, 1)
    assert ir.bitcode_producer(bytes(data))[0].startswith("LLVM99")
    with pytest.raises(IRError, match=r"future\.bc: .*written by LLVM99.*newer than this reader \(LLVM 22"):
        ir.load(bytes(data), name="future.bc")


def test_binary_garbage_is_neither_bitcode_nor_text():
    with pytest.raises(IRError, match="garbage.bin"):
        ir.load(b"\x00\x01\x02\xff" * 16, name="garbage.bin")


def test_missing_file_raises_irerror_with_the_path(tmp_path):
    with pytest.raises(IRError, match="nope.ll"):
        ir.load(tmp_path / "nope.ll")


def test_process_survives_many_bad_inputs():
    for bad in ("define void @f( {", "garbage", b"BC\xc0\xde\x00\x00"):
        with pytest.raises(IRError):
            ir.load(bad, name="x")
    assert ir.kernels(ir.load(build_cuda_ir("saxpy"))) == ["saxpy"]


# -- kernels and parameters ----------------------------------------------------------------------


@pytest.mark.parametrize("source", [k.source for k in corpus()])
def test_every_corpus_source_defines_its_kernels_in_cuda_and_hip(source):
    expected = list(next(k for k in corpus() if k.source == source).kernels)
    assert ir.kernels(ir.load(build_cuda_ir(source))) == expected
    if hip_available()[0]:
        mod = ir.load(build_hip_ir(source))
        assert mod.triple == "amdgcn-amd-amdhsa"
        assert ir.kernels(mod) == expected


def test_corpus_ir_has_no_unresolved_math_library_calls():
    for lang_build in (build_cuda_ir, build_hip_ir) if hip_available()[0] else (build_cuda_ir,):
        mod = ir.load(lang_build("math_funcs"))
        external = [
            f.name for f in mod.functions if f.is_declaration and not f.name.startswith(("llvm.", "__nvvm_reflect"))
        ]
        assert external == []


def test_find_kernel_that_is_absent_lists_the_kernels_present():
    mod = ir.load(build_cuda_ir("scale_template"))
    with pytest.raises(IRError, match=r"'scale' is not defined.*_Z5scaleIfEvPT_S0_i, _Z5scaleIiEvPT_S0_i"):
        ir.find_kernel(mod, "scale")


def test_kernel_params_give_kinds_sizes_and_packed_offsets():
    params = ir.kernel_params(ir.load(build_cuda_ir("saxpy")), "saxpy")
    assert [(p.kind, p.size, p.offset) for p in params] == [
        ("int", 4, 0),
        ("float", 4, 4),
        ("pointer", 8, 8),
        ("pointer", 8, 16),
    ]
    assert [p.type for p in params] == ["i32", "float", "ptr", "ptr"]


@needs_hip
def test_kernel_params_of_amdgpu_ir_use_its_address_spaces():
    params = ir.kernel_params(ir.load(build_hip_ir("saxpy")), "saxpy")
    assert params[2].type == "ptr addrspace(1)" and params[2].kind == "pointer" and params[2].size == 8


def test_kernel_params_read_a_by_value_struct(tmp_path):
    src = tmp_path / "byval.cu"
    src.write_text(
        "struct P { float a; int b; double c; };\n"
        'extern "C" __global__ void k(P p, float* o, char c) { o[0] = p.a + p.b + p.c + c; }\n'
    )
    params = ir.kernel_params(ir.load(build_cuda_ir(src)), "k")
    assert [(p.kind, p.size, p.align, p.offset) for p in params] == [
        ("struct", 16, 8, 0),
        ("pointer", 8, 8, 16),
        ("int", 1, 1, 24),
    ]


# -- hashing ---------------------------------------------------------------------------------------


def test_module_hash_ignores_module_name_and_source_file():
    text = build_cuda_ir("vector_add").read_text()
    renamed = text.replace('source_filename = "', 'source_filename = "elsewhere/', 1)
    a, b = ir.load(text, name="a"), ir.load(renamed, name="b")
    assert a.name != b.name
    assert ir.module_hash(a) == ir.module_hash(b)


def test_module_hash_changes_with_the_code():
    a = ir.load(build_cuda_ir("vector_add"))
    b = ir.load(build_cuda_ir("vector_add", opt="-O2"))
    c = ir.load(build_cuda_ir("saxpy"))
    assert len({ir.module_hash(a), ir.module_hash(c)}) == 2
    assert ir.module_hash(a) == ir.module_hash(ir.clone(a))
    assert isinstance(ir.module_hash(b), str)


# -- linking, internalize, prune --------------------------------------------------------------------


def test_link_combines_modules_and_prunes_what_the_kernel_cannot_reach():
    paths = [build_cuda_ir("vector_add"), build_cuda_ir("saxpy")]
    both = ir.link(paths, "saxpy", prune=False, internalize=False)
    assert set(ir.kernels(both)) == {"vector_add", "saxpy"}
    pruned = ir.link(paths, "saxpy")
    assert ir.kernels(pruned) == ["saxpy"]
    assert "vector_add" not in ir.defined_functions(pruned)
    assert len(ir.defined_functions(pruned)) < len(ir.defined_functions(both))


def test_link_does_not_consume_the_callers_modules():
    a = ir.load(build_cuda_ir("vector_add"))
    b = ir.load(build_cuda_ir("saxpy"))
    ir.link([a, b], "vector_add")
    assert ir.kernels(a) == ["vector_add"] and ir.kernels(b) == ["saxpy"]


def test_internalize_keeps_the_kernel_and_device_globals_external():
    mod = ir.load(build_cuda_ir("warp_reduce"))
    helpers = [f for f in ir.defined_functions(mod) if f != "warp_reduce"]
    assert helpers, "the -O0 build keeps helper functions"
    ir.internalize_module(mod, "warp_reduce")
    linkage = {f.name: f.linkage.name for f in mod.functions if not f.is_declaration}
    assert linkage["warp_reduce"] == "external"
    assert all(linkage[h] == "internal" for h in helpers)
    glob = ir.load(build_cuda_ir("device_global"))
    ir.internalize_module(glob, "add_bias")
    assert {g.name: g.linkage.name for g in glob.global_variables}["bias"] == "external"


_TABLE_SOURCE = r"""
__device__ int twice(int x) { return 2 * x; }
__device__ int thrice(int x) { return 3 * x; }
__device__ int unused(int x) { return x - 1; }
__device__ int helper(int x) { return x + 7; }
__device__ int (*table[])(int) = {twice, thrice};
extern "C" __global__ void apply(int *out, int which) { out[threadIdx.x] = helper(table[which](out[threadIdx.x])); }
extern "C" __global__ void other(int *out) { out[0] = unused(out[0]); }
"""


def test_pruning_an_internalized_module_keeps_what_pruning_first_keeps(tmp_path):
    """An internalized module is pruned by LLVM's global DCE alone: the same functions survive as when the
    kernel's reachable set (calls, and functions a device global's table points at) is computed first."""
    source = tmp_path / "table.cu"
    source.write_text(_TABLE_SOURCE)
    path = build_cuda_ir(source, out_dir=tmp_path)
    internalized_first = ir.load(path)
    ir.internalize_module(internalized_first, "apply")
    removed = ir.prune_module(internalized_first, "apply")
    pruned_first = ir.load(path)
    ir.prune_module(pruned_first, "apply")
    ir.internalize_module(pruned_first, "apply")
    kept = set(ir.defined_functions(internalized_first))
    assert kept == set(ir.defined_functions(pruned_first))
    assert "apply" in kept and any("helper" in name for name in kept), kept
    assert not any("unused" in name for name in kept) and "other" not in kept
    assert any("twice" in name for name in kept) and any("thrice" in name for name in kept), kept
    assert removed == 2, kept  # `other` and `unused`


def test_prune_drops_the_other_instantiation_of_a_template():
    mod = ir.load(build_cuda_ir("scale_template"))
    removed = ir.prune_module(mod, "_Z5scaleIiEvPT_S0_i")
    assert removed >= 1 and ir.kernels(mod) == ["_Z5scaleIiEvPT_S0_i"]
    assert "_Z5scaleIfEvPT_S0_i" not in ir.defined_functions(mod)


@needs_hip
def test_linking_modules_of_different_targets_is_refused():
    with pytest.raises(IRError, match="amdgcn-amd-amdhsa.*same device"):
        ir.link([build_cuda_ir("saxpy"), build_hip_ir("vector_add")], "saxpy")


def test_link_to_a_missing_kernel_lists_the_kernels():
    with pytest.raises(IRError, match="kernels present: saxpy"):
        ir.link([build_cuda_ir("saxpy")], "sаxpy_typo")


def test_corpus_kernels_helper_lists_every_mangled_name():
    names = [name for _, name in corpus_kernels()]
    assert "_Z5scaleIfEvPT_S0_i" in names and "warp_reduce" in names and len(names) == 10
