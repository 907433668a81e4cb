"""`mneme.llvm` (`module`, `value`, `typeref`): the members the original Mneme API's reference lists."""

from __future__ import annotations

import llvmlite.binding as llvm
import pytest

from mneme.llvm import ModuleRef, TypeKind, TypeRef, ValueKind, ValueRef
from mneme.llvm.module import parse_assembly, parse_bitcode
from mneme.recorded_execution import RecordedExecution

IR = r"""
target datalayout = "e-i64:64-i128:128-v16:16-v32:32-n16:32:64"
target triple = "nvptx64-nvidia-cuda"

%struct.S = type { i8, i32, [3 x i16] }

@g = global i32 7, align 4
@arr = constant [3 x i32] [i32 1, i32 2, i32 3], align 16
@str = constant [4 x i8] c"abc\00"
@s = global %struct.S { i8 1, i32 2, [3 x i16] [i16 4, i16 5, i16 6] }
@p = global ptr getelementptr (i8, ptr @g, i64 2)
@neg = global i8 -1
@ext = external global i32
@a = alias i32, ptr @g

define void @k(ptr align 8 %x, i32 %n) align 16 !dbg !5 {
entry:
  %v = alloca [4 x float], align 8
  %l = load i32, ptr %x, align 4
  store i32 %l, ptr %x, align 2
  %gp = getelementptr inbounds %struct.S, ptr %x, i64 0, i32 1
  %agg = insertvalue { i32, i32 } undef, i32 1, 1
  %e = extractvalue { i32, i32 } %agg, 1
  %c = icmp eq i32 %n, 0
  br i1 %c, label %then, label %done

then:
  br label %done

done:
  %phi = phi i32 [ 0, %entry ], [ 1, %then ]
  ret void
}

declare i32 @decl(i32)

!llvm.dbg.cu = !{!0}
!llvm.module.flags = !{!3}
!0 = distinct !DICompileUnit(language: DW_LANG_C99, file: !1, producer: "clang", isOptimized: false, runtimeVersion: 0, emissionKind: FullDebug)
!1 = !DIFile(filename: "kernel.cu", directory: "/src/app")
!3 = !{i32 2, !"Debug Info Version", i32 3}
!5 = distinct !DISubprogram(name: "k", scope: !1, file: !1, line: 42, type: !6, unit: !0, spFlags: DISPFlagDefinition)
!6 = !DISubroutineType(types: !7)
!7 = !{null}
"""


@pytest.fixture
def mod() -> ModuleRef:
    return parse_assembly(IR, context=llvm.create_context())  # its own context: struct names stay as written


def _insts(mod) -> dict[str, ValueRef]:
    fn = mod.get_function("k")
    return {
        i.opcode if i.opcode not in ("br",) else f"br{n}": i for b in fn.blocks for n, i in enumerate(b.instructions)
    }


# -- ModuleRef -----------------------------------------------------------------------------------
def test_module_lookups_return_references_or_raise_name_error(mod):
    assert isinstance(mod, ModuleRef)
    assert isinstance(mod.get_function("k"), ValueRef) and mod.get_function("k").is_function
    assert mod.get_global_variable("g").is_global
    assert isinstance(mod.get_struct_type("struct.S"), TypeRef)
    for lookup in (mod.get_function, mod.get_global_variable, mod.get_struct_type):
        with pytest.raises(NameError):
            lookup("missing")


def test_module_properties_are_readable_and_the_writable_ones_write(mod):
    assert mod.triple == "nvptx64-nvidia-cuda" and mod.data_layout.startswith("e-i64:64")
    mod.name = "renamed"
    mod.triple = "amdgcn-amd-amdhsa"
    assert mod.name == "renamed" and mod.triple == "amdgcn-amd-amdhsa"
    assert isinstance(mod.source_file, str)
    assert {g.name for g in mod.global_variables} == {"g", "arr", "str", "s", "p", "neg", "ext"}  # no functions
    assert {f.name for f in mod.functions} == {"k", "decl"}
    assert [t.name for t in mod.struct_types if t.name] == ["struct.S"]  # and the literal { i32, i32 }


def test_aliases_and_ifuncs_iterate_value_references(mod):
    (alias,) = list(mod.aliases)
    assert alias.name == "a" and alias.value_kind == ValueKind.global_alias
    assert list(mod.ifuncs) == []
    with pytest.raises(ValueError, match="read-only"):
        alias.linkage = "internal"


