"""Pipelines as the original Mneme has them, over the passes LLVM itself registers (read through llvmlite)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from mneme.core import pass_registry
from mneme.core.errors import UsageError
from mneme.core.pipeline import Pipeline, parse_pipeline
from mneme.pipeline import AbstractPass, PassLevel, PipelineManager
from .conftest import run_mneme

pytestmark = pytest.mark.skipif(not pass_registry.available(), reason="needs llvmlite's LLVM symbols (x86-64 Linux)")

# A kernel-shaped function with a loop nest, a call and memory traffic: every tunable pass has work to do.
LOOPS = textwrap.dedent("""\
    define internal float @scale(float %v, float %a) {
      %r = fmul float %v, %a
      ret float %r
    }
    define void @stencil(ptr noalias %out, ptr noalias %in, i32 %n, i32 %m, float %a) {
    entry:
      %c0 = icmp sgt i32 %n, 0
      br i1 %c0, label %outer, label %exit
    outer:
      %i = phi i32 [ 0, %entry ], [ %i.next, %latch ]
      br label %inner
    inner:
      %j = phi i32 [ 0, %outer ], [ %j.next, %inner ]
      %acc = phi float [ 0.0, %outer ], [ %acc.next, %inner ]
      %row = mul i32 %i, %m
      %idx = add i32 %row, %j
      %idx64 = sext i32 %idx to i64
      %p = getelementptr inbounds float, ptr %in, i64 %idx64
      %v = load float, ptr %p, align 4
      %s = call float @scale(float %v, float %a)
      %acc.next = fadd float %acc, %s
      %j.next = add nsw i32 %j, 1
      %jc = icmp slt i32 %j.next, %m
      br i1 %jc, label %inner, label %latch
    latch:
      %i64 = sext i32 %i to i64
      %q = getelementptr inbounds float, ptr %out, i64 %i64
      store float %acc.next, ptr %q, align 4
      %i.next = add nsw i32 %i, 1
      %ic = icmp slt i32 %i.next, %n
      br i1 %ic, label %outer, label %exit
    exit:
      ret void
    }
