"""Capture descriptions express what real programs pass (issue 28, point 4): padded and aligned buffers,
pointers into another buffer, device globals with initial values, structs by value, strict keys,
and a warning when an output stays all zero or unchanged. Real kernels, built by clang-19."""

from __future__ import annotations

import logging
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from irbuild import build_cuda_ir, cuda_available
from paths import DATA

from mneme import capture
from mneme.core.errors import ExperimentError, FormatError, LimitError, UsageError

pytestmark = pytest.mark.skipif(not cuda_available()[0], reason=cuda_available()[1])
SOURCE = DATA / "capture" / "real_inputs.cu"
CLI = [sys.executable, "-m", "mneme"]


@pytest.fixture(scope="module")
def ir() -> Path:
    return build_cuda_ir(SOURCE)


def _spec(tmp_path: Path, ir: Path, body: str, kernel: str, grid: int = 4, block: int = 256) -> Path:
    path = tmp_path / "spec.yaml"
    if not (tmp_path / ir.name).exists():
        shutil.copyfile(ir, tmp_path / ir.name)  # a description's IR lies in its folder
    path.write_text(f"ir: {ir.name}\nkernel: {kernel}\ngrid: {grid}\nblock: {block}\n{body}")
    return path


def _replay_verified(db: Path) -> None:
    from mneme.core.executor import BaseExecutor

    with BaseExecutor(db, iterations=1) as ex:
        result = ex.execute(ex.default_config())
    assert result.ok and result.verified, result.error


def _epilogue(db: Path):
    from mneme.core.records import RecordedExecution
    from mneme.core.snapshot import Snapshot

    rec = RecordedExecution.from_json(db)
    inst = rec.select()
    prologue = Snapshot.open(inst.prologue_path)
    return rec, inst, prologue, Snapshot.open(inst.epilogue_path, base=prologue)


def _stencil(x: np.ndarray, left: float, right: float) -> np.ndarray:
    padded = np.concatenate([[left], x, [right]]).astype(np.float32)
    return (np.float32(0.25) * padded[:-2] + np.float32(0.5) * padded[1:-1] + np.float32(0.25) * padded[2:]).astype(
        np.float32
    )


# -- padding and alignment ---------------------------------------------------------------------------

STENCIL = """args:
  - name: in
    random: {dtype: float32, shape: [1024], seed: 4}
%s  - {name: out, zeros: {dtype: float32, shape: [1024]}, tolerance: {dtype: f32, threshold: 1.0e-6}}
  - 1024
"""


def test_a_read_just_outside_an_array_is_refused_on_the_host_without_padding(tmp_path, ir):
    spec = _spec(tmp_path, ir, STENCIL % "", "stencil3")
    with pytest.raises(ExperimentError, match=r"invalid memory access.*0x15393ffffffc") as error:
        capture.capture_spec(spec, tmp_path / "out", backend="host")
    # the message says which buffer the address is next to, and what to add
    assert "0x15393ffffffc is 4 bytes before buffer 'in' (argument 0)" in str(error.value)
    assert "padding: {before: N, after: N}" in str(error.value)


def test_padding_is_real_memory_the_kernel_reads_and_replay_restores(tmp_path, ir):
    padding = "    padding: {before: 1, after: 1, value: 3.0}\n"
    spec = _spec(tmp_path, ir, STENCIL % padding, "stencil3")
    db = capture.capture_spec(spec, tmp_path / "out", backend="host")
    rec, inst, prologue, epilogue = _epilogue(db)
    x = np.random.default_rng(4).uniform(0, 1, 1024).astype(np.float32)
    addr = struct.unpack_from("<Q", inst.args, rec.args[0].offset)[0]
    region = next(r for r in prologue.regions if r.addr <= addr < r.addr + r.size)
    assert (region.addr, region.size) == (addr - 4, 1026 * 4)  # the padding is part of the allocation
    assert addr % 256 == 0  # the first element keeps cudaMalloc's alignment
    held = np.frombuffer(prologue.read_region(region.addr), np.float32)
    np.testing.assert_array_equal(held, np.concatenate([[3.0], x, [3.0]]).astype(np.float32))
    out_addr = struct.unpack_from("<Q", inst.args, rec.args[1].offset)[0]
    result = np.frombuffer(epilogue.read_region(out_addr), np.float32)
    np.testing.assert_allclose(result, _stencil(x, 3.0, 3.0), rtol=1e-6)
    _replay_verified(db)