def test_parsing_does_not_verify_and_verify_raises_runtime_error():
    parse_assembly("define i32 @f() {\n  ret i32 0\n}\n").verify()
    bad = parse_assembly("define i32 @f() {\n  %a = add i32 %b, 1\n  %b = add i32 1, 1\n  ret i32 %a\n}\n")
    with pytest.raises(RuntimeError):
        bad.verify()  # %a uses %b before it is defined
    with pytest.raises(RuntimeError):
        parse_assembly("define i32 @f() {\n  ret i64 0\n}\n")


def test_clone_and_to_bitcode_round_trip(mod, tmp_path):
    copy = mod.clone()
    assert isinstance(copy, ModuleRef) and str(copy) == str(mod)
    mod.to_bitcode(str(tmp_path / "m.bc"))
    back = parse_bitcode((tmp_path / "m.bc").read_bytes())
    assert back.get_global_variable("g").get_constant_value() == 7
    with pytest.raises(RuntimeError):
        parse_bitcode(b"not bitcode")


# -- ValueRef ------------------------------------------------------------------------------------
def test_values_know_where_they_came_from(mod):
    fn = mod.get_function("k")
    assert fn.module is mod
    block = next(iter(fn.blocks))
    assert block.is_block and block.function is fn
    inst = next(iter(block.instructions))
    assert inst.is_instruction and inst.block is block
    arg = next(iter(fn.arguments))
    assert arg.is_argument and arg.function is fn
    operand = next(iter(_insts(mod)["load"].operands))
    assert operand.is_operand and operand.instruction.opcode == "load"


def test_alignment_of_globals_functions_and_memory_instructions(mod):
    insts = _insts(mod)
    assert mod.get_global_variable("g").alignment == 4
    assert mod.get_global_variable("arr").alignment == 16
    assert mod.get_global_variable("s").alignment == 0  # none given
    assert mod.get_function("k").alignment == 16  # not the parameter's `align 8`
    assert (insts["alloca"].alignment, insts["load"].alignment, insts["store"].alignment) == (8, 4, 2)


def test_memory_instructions_and_the_type_they_access(mod):
    insts = _insts(mod)
    assert all(insts[op].is_memory_instruction for op in ("alloca", "load", "store", "getelementptr"))
    assert not insts["icmp"].is_memory_instruction
    assert str(insts["alloca"].memory_type) == "[4 x float]"
    assert str(insts["load"].memory_type) == "i32" and str(insts["store"].memory_type) == "i32"
    assert insts["getelementptr"].memory_type.name == "struct.S"
    with pytest.raises(ValueError):
        insts["icmp"].memory_type


def test_initializers_of_global_variables(mod):
    g = mod.get_global_variable("g")
    assert g.has_initializer and g.initializer.get_constant_value() == 7
    ext = mod.get_global_variable("ext")
    assert not ext.has_initializer and ext.initializer is None
    assert ext.is_declaration and not g.is_declaration
    with pytest.raises(ValueError):
        mod.get_function("k").initializer


def test_constant_values_of_scalars_aggregates_strings_and_expressions(mod):
    gv = mod.get_global_variable
    assert gv("neg").get_constant_value() == 255 and gv("neg").get_constant_value(signed_int=True) == -1
    assert gv("arr").get_constant_value() == [1, 2, 3]
    assert gv("str").get_constant_value() == "abc\x00"
    assert gv("s").get_constant_value() == [1, 2, [4, 5, 6]]
    expr = gv("p").initializer
    assert expr.value_kind == ValueKind.constant_expr
    assert expr.get_constant_value() == [7, 2]  # operands: @g (its initializer) and the offset
    inst = expr.as_instruction()
    assert inst.is_instruction and inst.opcode == "getelementptr"
    with pytest.raises(ValueError):
        gv("g").initializer.as_instruction()


def test_operands_of_constants_and_instructions(mod):
    s = mod.get_global_variable("s").initializer
    assert [str(op) for op in s.operands] == ["i8 1", "i32 2", "[3 x i16] [i16 4, i16 5, i16 6]"]
    assert [str(op) for op in _insts(mod)["store"].operands][1:] == ["ptr %x"]
    with pytest.raises(ValueError):
        next(iter(mod.get_function("k").blocks)).operands


