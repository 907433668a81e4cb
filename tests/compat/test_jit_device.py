"""`mneme.proteus.jit`, `mneme.device`, `mneme.profile`, `mneme.convert`, `mneme.futures`, `mneme.cli`, `mneme.llvm`."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from mneme.cli import main as mneme_main
from mneme.convert import convert_to_json
from mneme.core import ir
from mneme.device import DeviceModule, MemBuffer, get_device_arch, get_device_count
from mneme.futures import EvalFuture
from mneme.mneme_types import ExperimentConfiguration, dim3
from mneme.profile import gpu_profile_start, gpu_profile_stop, init_profiler
from mneme.proteus import jit
from mneme.recorded_execution import RecordedExecution


@pytest.fixture
def saxpy(saxpy_db):
    rec = RecordedExecution.from_json(str(saxpy_db))
    (inst,) = rec.values()
    return rec, inst


def test_transforms_work_in_place_and_return_the_new_hash(saxpy):
    rec, inst = saxpy
    mod = ir.clone(rec.link_llvm_modules())
    before = ir.module_hash(mod)
    with inst.prologue as state:
        new = jit.specialize_args(
            mod, before, rec.kernel_name, state.args, state.num_args, inst.available_specializations
        )
    assert new != before and ir.module_hash(mod) != before  # the caller's handle holds the result
    params = [p.name for p in ir.kernel_params(mod, rec.kernel_name)]
    assert len(params) == 4
    again = jit.specialize_dims(mod, new, rec.kernel_name, inst.grid_dim, inst.block_dim)
    assert again != new
    bounded = jit.set_launch_bounds(mod, again, rec.kernel_name, 256, 1)
    assert bounded != again


def test_transform_arguments_are_checked(saxpy):
    rec, inst = saxpy
    mod = ir.clone(rec.link_llvm_modules())
    with pytest.raises(RuntimeError):
        jit.specialize_args(mod, "h", rec.kernel_name, b"", 4, [0, 1, 2, 3, 4])
    with pytest.raises(RuntimeError):
        jit.set_launch_bounds(mod, "h", rec.kernel_name, 2048, 1)
    with pytest.raises(ValueError):
        jit.optimize(mod, get_device_arch(), "default<O3>", 4)


def test_compile_load_and_profile_on_the_recorded_state(saxpy):
    rec, inst = saxpy
    mod = ir.clone(rec.link_llvm_modules())
    arch = get_device_arch()
    assert get_device_count() >= 1
    jit.optimize(mod, arch, "3", 3)
    buffer = jit.codegen_object(mod, arch)
    assert isinstance(buffer, MemBuffer) and len(buffer) > 0
    # The current release's signature (mod, arch, level) and the documented one (mod, arch, type, level).
    assert bytes(jit.codegen_object(mod, arch, 3)) == bytes(jit.codegen_object(mod, arch, "serial", 3)) == bytes(buffer)
    assert bytes(jit.codegen_object(mod, arch, codegen_opt_level=3)) == bytes(buffer)
    with pytest.raises(ValueError, match="0..3"):
        jit.codegen_object(mod, arch, 7)
    with pytest.raises(TypeError, match="codegen_object"):
        jit.codegen_object(mod, arch, "serial", 3, 1)
    assert jit.get_proteus_codegen_method() == "rtc"  # Proteus's default when PROTEUS_CODEGEN is unset
    with pytest.raises(TypeError):
        DeviceModule.from_MemBuffer(b"not a buffer")
    module = DeviceModule.from_MemBuffer(buffer)
    function = module.get_function(rec.kernel_name)
    with inst.prologue as state:
        times = function.profile(inst.grid_dim, inst.block_dim, state, None, 0, 3)
    assert len(times) == 3 and all(isinstance(t, int) and t > 0 for t in times)
    again = module.get_function(rec.kernel_name)
    again.invalidate()
    with pytest.raises(RuntimeError, match="unloaded"):
        again.launch(inst.grid_dim, inst.block_dim)  # an invalidated handle refuses, its module still loaded
    assert function.reg_usage >= 0
    module.unload()
    with pytest.raises(RuntimeError):
        function.launch(inst.grid_dim, inst.block_dim)  # unloading invalidates every function of the module


def test_profile_needs_init_profiler_first():
    code = (
        "import mneme.profile as p\ntry:\n    p.gpu_profile_start('k')\nexcept RuntimeError as e:\n"
        "    print('refused:', e)\np.init_profiler()\nprint('id', p.gpu_profile_start('k'))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "refused: Profile library is not initialized" in done.stdout and "id 1" in done.stdout


def test_profile_reports_the_device_time_of_each_launch_between_start_and_stop(saxpy):
    rec, inst = saxpy
    mod = ir.clone(rec.link_llvm_modules())
    arch = get_device_arch()
    jit.optimize(mod, arch, "3", 3)
    module = DeviceModule.from_MemBuffer(jit.codegen_object(mod, arch))
    function = module.get_function(rec.kernel_name)
    init_profiler()
    try:
        with inst.prologue as state:
            function.profile(inst.grid_dim, inst.block_dim, state, None, 0, 1)  # restores the recorded state
            session = gpu_profile_start(rec.kernel_name)
            other = gpu_profile_start("another_kernel")
            for _ in range(3):
                function.launch(inst.grid_dim, inst.block_dim, state.packed_args)
            timed = function.profile(inst.grid_dim, inst.block_dim, state, None, 0, 2)
            records = gpu_profile_stop(session)
        assert len(records) == 5 and records[3:] == timed  # three launches, then profile's two runs
        assert all(isinstance(r, int) and r > 0 for r in records)
        with pytest.raises(RuntimeError, match="no launch of kernel 'another_kernel'"):
            gpu_profile_stop(other)  # nothing of that kernel ran
        with pytest.raises(RuntimeError):
            gpu_profile_stop(session)  # each session stops once
    finally:
        module.unload()


def test_convert_writes_proteus_tuned_kernel_json(saxpy, tmp_path, capsys):
    rec, inst = saxpy
    config = ExperimentConfiguration(grid=dim3(64), block=dim3(256), passes="default<O2>", codegen_opt=2)
    convert_to_json(str(tmp_path / "tuned.json"), rec, inst, config)
    data = json.loads((tmp_path / "tuned.json").read_text())
    assert data["saxpy"]["Pipeline"] == "default<O2>" and data["saxpy"]["CodeGenOptLevel"] == 2
    assert 'annotate("jit", 1,2)' in capsys.readouterr().out


def test_eval_future_error_gives_a_failed_result_as_the_current_original():
    future = EvalFuture(3, params={"grid": {"x": 1}, "block": {"x": 2}})  # the documented version's dict
    future.set_error("worker died")
    assert future.done() and future.job_id == 3 and future.config.block.x == 2
    result = future.result()
    assert result.failed and not result.executed and result.error == "worker died"


def test_cli_main_returns_the_exit_code(saxpy_db, tmp_path):
    assert mneme_main(["inspect", str(saxpy_db)]) == 0
    assert mneme_main(["replay", "-rdb", str(tmp_path / "missing.json")]) == 2


def test_transforms_refuse_what_is_not_a_module_with_type_error():
    calls = [
        (jit.internalize, ("k",)),
        (jit.pruneIR, ()),
        (jit.optimize, ("sm_90", "3", 3)),
        (jit.codegen_object, ("sm_90",)),
        (jit.specialize_dims, ("h", "k", dim3(1), dim3(1))),
        (jit.specialize_dims_assume, ("h", "k", dim3(1), dim3(1))),
        (jit.set_launch_bounds, ("h", "k", 128, 1)),
        (jit.specialize_args, ("h", "k", b"", 0, [])),
        (jit.remove_auto_init, ("h", "k")),
    ]
    for function, args in calls:
        with pytest.raises(TypeError, match="expected an LLVM ModuleRef"):
            function("define void @k() { ret void }", *args)