def test_a_buffer_is_placed_at_the_alignment_it_asks_for(tmp_path, ir):
    x = np.ones(1024, np.float32)
    buf = capture.Buffer(x, before=3, after=5, align=4096)
    outputs = {}
    db = capture.capture(
        ir, "stencil3", 4, 256, [buf, np.zeros(1024, np.float32), 1024], tmp_path, backend="host", outputs=outputs
    )
    rec, inst, prologue, _ = _epilogue(db)
    addr = struct.unpack_from("<Q", inst.args, rec.args[0].offset)[0]
    assert addr % 4096 == 0
    assert any(r.addr == addr - 12 and r.size == (3 + 1024 + 5) * 4 for r in prologue.regions)
    np.testing.assert_allclose(outputs[1], _stencil(x, 0.0, 0.0))  # padding filled with 0 by default
    with pytest.raises(ValueError, match="power of two"):
        capture.Buffer(x, align=24)


SHIFT = """args:
  - {name: in, arange: {dtype: float32, shape: [1000]}}
  - {name: out, zeros: {dtype: float32, shape: [1000]}%s}
  - 1000
"""


def test_the_host_bounds_check_counts_the_padding_as_part_of_the_allocation(tmp_path, ir):
    # without padding, the write one element past the end is caught at element granularity
    with pytest.raises(ExperimentError, match=r"wrote out of bounds: bytes 4000\.\.4003 of the 4000-byte buffer"):
        capture.capture_spec(_spec(tmp_path, ir, SHIFT % "", "shift_right"), tmp_path / "a", backend="host")
    # with one element of padding after it, that element is the program's memory: captured and verified
    spec = _spec(tmp_path, ir, SHIFT % ", padding: {after: 1}", "shift_right")
    db = capture.capture_spec(spec, tmp_path / "b", backend="host")
    rec, inst, _, epilogue = _epilogue(db)
    out = struct.unpack_from("<Q", inst.args, rec.args[1].offset)[0]
    np.testing.assert_array_equal(
        np.frombuffer(epilogue.read_region(out), np.float32), np.concatenate([[0], np.arange(1000)]).astype(np.float32)
    )
    _replay_verified(db)


def test_padding_over_the_buffer_limit_is_refused_before_allocating(tmp_path, ir, monkeypatch):
    monkeypatch.setenv("MNEME_LIMIT_BUFFER_BYTES", "8192")
    spec = _spec(tmp_path, ir, STENCIL % "    padding: {before: 0, after: 2000000000}\n", "stencil3")
    with pytest.raises(LimitError, match=r"args\[0\].*padding.*buffer_bytes"):
        capture.capture_spec(spec, tmp_path / "out", backend="host")


def test_all_buffers_of_a_description_together_are_bounded_before_allocating(tmp_path, ir, monkeypatch):
    monkeypatch.setenv("MNEME_LIMIT_CAPTURE_BYTES", "10000")
    body = "buffers:\n  a: {zeros: {shape: [2000]}}\n  b: {zeros: {shape: [2000]}}\n" + STENCIL % ""
    with pytest.raises(LimitError, match=r"buffers\.a\.zeros\.shape.*capture_bytes=10000"):
        capture.capture_spec(_spec(tmp_path, ir, body, "stencil3"), tmp_path / "out", backend="host")


# -- pointers into another buffer --------------------------------------------------------------------