def test_opcode_indices_and_incoming_blocks(mod):
    insts = _insts(mod)
    assert list(insts["extractvalue"].indices) == [1] and list(insts["insertvalue"].indices) == [1]
    with pytest.raises(ValueError):
        insts["load"].indices
    assert [b.name for b in insts["phi"].incoming_blocks] == ["entry", "then"]
    with pytest.raises(ValueError):
        insts["load"].incoming_blocks
    with pytest.raises(ValueError):
        mod.get_function("k").opcode


def test_names_linkage_visibility_and_attributes_write_in_place(mod):
    g = mod.get_global_variable("g")
    g.name = "renamed"
    g.linkage = "internal"
    g.visibility = "default"
    g.storage_class = "default"
    assert str(g).startswith("@renamed = internal global") and g.linkage.name == "internal"
    fn = mod.get_function("k")
    fn.add_function_attribute("nounwind")
    with pytest.raises(ValueError):
        fn.add_function_attribute("no-such-attribute")
    fn.add_function_key_value_attribute("amdgpu-flat-work-group-size", "1,256")
    attrs = [bytes(a) if isinstance(a, bytes) else a for a in mod.get_function("k").attributes]
    assert any(b'"amdgpu-flat-work-group-size"="1,256"' in a for a in attrs)
    assert any(b"nounwind" in a for a in attrs)
    assert fn.name == "k" and fn.alignment == 16  # the handle still names the function
    mod.verify()
    with pytest.raises(ValueError):
        g.add_function_key_value_attribute("a", "b")


def test_function_location_comes_from_debug_info(mod):
    assert mod.get_function("k").get_function_location() == ("/src/app", "kernel.cu", 42)
    assert mod.get_function("decl").get_function_location() == ("", "", 0)


def test_value_types_are_type_references(mod):
    ty = mod.get_global_variable("g").type
    assert isinstance(ty, TypeRef) and ty.is_pointer
    assert next(iter(mod.get_function("k").arguments)).type.is_pointer


# -- TypeRef -------------------------------------------------------------------------------------
def test_type_predicates_elements_and_counts(mod):
    s = mod.get_struct_type("struct.S")
    assert s.is_struct and not s.is_pointer and s.type_kind == TypeKind.struct
    elements = list(s.elements)
    assert [str(e) for e in elements] == ["i8", "i32", "[3 x i16]"]
    assert elements[2].is_array and elements[2].element_count == 3
    with pytest.raises(ValueError):
        elements[0].element_count


def test_type_widths_under_the_module_data_layout(mod):
    s = mod.get_struct_type("struct.S")
    assert s.type_width == 0  # not a primitive type
    # i8 @0, i32 @4, [3 x i16] @8..14, padded to the i32's alignment: 16 bytes
    assert (s.system_type_width, s.store_type_width, s.alloc_type_width) == (128, 128, 128)
    i8, i32, arr = s.elements
    assert (i32.type_width, i32.system_type_width, i32.store_type_width, i32.alloc_type_width) == (32, 32, 32, 32)
    assert arr.system_type_width == 48 and arr.alloc_type_width == 48
    odd = parse_assembly("define void @h() {\n  %x = alloca i36, align 8\n  ret void\n}\n")
    i36 = next(iter(next(iter(odd.get_function("h").blocks)).instructions)).memory_type
    # 36 bits of value, 5 bytes a store may overwrite, 8 bytes between successive objects
    assert (i36.type_width, i36.system_type_width, i36.store_type_width, i36.alloc_type_width) == (36, 36, 40, 64)
    assert parse_assembly("declare void @f()\n").get_function("f").type.system_type_width == 64  # a pointer


def test_members_work_on_a_recorded_kernel(saxpy_db):
    rec = RecordedExecution.from_json(str(saxpy_db))
    mod = rec.link_llvm_modules()
    kernel = mod.get_function(rec.kernel_name)
    assert isinstance(kernel, ValueRef) and kernel.module is mod
    memory = [i for b in kernel.blocks for i in b.instructions if i.is_memory_instruction]
    assert memory, "saxpy loads and stores"
    for inst in memory:
        if inst.opcode in ("load", "store"):
            assert inst.memory_type.type_width == 32 and inst.alignment == 4  # float accesses
    assert [
        a.type.is_pointer or a.type.type_kind == TypeKind.float or a.type.type_kind == TypeKind.integer
        for a in kernel.arguments
    ] == [True] * 4
