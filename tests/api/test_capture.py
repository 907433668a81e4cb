"""Capture: argument packing, capture descriptions, and real captures on the host backend."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from mneme import capture
from mneme.core.errors import FormatError, UsageError
from mneme.core.ir import Param
from mneme.core.snapshot import RegionPolicy
from paths import ROOT

SAXPY_IR = ROOT / "examples" / "saxpy" / "saxpy.ll"


# -- packing ------------------------------------------------------------------------------------------


def test_scalars_are_packed_by_the_ir_parameter_type():
    assert capture.pack_scalar(7, Param("n", "i32", 4, "int"), 0, "k") == struct.pack("<i", 7)
    assert capture.pack_scalar(-1, Param("n", "i64", 8, "int"), 0, "k") == struct.pack("<q", -1)
    assert capture.pack_scalar(2.5, Param("a", "float", 4, "float"), 1, "k") == struct.pack("<f", 2.5)
    assert capture.pack_scalar(np.float64(0.1), Param("a", "double", 8, "float"), 1, "k") == struct.pack("<d", 0.1)
    assert capture.pack_scalar(np.uint8(255), Param("c", "i8", 1, "int"), 2, "k") == b"\xff"


def test_a_value_that_does_not_fit_names_the_argument():
    with pytest.raises(UsageError, match=r"argument 0 \(n: i32\) of kernel 'k'.*32 bits"):
        capture.pack_scalar(1 << 40, Param("n", "i32", 4, "int"), 0, "k")
    with pytest.raises(UsageError, match="is a float"):
        capture.pack_scalar("x", Param("a", "float", 4, "float"), 1, "k")


def test_aggregates_take_their_bytes():
    param = Param("s", "%struct.S", 8, "struct", 4, 0, 0)
    assert capture.pack_scalar(b"12345678", param, 0, "k") == b"12345678"
    with pytest.raises(UsageError, match="takes 8 bytes"):
        capture.pack_scalar(b"123", param, 0, "k")


# -- descriptions -------------------------------------------------------------------------------------


def test_description_generators_make_the_arrays_they_say(tmp_path):
    spec = {
        "args": [
            5,
            2.0,
            {"scalar": 3, "dtype": "int64"},
            {"name": "x", "random": {"dtype": "float32", "shape": [4], "seed": 1}},
            {"zeros": {"dtype": "int32", "shape": [2, 3]}},
            {"arange": {"dtype": "float64", "shape": [5]}},
            {"full": {"dtype": "uint8", "shape": [3], "value": 9}},
            {"ones": {"shape": [2]}, "tolerance": {"dtype": "f32", "threshold": 1e-6}},
        ]
    }
    args, tolerances, names = capture.build_args(spec)
    assert args[0] == 5 and args[1] == 2.0
    assert args[2] == np.int64(3) and args[2].dtype == np.int64
    assert args[3].dtype == np.float32 and args[3].shape == (4,)
    np.testing.assert_array_equal(args[3], np.random.default_rng(1).uniform(0, 1, 4).astype(np.float32))
    assert args[4].shape == (2, 3) and not args[4].any()
    np.testing.assert_array_equal(args[5], np.arange(5, dtype=np.float64))
    np.testing.assert_array_equal(args[6], [9, 9, 9])
    assert tolerances == {7: RegionPolicy(dtype="f32", threshold=1e-6)}
    assert names[3] == "x" and names[0] == "arg0"


def test_a_bad_description_entry_names_its_field(tmp_path):
    with pytest.raises(FormatError, match=r"args\[1\]"):
        capture.build_args({"args": [1, {"random": {"dtype": "float32"}}]}, "spec.yaml")
    with pytest.raises(FormatError, match=r"args\[0\].*exactly one"):
        capture.build_args({"args": [{"zeros": {"shape": [1]}, "ones": {"shape": [1]}}]}, "spec.yaml")
    with pytest.raises(FormatError, match=r"unknown key"):
        capture.build_args({"args": [{"zeros": {"shape": [1], "sead": 1}}]}, "spec.yaml")


def test_a_description_without_a_kernel_is_refused(tmp_path):
    spec = tmp_path / "c.yaml"
    spec.write_text("ir: k.ll\ngrid: 1\nblock: 1\nargs: []\n")
    with pytest.raises(FormatError, match="'kernel'"):
        capture.capture_spec(spec, tmp_path / "out")


# -- real captures on the host backend ---------------------------------------------------------------


def _saxpy_args(n=3000):
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, n).astype(np.float32)
    y = rng.uniform(-1, 1, n).astype(np.float32)
    return n, np.float32(1.5), x, y


def test_capture_writes_a_database_whose_epilogue_holds_the_kernels_result(tmp_path):
    from mneme.core.records import RecordedExecution
    from mneme.core.snapshot import Snapshot

    n, a, x, y = _saxpy_args()
    outputs = {}
    db = capture.capture(
        SAXPY_IR, "saxpy", 4, 128, [n, a, x, y], tmp_path, backend="host", names=["n", "a", "x", "y"], outputs=outputs
    )
    rec = RecordedExecution.from_json(db)
    assert rec.backend == "host" and rec.kernel_name == "saxpy"
    assert rec.arg_names == ["n", "a", "x", "y"]
    assert [a.kind for a in rec.args] == ["int", "float", "pointer", "pointer"]
    assert rec.specializations == [True, True, False, False]
    assert rec.va_addr == capture.DEFAULT_VA_ADDR
    inst = rec.select()
    assert inst.grid_dim.x == 4 and inst.block_dim.x == 128
    prologue = Snapshot.open(inst.prologue_path)
    epilogue = Snapshot.open(inst.epilogue_path, base=prologue)
    assert prologue.args == inst.args
    y_addr = struct.unpack_from("<Q", inst.args, rec.args[3].offset)[0]
    after = np.frombuffer(epilogue.read_region(y_addr), dtype=np.float32)
    np.testing.assert_allclose(after, a * x + y, rtol=1e-6, atol=1e-6)  # FMA or not
    np.testing.assert_array_equal(outputs[3], after)
    assert np.frombuffer(prologue.read_region(y_addr), dtype=np.float32).tobytes() == y.tobytes()
    # the IR lives inside the database's folder
    assert all(Path(f).parent == tmp_path for f in rec.llvm_files)


def test_capturing_another_launch_adds_an_instance_to_the_same_database(tmp_path):
    from mneme.core.records import RecordedExecution

    n, a, x, y = _saxpy_args(1000)
    first = capture.capture(SAXPY_IR, "saxpy", 2, 64, [n, a, x, y], tmp_path, backend="host")
    second = capture.capture(SAXPY_IR, "saxpy", 4, 32, [n, a, x, y], tmp_path, backend="host")
    assert first == second
    assert len(RecordedExecution.from_json(first)) == 2


def test_tolerances_are_stored_as_the_buffers_verification_policy(tmp_path):
    from mneme.core.snapshot import RegionPolicy, Snapshot

    n, a, x, y = _saxpy_args(500)
    policy = RegionPolicy(dtype="f32", threshold=1e-5, relative=True)
    db = capture.capture(SAXPY_IR, "saxpy", 1, 64, [n, a, x, y], tmp_path, backend="host", tolerances={3: policy})
    from mneme.core.records import RecordedExecution

    inst = RecordedExecution.from_json(db).select()
    epilogue = Snapshot.open(inst.epilogue_path, base=Snapshot.open(inst.prologue_path))
    assert sorted(r.policy == policy for r in epilogue.regions) == [False, True]


def test_wrong_argument_count_or_kind_is_refused_before_anything_runs(tmp_path):
    n, a, x, y = _saxpy_args(10)
    with pytest.raises(UsageError, match="takes 4 arguments"):
        capture.capture(SAXPY_IR, "saxpy", 1, 32, [n, a, x], tmp_path, backend="host")
    with pytest.raises(UsageError, match=r"argument 0 \(arg0\) of kernel 'saxpy' is a i32, not a pointer"):
        capture.capture(SAXPY_IR, "saxpy", 1, 32, [x, a, x, y], tmp_path, backend="host")
    with pytest.raises(UsageError, match="tolerance given for argument 1"):
        capture.capture(SAXPY_IR, "saxpy", 1, 32, [n, a, x, y], tmp_path, backend="host", tolerances={1: {}})
    assert not list(tmp_path.glob("*.json"))


def test_the_example_description_captures_the_saxpy_example(tmp_path):
    db = capture.capture_spec(ROOT / "examples" / "saxpy" / "capture.yaml", tmp_path, backend="host")
    from mneme.core.records import RecordedExecution

    rec = RecordedExecution.from_json(db)
    assert rec.arg_names == ["n", "a", "x", "y"]
    assert rec.select().block_dim.x == 256


def test_a_json_description_is_read_like_yaml_and_names_come_from_it(tmp_path):
    import json

    from mneme.core.records import RecordedExecution

    import shutil

    shutil.copyfile(SAXPY_IR, tmp_path / "saxpy.ll")  # a description's IR lies in its folder
    spec = tmp_path / "saxpy.json"
    spec.write_text(
        json.dumps(
            {
                "ir": "saxpy.ll",
                "kernel": "saxpy",
                "grid": [2],
                "block": [32],
                "args": [
                    {"name": "n", "scalar": 100},
                    {"name": "a", "scalar": 0.5},
                    {"name": "x", "arange": {"dtype": "float32", "shape": [100]}},
                    {"name": "y", "ones": {"dtype": "float32", "shape": [100]}},
                ],
            }
        )
    )
    rec = RecordedExecution.from_json(capture.capture_spec(spec, tmp_path / "out", backend="host"))
    assert rec.arg_names == ["n", "a", "x", "y"] and rec.select().grid_dim.x == 2


def test_device_globals_are_set_snapshotted_and_verified_on_replay(tmp_path):
    from irbuild import build_cuda_ir

    from mneme.core.executor import BaseExecutor
    from mneme.core.records import RecordedExecution
    from mneme.core.snapshot import Snapshot

    data = np.arange(100, dtype=np.float32)
    outputs = {}
    db = capture.capture(
        build_cuda_ir("device_global"),
        "add_bias",
        4,
        32,
        [data, 100],
        tmp_path,
        backend="host",
        globals={"bias": np.float32(2.5)},
        outputs=outputs,
    )
    np.testing.assert_array_equal(outputs[0], data + 2.5)
    rec = RecordedExecution.from_json(db)
    assert rec.globals == {"bias": 4, "launch_count": 4}
    inst = rec.select()
    prologue = Snapshot.open(inst.prologue_path)
    epilogue = Snapshot.open(inst.epilogue_path, base=prologue)
    assert prologue.globals == {"bias": np.float32(2.5).tobytes(), "launch_count": bytes(4)}
    assert epilogue.globals["launch_count"] == np.int32(1).tobytes()
    # launch_count counts launches: replay must restore it before the verified run, every time.
    with BaseExecutor(db, iterations=2) as ex:
        results = [ex.execute(ex.default_config()) for _ in range(2)]
    assert all(r.ok for r in results), [r.error for r in results]


def test_an_unknown_global_is_refused_naming_the_known_ones(tmp_path):
    from irbuild import build_cuda_ir

    with pytest.raises(UsageError, match="no device global 'bogus'.*bias, launch_count"):
        capture.capture(
            build_cuda_ir("device_global"),
            "add_bias",
            1,
            32,
            [np.zeros(4, np.float32), 4],
            tmp_path,
            backend="host",
            globals={"bogus": np.float32(1)},
        )