def test_pointer_arguments_point_into_a_named_buffer_at_an_offset(tmp_path, ir):
    body = """buffers:
  pool: {arange: {dtype: float32, shape: [1024]}, output: true}
args:
  - {name: src, ptr: pool, offset: 0}
  - {name: dst, ptr: pool, offset: 512}
  - 2.0
  - 512
"""
    db = capture.capture_spec(_spec(tmp_path, ir, body, "copy_scaled", grid=2), tmp_path / "out", backend="host")
    rec, inst, prologue, epilogue = _epilogue(db)
    src, dst = (struct.unpack_from("<Q", inst.args, rec.args[i].offset)[0] for i in (0, 1))
    assert dst - src == 512 * 4
    pool = np.frombuffer(epilogue.read_region(src), np.float32)
    expected = np.arange(1024, dtype=np.float32)
    expected[512:] = 2 * expected[:512]
    np.testing.assert_array_equal(pool, expected)
    _replay_verified(db)


def test_a_pointer_may_point_into_another_argument_by_name_or_index(tmp_path, ir):
    x = np.arange(256, dtype=np.float32)
    outputs = {}
    capture.capture(
        ir,
        "copy_scaled",
        1,
        128,
        [x, capture.Pointer(0, 128), np.float32(3), 128],
        tmp_path,
        backend="host",
        outputs=outputs,
        names=["src", "dst", "a", "n"],
    )
    np.testing.assert_array_equal(outputs[0][128:], 3 * x[:128])


@pytest.mark.parametrize("offset", [1025, -1])
def test_a_pointer_outside_its_buffer_is_refused_naming_the_field(tmp_path, ir, offset):
    body = f"""buffers:
  pool: {{zeros: {{dtype: float32, shape: [1024]}}}}
args:
  - {{ptr: pool}}
  - {{ptr: pool, offset: {offset}}}
  - 2.0
  - 1
"""
    with pytest.raises(FormatError, match=rf"spec.yaml: field 'args\[1\]'.*offset {offset} lies outside buffer 'pool'"):
        capture.capture_spec(_spec(tmp_path, ir, body, "copy_scaled"), tmp_path / "out", backend="host")


def test_a_pointer_may_point_into_the_padding(tmp_path, ir):
    body = """buffers:
  pool: {ones: {dtype: float32, shape: [4]}, padding: {before: 2}}
args:
  - {ptr: pool, offset: -2}
  - {name: out, zeros: {dtype: float32, shape: [6]}}
  - 1.0
  - 6
"""
    outputs = {}
    spec = _spec(tmp_path, ir, body, "copy_scaled", grid=1, block=32)
    args, tolerances, names = capture.build_args(capture.load_spec(spec), spec, tmp_path)
    from mneme.capture_spec import build_buffers

    buffers, _ = build_buffers(capture.load_spec(spec), spec, tmp_path)
    capture.capture(ir, "copy_scaled", 1, 32, args, tmp_path / "o", backend="host", buffers=buffers, outputs=outputs)
    np.testing.assert_array_equal(outputs[1], [0, 0, 1, 1, 1, 1])


# -- device globals ------------------------------------------------------------------------------------


def _conv(x: np.ndarray, taps: np.ndarray, bias: float) -> np.ndarray:
    out = np.full(x.size, bias, np.float64)
    for t, w in enumerate(taps):
        shifted = np.zeros(x.size)
        j = np.arange(x.size) + t - len(taps) // 2
        ok = (j >= 0) & (j < x.size)
        shifted[ok] = x[j[ok]]
        out += w * shifted
    return out


CONV = """args:
  - {name: in, arange: {dtype: float32, shape: [512]}}
  - {name: out, zeros: {dtype: float32, shape: [512]}, tolerance: {dtype: f32, threshold: 1.0e-4, relative: true}}
  - 512
"""