""")


@pytest.fixture(scope="module")
def manager() -> PipelineManager:
    return PipelineManager()


def test_llvm_registry_lists_every_level_with_parameters():
    listed = pass_registry.transform_passes()
    levels = {level for _, _, level in listed}
    assert levels == {"module", "cgscc", "function", "loopnest", "loop"}
    names = pass_registry.pass_names()
    assert len(names) > 250 and {"gvn", "licm", "instcombine", "globalopt", "inline", "loop-interchange"} <= set(names)
    params = {name: p for name, p, _ in listed}
    assert "bonus-inst-threshold=N" in params["simplifycfg"] and params["gvn"].startswith("<")


def test_tunable_passes_are_llvm_transforms_without_printers_or_instrumentation(manager):
    passes = manager.get_passes()
    assert len(passes) > 100 and len(passes) == len(set(passes))
    assert set(passes) <= set(pass_registry.pass_names())
    assert not [p for p in passes if p.startswith(("print", "verify", "asan", "dot-", "view-", "pgo"))]
    assert manager.get_concrete_passes()["licm"].level() == PassLevel.LOOPMSSA


def test_to_string_nests_passes_in_their_adaptors(manager):
    concrete = manager.from_string("instcombine,licm,gvn<no-pre>,globalopt,inline,loop-unroll-and-jam")
    assert [str(p) for p in concrete] == [
        "instcombine",
        "licm",
        "gvn<no-pre>",
        "globalopt",
        "inline",
        "loop-unroll-and-jam",
    ]
    assert manager.to_string(concrete) == (
        "function<eager-inv>(instcombine,loop-mssa(licm),gvn<no-pre>),globalopt,"
        "cgscc(inline),function<eager-inv>(loop(loop-unroll-and-jam))"
    )


def test_from_string_reads_adaptors_and_parameters_back(manager):
    text = "function(loop-mssa(licm<allowspeculation>)),simplifycfg<bonus-inst-threshold=4;keep-loops>,cgscc(inline)"
    concrete = manager.from_string(text)
    assert [(p.pass_name, p.options) for p in concrete] == [
        ("licm", ["allowspeculation"]),
        ("simplifycfg", ["bonus-inst-threshold=4", "keep-loops"]),
        ("inline", []),
    ]
    assert manager.split_pipeline(text) == [
        "licm<allowspeculation>",
        "simplifycfg<bonus-inst-threshold=4;keep-loops>",
        "inline",
    ]
    parse_pipeline(manager.to_string(concrete))  # LLVM accepts what comes back out
    with pytest.raises(RuntimeError, match="no-such-pass"):
        manager.from_string("function(no-such-pass)")


def test_generate_is_seeded_and_every_pipeline_parses_in_llvm(manager):
    first = manager.generate(4, 30, 5, True, seed=7)
    again = manager.generate(4, 30, 5, True, seed=7)
    texts = [manager.to_string(p) for p in first]
    assert texts == [manager.to_string(p) for p in again] and len(set(texts)) == 4
    assert all(isinstance(p, AbstractPass.ConcretePass) for pipeline in first for p in pipeline)
    assert all(15 <= len(p) <= 45 for p in first)
    for text in texts:
        assert parse_pipeline(text) == Pipeline(text=text)
    unique = manager.generate(1, 50, 0, allow_repeats=False, seed=1)[0]
    assert len({p.pass_name for p in unique}) == len(unique) == 50


@pytest.mark.parametrize(
    "text",
    [
        "function(instcombine)",
        "function(loop-mssa(licm))",
        "gvn<no-pre>",
        "simplifycfg<bonus-inst-threshold=4>",
        "cgscc(inline),function(sroa)",
    ],
)
def test_core_pipelines_accept_llvm_syntax(text):
    assert parse_pipeline(text).text == text


def test_licm_outside_loop_mssa_is_refused_before_llvm_would_stop_the_process():
    # LLVM parses function(loop(licm)) and then ends the process ("LICM requires MemorySSA") when it runs
    with pytest.raises(UsageError, match=r"needs MemorySSA.*loop-mssa\(licm\)"):
        parse_pipeline("function(loop(licm))")
    assert parse_pipeline("licm,gvn").text == "function<eager-inv>(loop-mssa(licm),gvn)"  # names are placed


def test_core_pipelines_keep_the_simple_names_and_levels():
    assert parse_pipeline("instcombine,sroa") == Pipeline(passes=("instcombine", "sroa"))  # llvmlite's own methods
    assert parse_pipeline("instcombine,gvn") == Pipeline(text="function<eager-inv>(instcombine,gvn)")  # via LLVM
    assert parse_pipeline("default<O2>") == Pipeline(level="2")
    with pytest.raises(UsageError, match="unknown function pass 'bogus'"):
        parse_pipeline("function(bogus)")
    with pytest.raises(UsageError, match="max-iterations"):
        parse_pipeline("instcombine<max-iterations=x>")


def test_every_tunable_pass_runs_on_a_loop_nest_and_leaves_valid_ir(manager, tmp_path):
    # In a child: an LLVM pass that asserts would end the process; the child names the pass it ran last.
    (tmp_path / "loops.ll").write_text(LOOPS)
    script = textwrap.dedent("""
        import random, sys
        import llvmlite.binding as llvm
        from mneme.core import ir, pass_registry
        from mneme.pipeline import AbstractPass, PipelineManager
        ir.initialize()
        text = open(sys.argv[1]).read()
        pm = PipelineManager()
        machine = llvm.Target.from_default_triple().create_target_machine()
        for name in pm.get_passes():
            for seed in range(2):  # two draws of the pass's options
                random.seed(seed)
                pipeline = pm.to_string([AbstractPass.ConcretePass(pm.get_pass(name))])
                print(pipeline, flush=True)
                module = llvm.parse_assembly(text)
                builder = llvm.create_pass_builder(machine, llvm.create_pipeline_tuning_options(2))
                mpm = llvm.create_new_module_pass_manager()
                pass_registry.parse_into(builder, mpm, pipeline)
                mpm.run(module, builder)
                module.verify()
        print("ALL OK")
    """)
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "loops.ll")], capture_output=True, text=True, timeout=900
    )
    ran = done.stdout.splitlines()
    assert done.returncode == 0 and ran[-1] == "ALL OK", f"last pass run: {ran[-1:]}\n{done.stderr[-2000:]}"
    assert len(ran) == 2 * len(manager.get_passes()) + 1


def test_a_gpu_targets_own_pass_is_accepted_in_a_pipeline_and_runs_for_that_target():
    import llvmlite.binding as llvm

    from mneme.core import ir

    assert parse_pipeline("nvvm-reflect,function(instcombine)").text == "nvvm-reflect,function(instcombine)"
    ir.initialize()
    machine = llvm.Target.from_triple("nvptx64-nvidia-cuda").create_target_machine(cpu="sm_90")
    module = llvm.parse_assembly(
        'target triple = "nvptx64-nvidia-cuda"\n'
        "define void @k(ptr %p) {\n  %v = add i32 1, 2\n  store i32 %v, ptr %p\n  ret void\n}\n"
    )
    builder = llvm.create_pass_builder(machine, llvm.create_pipeline_tuning_options(3))
    mpm = llvm.create_new_module_pass_manager()
    pass_registry.parse_into(builder, mpm, "nvvm-reflect,function(instcombine)")
    mpm.run(module, builder)
    assert "store i32 3" in str(module)  # instcombine folded the add for the NVPTX target


def test_ir_passes_llvm_lists_llvms_registry():
    done = run_mneme("ir", "passes", "--llvm", "--json")
    assert done.returncode == 0, done.stderr
    listed = {(p["name"], p["level"]) for p in json.loads(done.stdout)}
    assert {("gvn", "function"), ("licm", "loop"), ("inline", "cgscc"), ("globalopt", "module")} <= listed


def test_a_comma_list_of_passes_of_several_levels_is_nested_for_llvm():
    assert parse_pipeline("gvn,globalopt,licm,inline").text == (
        "function<eager-inv>(gvn),globalopt,function<eager-inv>(loop-mssa(licm)),cgscc(inline)"
    )


def test_a_space_file_draws_llvm_pipelines_that_replay_verified(saxpy_db, tmp_path):
    import random

    from mneme.core.executor import BaseExecutor
    from mneme.core.recording import load_recording
    from mneme.core.tuning.space import load_space

    (tmp_path / "space.yaml").write_text(
        "parameters:\n"
        "  passes: {choices: ['function(loop-mssa(licm)),gvn<no-pre>', 'simplifycfg<bonus-inst-threshold=4>']}\n"
    )
    (tmp_path / "drawn.yaml").write_text(
        "parameters:\n  passes: {pipeline: 4, passes: [gvn, globalopt, licm, inline]}\n"
    )
    rec = load_recording(str(saxpy_db))
    instance = rec.select(None)
    configs = []
    for name in ("space.yaml", "drawn.yaml"):
        space = load_space(str(tmp_path / name), rec, instance)
        for seed in range(3):
            configs.append(space.derived(space.decode(space.sample_random(random.Random(seed)))))
    assert any("loop-mssa" in c.passes for c in configs)
    with BaseExecutor(str(saxpy_db), None, 1) as executor:
        for config in configs:
            parse_pipeline(config.passes)
            assert executor.execute(config).verified, config.passes