def test_constant_and_device_globals_take_initial_values_and_replay_restores_them(tmp_path, ir):
    taps = np.array([1, 2, 3, 2, 1], np.float32)
    body = (
        "globals:\n  conv_filter: {literal: {dtype: float32, values: [1, 2, 3, 2, 1]}}\n"
        "  conv_bias: {scalar: 0.5, dtype: float32}\n" + CONV
    )
    db = capture.capture_spec(_spec(tmp_path, ir, body, "conv1d", grid=2), tmp_path / "out", backend="host")
    rec, inst, prologue, epilogue = _epilogue(db)
    assert rec.globals == {"conv_filter": 20, "conv_bias": 4}
    assert prologue.globals == {"conv_filter": taps.tobytes(), "conv_bias": np.float32(0.5).tobytes()}
    out_addr = struct.unpack_from("<Q", inst.args, rec.args[1].offset)[0]
    result = np.frombuffer(epilogue.read_region(out_addr), np.float32)
    np.testing.assert_allclose(result, _conv(np.arange(512), taps, 0.5), rtol=1e-5)
    _replay_verified(db)


def test_globals_come_from_files_and_random_generators_sized_by_the_module(tmp_path, ir):
    taps = np.array([0.5, -1, 4, -1, 0.5], np.float32)
    taps.tofile(tmp_path / "taps.bin")
    body = (
        "globals:\n  conv_filter: {file: {dtype: float32, path: taps.bin}}\n"
        "  conv_bias: {random: {dtype: float32, seed: 9}}\n" + CONV
    )
    db = capture.capture_spec(_spec(tmp_path, ir, body, "conv1d", grid=2), tmp_path / "out", backend="host")
    _, _, prologue, _ = _epilogue(db)
    bias = np.random.default_rng(9).uniform(0, 1, 1).astype(np.float32)
    assert prologue.globals == {"conv_filter": taps.tobytes(), "conv_bias": bias.tobytes()}


@pytest.mark.parametrize(
    "globals_, field, message",
    [
        ("  conv_filtr: {scalar: 1.0, dtype: float32}\n", "globals.conv_filtr", "did you mean 'conv_filter'"),
        ("  conv_filter: {literal: {dtype: float32, values: [1, 2, 3]}}\n", "globals.conv_filter", "20 bytes"),
        ("  conv_bias: {scalar: 1.0}\n", "globals.conv_bias.dtype", "needs a dtype"),
        ("  conv_bias: {literl: {values: [1]}}\n", "globals.conv_bias.literl", "did you mean 'literal'"),
    ],
)
def test_a_bad_global_is_refused_naming_it(tmp_path, ir, globals_, field, message):
    spec = _spec(tmp_path, ir, "globals:\n" + globals_ + CONV, "conv1d")
    with pytest.raises(FormatError, match=rf"spec.yaml: field '{field}'.*{message}"):
        capture.capture_spec(spec, tmp_path / "out", backend="host")


# -- structs by value ----------------------------------------------------------------------------------

AXPBY = """buffers:
  x: {arange: {dtype: float32, shape: [300]}}
args:
  - name: p
    struct:
      - {name: n, dtype: int32, value: 300}
      - {name: alpha, dtype: %s, value: 2.0}
      - {name: x, ptr: x}
      - {name: beta, dtype: float32, value: 0.5}
%s  - {name: y, ones: {dtype: float32, shape: [300]}}
"""
OFFSET_FIELD = "      - {name: offset, dtype: float64, value: 10.0}\n"


def test_a_struct_passed_by_value_is_packed_from_typed_fields(tmp_path, ir):
    db = capture.capture_spec(
        _spec(tmp_path, ir, AXPBY % ("float32", OFFSET_FIELD), "axpby_struct", grid=2), tmp_path / "out", backend="host"
    )
    rec, inst, prologue, epilogue = _epilogue(db)
    assert rec.args[0].kind == "struct" and rec.args[0].size == 32
    n, alpha, x_addr, beta, offset = struct.unpack_from("<if Q f 4x d", inst.args, rec.args[0].offset)
    assert (n, alpha, beta, offset) == (300, 2.0, 0.5, 10.0)
    assert np.frombuffer(prologue.read_region(x_addr), np.float32)[:3].tolist() == [0, 1, 2]
    y_addr = struct.unpack_from("<Q", inst.args, rec.args[1].offset)[0]
    y = np.frombuffer(epilogue.read_region(y_addr), np.float32)
    np.testing.assert_array_equal(y, 2 * np.arange(300, dtype=np.float32) + 0.5 + 10)
    _replay_verified(db)


@pytest.mark.parametrize(
    "alpha, extra, field, message",
    [
        ("float32", "", r"args\[0\]\.struct", "take 24 bytes .* is 32 bytes"),
        ("float64", OFFSET_FIELD, r"args\[0\]\.struct", "take 40 bytes"),
        ("int32", OFFSET_FIELD, r"args\[0\]\.struct\[1\]", "'alpha' is an integer .* is a float"),
    ],
)
def test_a_struct_that_does_not_match_the_kernels_is_refused_naming_the_argument(
    tmp_path, ir, alpha, extra, field, message
):
    spec = _spec(tmp_path, ir, AXPBY % (alpha, extra), "axpby_struct")
    with pytest.raises(FormatError, match=rf"spec.yaml: field '{field}'.*{message}"):
        capture.capture_spec(spec, tmp_path / "out", backend="host")
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").glob("*.json"))


def test_a_struct_from_python_takes_numpy_fields_and_pointers(tmp_path, ir):
    x = np.arange(64, dtype=np.float32)
    params = capture.Struct(
        {
            "n": np.int32(64),
            "alpha": np.float32(1),
            "x": capture.Pointer("x"),
            "beta": np.float32(0),
            "offset": np.float64(1),
        }
    )
    outputs = {}
    capture.capture(
        ir,
        "axpby_struct",
        1,
        64,
        [params, np.zeros(64, np.float32)],
        tmp_path,
        backend="host",
        buffers={"x": x},
        outputs=outputs,
    )
    np.testing.assert_array_equal(outputs[1], x + 1)
    with pytest.raises(UsageError, match=r"field 'n' needs a typed value"):
        capture.capture(
            ir,
            "axpby_struct",
            1,
            64,
            [capture.Struct({"n": 64}), np.zeros(64, np.float32)],
            tmp_path / "b",
            backend="host",
        )


# -- strict validation ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "entry, field, message",
    [
        # a dtype next to a generator was silently ignored: the buffer had the generator's default type
        ("{dtype: float64, zeros: {shape: [1024]}}", r"args\[1\]\.dtype", "dtype goes inside zeros"),
        (
            "{zeros: {dtype: float32, shape: [1024]}, paddng: {after: 1}}",
            r"args\[1\]\.paddng",
            "did you mean 'padding'",
        ),
        (
            "{zeros: {dtype: float32, shape: [1024]}, padding: {afer: 1}}",
            r"args\[1\]\.padding\.afer",
            "did you mean 'after'",
        ),
        ("{zeros: {dtype: float32, shape: [1024]}, output: yes please}", r"args\[1\]\.output", "true or false"),
        (
            "{zeros: {dtype: float32, shape: [1024]}, tolerance: {dtype: f32, relative: 'no'}}",
            r"args\[1\]\.tolerance\.relative",
            "true or false",
        ),
        ("{zeros: {dtype: float32, shape: [1024]}, align: 48}", r"args\[1\]\.align", "power of two"),
        ("{ptr: in, ofset: 4}", r"args\[1\]\.ofset", "did you mean 'offset'"),
        ("{ptr: in, tolerance: {dtype: f32}}", r"args\[1\]\.tolerance", "set it on the buffer"),
        ("{ptr: [in]}", r"args\[1\]\.ptr", "names a buffer"),
        ("{scalar: 1, offset: 2}", r"args\[1\]\.offset", "goes with ptr"),
    ],
)
def test_every_unknown_or_misplaced_key_and_wrong_type_is_refused_naming_the_field(tmp_path, ir, entry, field, message):
    body = f"args:\n  - {{name: in, zeros: {{dtype: float32, shape: [1024]}}}}\n  - {entry}\n  - 1024\n"
    spec = _spec(tmp_path, ir, body, "stencil3")
    with pytest.raises(FormatError, match=rf"spec.yaml: field '{field}'.*{message}"):
        capture.capture_spec(spec, tmp_path / "out", backend="host")


def test_a_scalar_the_kernels_parameter_cannot_hold_is_refused_naming_the_field(tmp_path, ir):
    body = "args:\n  - {zeros: {shape: [4]}}\n  - {zeros: {shape: [4]}}\n  - 4294967296\n"
    with pytest.raises(FormatError, match=r"spec.yaml: field 'args\[2\]'.*does not fit in 32 bits"):
        capture.capture_spec(_spec(tmp_path, ir, body, "stencil3"), tmp_path / "out", backend="host")


def test_the_cli_refuses_a_bad_description_with_one_line_and_exit_2(tmp_path, ir):
    body = "globals:\n  conv_filter: {random: {dtype: float32, sede: 1}}\n" + CONV
    spec = _spec(tmp_path, ir, body, "conv1d")
    proc = subprocess.run(
        [*CLI, "capture", str(spec), "-o", str(tmp_path / "out"), "--backend", "host"],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and str(spec) in lines[0], proc.stderr
    assert "globals.conv_filter.random.sede" in lines[0] and "did you mean 'seed'" in lines[0], proc.stderr


# -- outputs that stay zero ----------------------------------------------------------------------------


def test_an_output_left_all_zero_by_an_all_zero_filter_is_warned_about(tmp_path, ir, caplog):
    spec = _spec(tmp_path, ir, CONV, "conv1d", grid=2)  # the filter is never set: all zero, as is the bias
    with caplog.at_level(logging.WARNING, logger="mneme.capture"):
        capture.capture_spec(spec, tmp_path / "out", backend="host")
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("buffer 'out'" in w and "unchanged by the launch (all zero)" in w for w in warnings), warnings
    assert not any("buffer 'in'" in w for w in warnings), warnings


def test_an_output_the_launch_fills_is_not_warned_about(tmp_path, ir, caplog):
    body = "globals:\n  conv_filter: {literal: {dtype: float32, values: [1, 2, 3, 2, 1]}}\n" + CONV
    with caplog.at_level(logging.WARNING, logger="mneme.capture"):
        capture.capture_spec(_spec(tmp_path, ir, body, "conv1d", grid=2), tmp_path / "out", backend="host")
    assert not [r for r in caplog.records if r.levelno == logging.WARNING]


def test_a_buffer_marked_output_that_the_kernel_never_writes_is_warned_about(tmp_path, ir, caplog):
    x = capture.Buffer(np.ones(64, np.float32), output=True)
    with caplog.at_level(logging.WARNING, logger="mneme.capture"):
        capture.capture(
            ir,
            "copy_scaled",
            1,
            64,
            [x, np.zeros(64, np.float32), np.float32(2), 64],
            tmp_path,
            backend="host",
            names=["src", "dst", "a", "n"],
        )
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("buffer 'src', marked as an output, is unchanged" in w for w in warnings), warnings


def test_the_cli_prints_the_all_zero_output_warning(tmp_path, ir):
    spec = _spec(tmp_path, ir, CONV, "conv1d", grid=2)
    proc = subprocess.run(
        [*CLI, "capture", str(spec), "-o", str(tmp_path / "out"), "--backend", "host"],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr
    assert "'out'" in proc.stderr and "unchanged by the launch" in proc.stderr, proc.stderr
