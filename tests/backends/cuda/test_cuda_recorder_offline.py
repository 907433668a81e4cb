"""The CUDA recorder's host-side parts, without a GPU: image extents, atomic writes, finalize.

The native library is built here against the CUDA headers; its exported helpers run on real
inputs (nvcc's own fatbins and cubins). `finalize` runs on launch folders laid out exactly as
the recorder writes them, with code images from nvcc.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

recorder = pytest.importorskip("mneme_cuda.recorder")

from paths import TESTS
from raw_launches import BASE, NVCC, SAXPY_PARAMS, launch_manifest, needs_nvcc, nvcc, write_launch

from mneme.core.errors import MnemeError
from mneme.core.records import RecordedExecution
from mneme.core.snapshot import Snapshot


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    try:
        return recorder.build(tmp_path_factory.mktemp("recorder"))
    except MnemeError as exc:
        pytest.skip(f"needs the CUDA recorder's build: {exc}")


@pytest.fixture(scope="module")
def native(library):
    lib = ctypes.CDLL(str(library))
    lib.mneme_recorder_image_size.restype = ctypes.c_size_t
    lib.mneme_recorder_image_size.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_char_p)]
    lib.mneme_recorder_write_atomic.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t]
    return lib


def _extent(native, data: bytes, padding: int = 4096) -> tuple[int, str]:
    buffer = ctypes.create_string_buffer(data + b"\xee" * padding)  # bytes after the image must not count
    kind = ctypes.c_char_p()
    return native.mneme_recorder_image_size(buffer, ctypes.byref(kind)), kind.value.decode()


@needs_nvcc
def test_the_recorder_measures_fatbins_cubins_and_ptx_as_the_driver_is_given_them(native, tmp_path):
    fatbin = nvcc(tmp_path, "device_global.cu", "fatbin")
    cubin = nvcc(tmp_path, "device_global.cu", "cubin")
    ptx = nvcc(tmp_path, "device_global.cu", "ptx")
    assert _extent(native, fatbin) == (len(fatbin), "fatbin")
    assert _extent(native, cubin) == (len(cubin), "cubin")
    assert _extent(native, ptx + b"\0") == (len(ptx) + 1, "ptx")  # the driver takes PTX NUL-terminated


@needs_nvcc
def test_a_fatbin_behind_cudarts_wrapper_is_found_through_it(native, tmp_path):
    fatbin = nvcc(tmp_path, "saxpy.cu", "fatbin")
    image = ctypes.create_string_buffer(fatbin)
    wrapper = ctypes.create_string_buffer(struct.pack("<IIQQ", 0x466243B1, 1, ctypes.addressof(image), 0))
    kind = ctypes.c_char_p()
    assert native.mneme_recorder_image_size(wrapper, ctypes.byref(kind)) == len(fatbin)
    assert kind.value == b"fatbin"


@needs_nvcc
def test_the_recorder_lists_the_device_variables_an_image_defines_for_the_device(native, tmp_path):
    native.mneme_recorder_image_globals.argtypes = [
        ctypes.c_char_p,
        ctypes.c_size_t,
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_size_t,
    ]

    def names(image: bytes, arch: int) -> set[str]:
        out = ctypes.create_string_buffer(4096)
        count = native.mneme_recorder_image_globals(image, len(image), arch, out, len(out))
        found = set(out.value.decode().split())
        assert count == len(found)
        return found

    assert names(nvcc(tmp_path, "device_global.cu", "fatbin"), 90) == {"bias", "launch_count"}
    assert names(nvcc(tmp_path, "device_global.cu", "cubin"), 90) == {"bias", "launch_count"}
    assert names(nvcc(tmp_path, "device_global.cu", "fatbin"), 80) == set()  # no cubin for that device
    assert names(nvcc(tmp_path, "saxpy.cu", "fatbin"), 90) == set()


COMPRESSIBLE = """
__device__ float bias = 1.0f;
__constant__ float coeffs[4];
namespace ns { __device__ double scaled[3]; }
template <int N> __global__ void kern(float* d) {
  float a = d[threadIdx.x] + bias + coeffs[1] + ns::scaled[0];
#pragma unroll
  for (int i = 0; i < N; ++i) a = a * 1.0001f + d[(threadIdx.x + i) % 1024];
  d[threadIdx.x] = a;
}
template __global__ void kern<300>(float*);
"""


@needs_nvcc
@pytest.mark.parametrize("mode", ["speed", "size"])  # LZ4 and zstd entries
def test_compressed_fatbins_yield_their_cubin_and_device_variables(native, tmp_path, mode):
    source = tmp_path / "big.cu"
    source.write_text(COMPRESSIBLE)
    out = tmp_path / f"{mode}.fatbin"
    subprocess.run(
        [
            NVCC,
            "-fatbin",
            "-arch=sm_90",
            f"-compress-mode={mode}",
            "-Xfatbin",
            "-compress-all",
            "-o",
            str(out),
            str(source),
        ],
        check=True,
        capture_output=True,
    )
    data = out.read_bytes()
    header = struct.unpack_from("<H", data, 6)[0]
    assert struct.unpack_from("<Q", data, header + 40)[0] & (0x2000 if mode == "speed" else 0x8000)  # compressed
    image, kind = recorder.kernel_image(data, "_Z4kernILi300EEvPf", "sm_90")
    assert kind == "cubin" and image[:4] == b"\x7fELF"
    names = ctypes.create_string_buffer(4096)
    native.mneme_recorder_image_globals.argtypes = [
        ctypes.c_char_p,
        ctypes.c_size_t,
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_size_t,
    ]
    native.mneme_recorder_image_globals(data, len(data), 90, names, len(names))
    assert set(names.value.decode().split()) == {"bias", "coeffs", "_ZN2ns6scaledE"}


def test_atomic_writes_leave_the_file_or_nothing(native, tmp_path):
    path = tmp_path / "manifest.json"
    data = b"x" * 4096
    assert native.mneme_recorder_write_atomic(str(path).encode(), data, len(data)) == 0
    assert path.read_bytes() == data
    # A full disk, simulated by a file size limit: the write fails with an errno, and neither the
    # final file nor a temporary one is left behind.
    script = (
        "import ctypes, resource, signal, sys\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (1024, 1024))\n"
        "lib = ctypes.CDLL(sys.argv[1])\n"
        "data = b'y' * 65536\n"
        "print(lib.mneme_recorder_write_atomic(sys.argv[2].encode(), data, len(data)))\n"
    )
    target = tmp_path / "big.bin"
    proc = subprocess.run(
        [sys.executable, "-c", script, str(native._name), str(target)], capture_output=True, text=True, check=True
    )
    assert int(proc.stdout) == 27  # EFBIG
    assert sorted(p.name for p in tmp_path.iterdir()) == ["manifest.json"]


@needs_nvcc
def test_the_kernels_cubin_is_taken_from_a_fatbin_for_the_device_architecture(tmp_path):
    fatbin = nvcc(tmp_path, "device_global.cu", "fatbin")
    image, kind = recorder.kernel_image(fatbin, "add_bias", "sm_90")
    assert kind == "cubin" and image[:4] == b"\x7fELF"
    assert recorder.kernel_image(fatbin, "no_such_kernel", "sm_90") is None
    ptx = nvcc(tmp_path, "device_global.cu", "ptx")
    assert recorder.kernel_image(ptx, "add_bias", "sm_90")[1] == "ptx"


@needs_nvcc
def test_a_kernel_without_ir_is_written_binary_only_with_its_globals(tmp_path):
    """What the recorder writes for global_app (add_bias with globals bias and launch_count)."""
    raw = tmp_path / "raw"
    (raw / "images").mkdir(parents=True)
    (raw / "images" / "image-77-0000.fatbin").write_bytes(nvcc(tmp_path, "device_global.cu", "fatbin"))
    (raw / "maps-77.txt").write_text("")
    n = 256
    x0 = np.ones(n, dtype=np.float32)
    x1 = x0 + 2.0
    args = struct.pack("<Qi", BASE, n) + b"\0" * 4
    bias, count0, count1 = struct.pack("<f", 2.0), struct.pack("<i", 0), struct.pack("<i", 1)
    manifest = launch_manifest(
        "add_bias",
        args,
        [[0, 8], [8, 4]],
        [[BASE, n * 4]],
        pid=77,
        sequence=0,
        occurrence=0,
        instance_key="00000000000000aa",
        grid=[2, 1, 1],
        block=[128, 1, 1],
        bytes=n * 4 + 8,
        image="images/image-77-0000.fatbin",
        image_kind="fatbin",
        globals=[["bias", 0x7F0000001000, 4], ["launch_count", 0x7F0000001004, 4]],
    )
    write_launch(raw, 77, 0, manifest, x0.tobytes() + bias + count0, x1.tobytes() + bias + count1)
    (raw / "launch-77-000001.tmp").mkdir()  # a launch cut short by a crash: ignored

    (db,) = recorder.finalize(raw, tmp_path / "db", ir_files=[], arch="sm_90")
    rec = RecordedExecution.from_json(db)
    assert rec.llvm_files == [] and [b.kind for b in rec.binary_blobs] == ["cubin"]
    assert rec.binary_blobs[0].path.read_bytes()[:4] == b"\x7fELF"
    assert rec.globals == {"bias": 4, "launch_count": 4}
    assert [(a.offset, a.size, a.kind) for a in rec.args] == [(0, 8, "unknown"), (8, 4, "unknown")]
    (inst,) = rec.kernel_instances.values()
    prologue = Snapshot.open(inst.prologue_path)
    epilogue = Snapshot.open(inst.epilogue_path, base=prologue)
    assert prologue.globals == {"bias": bias, "launch_count": count0}
    assert epilogue.globals == {"bias": bias, "launch_count": count1}
    assert epilogue.read_region(BASE) == x1.tobytes()


def _saxpy_raw(tmp_path: Path, before: bytes = b"\1" * 128, after: bytes = b"\1" * 64 + b"\2" * 64, **launch) -> Path:
    """A raw folder holding one recorded saxpy launch (16 elements, 4 blocks of 4), its dumps and `launch` fields."""
    raw = tmp_path / "raw"
    (raw / "images").mkdir(parents=True)
    (raw / "images" / "i.cubin").write_bytes(nvcc(tmp_path, "saxpy.cu", "cubin"))
    args = struct.pack("<ifQQ", 16, 2.0, BASE, BASE + 64)
    regions = [[BASE, 64], [BASE + 64, 64]]
    fields = {"grid": [4, 1, 1], "block": [4, 1, 1], **launch}  # `launch` may replace the geometry
    manifest = launch_manifest("saxpy", args, SAXPY_PARAMS, regions, **fields)
    write_launch(raw, 1, 0, manifest, before, after)
    return raw


@needs_nvcc
def test_a_dump_whose_size_disagrees_with_its_manifest_is_an_error_naming_the_file(tmp_path):
    raw = _saxpy_raw(tmp_path, before=b"\0" * 100, after=b"\0" * 128)
    with pytest.raises(MnemeError, match="prologue.bin"):
        recorder.finalize(raw, tmp_path / "db", arch="sm_90")


def test_the_elf_files_the_process_loaded_come_from_its_maps(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    exe = os.path.realpath(sys.executable)
    (raw / "maps-5.txt").write_text(
        f"00400000-00452000 r-xp 00000000 08:02 173521 {exe}\n"
        "7f0000000000-7f0000001000 rw-p 00000000 00:00 0 [heap]\n"
        "7f0000002000-7f0000003000 r--p 00000000 08:02 1 /no/such/library.so\n"
    )
    assert recorder.loaded_elf_files(raw) == [exe]


MNEME_CC = shutil.which("mneme-cc")


@pytest.fixture(scope="module")
def stencil_app_with_ir(tmp_path_factory):
    """stencil_app built as `mneme-cc nvcc -c` + `nvcc` link: its device IR is embedded in the executable."""
    if NVCC is None or MNEME_CC is None or shutil.which("clang++-19") is None:
        pytest.skip("needs nvcc, mneme-cc and clang++-19")
    folder = tmp_path_factory.mktemp("stencil")
    source = TESTS / "gpu" / "programs" / "stencil_app.cu"
    subprocess.run(
        [MNEME_CC, NVCC, "-c", "-arch=sm_90", "-o", str(folder / "app.o"), str(source)], check=True, capture_output=True
    )
    subprocess.run(
        [NVCC, "-arch=sm_90", "-o", str(folder / "stencil_app"), str(folder / "app.o")], check=True, capture_output=True
    )
    return folder / "stencil_app"


def _fatbin_of(binary: Path, kernel: str) -> bytes:
    """The fatbin in an executable's .nv_fatbin section that defines `kernel`: what cudart loads."""
    from mneme.core.elf import ElfFile

    elf = ElfFile.read(binary)
    data = elf.section_data(elf.sections_named(".nv_fatbin")[0])
    pos = 0
    while pos + 16 <= len(data):
        magic, _version, header, size = struct.unpack_from("<IHHQ", data, pos)
        if magic == recorder.FATBIN_MAGIC:
            if recorder.kernel_image(data[pos : pos + header + size], kernel, "sm_90") is not None:
                return data[pos : pos + header + size]
            pos += header + size
        pos = (pos + 7) & ~7 if magic == recorder.FATBIN_MAGIC else pos + 8
    raise AssertionError(f"{binary} has no fatbin defining {kernel}")


def _stencil_raw(raw: Path, app: Path, params: list) -> None:
    (raw / "images").mkdir(parents=True)
    (raw / "images" / "image-9-0000.fatbin").write_bytes(_fatbin_of(app, "stencil2d"))
    (raw / "maps-9.txt").write_text(f"00400000-00452000 r-xp 00000000 08:02 1 {app}\n")
    nx = ny = 8
    grid_in = np.arange(nx * ny, dtype=np.float32)
    grid_out = np.zeros(nx * ny, dtype=np.float32)
    out_base = BASE + (2 << 20)
    args = struct.pack("<QQii", BASE, out_base, nx, ny)
    regions = [[BASE, nx * ny * 4], [out_base, nx * ny * 4]]
    fields = {"grid": [1, 1, 1], "block": [8, 8, 1], "image": "images/image-9-0000.fatbin"}
    manifest = launch_manifest("stencil2d", args, params, regions, **fields)
    before = grid_in.tobytes() + grid_out.tobytes()
    write_launch(raw, 9, 0, manifest, before, grid_in.tobytes() + grid_in.tobytes())


def test_an_application_built_with_mneme_cc_is_recorded_with_its_embedded_ir(stencil_app_with_ir, tmp_path):
    raw = tmp_path / "raw"
    _stencil_raw(raw, stencil_app_with_ir, [[0, 8], [8, 8], [16, 4], [20, 4]])
    (db,) = recorder.finalize(raw, tmp_path / "db", arch="sm_90")
    rec = RecordedExecution.from_json(db)
    assert len(rec.llvm_files) == 1 and rec.llvm_files[0].suffix == ".bc"
    assert [b.kind for b in rec.binary_blobs] == ["cubin"]
    assert [a.kind for a in rec.args] == ["pointer", "pointer", "int", "int"]


def test_ir_whose_parameters_differ_from_the_recorded_layout_is_dropped_with_a_warning(
    stencil_app_with_ir, tmp_path, caplog
):
    raw = tmp_path / "raw"
    _stencil_raw(raw, stencil_app_with_ir, [[0, 8], [8, 8], [16, 8]])  # not what the IR says
    (db,) = recorder.finalize(raw, tmp_path / "db", arch="sm_90")
    rec = RecordedExecution.from_json(db)
    assert rec.llvm_files == [] and [b.kind for b in rec.binary_blobs] == ["cubin"]
    assert "differ from the recorded layout" in caplog.text


@needs_nvcc
@pytest.mark.parametrize("compression, whole", [("lz4", "lz4"), ("zstd", "zstd"), ("none", "raw")])
@pytest.mark.parametrize(
    ("epilogue_format", "expected"),
    [
        ("diff", ["diff", "diff"]),
        ("bytes", ["whole", "whole"]),
        ("best", ["diff", "whole"]),
    ],
)
def test_the_epilogue_format_and_compression_choose_how_regions_are_stored(
    tmp_path, epilogue_format, expected, compression, whole
):
    raw = tmp_path / "raw"
    (raw / "images").mkdir(parents=True)
    (raw / "images" / "i.cubin").write_bytes(nvcc(tmp_path, "saxpy.cu", "cubin"))
    n = 4096
    x = np.arange(n, dtype=np.float32)
    y0, y1 = np.ones(n, dtype=np.float32), 2 * np.arange(n, dtype=np.float32) + 3  # y: wholly rewritten
    args = struct.pack("<ifQQ", n, 2.0, BASE, BASE + (2 << 20))
    regions = [[BASE, n * 4], [BASE + (2 << 20), n * 4]]
    manifest = launch_manifest("saxpy", args, SAXPY_PARAMS, regions, grid=[16, 1, 1], block=[256, 1, 1])
    write_launch(raw, 1, 0, manifest, x.tobytes() + y0.tobytes(), x.tobytes() + y1.tobytes())
    (db,) = recorder.finalize(
        raw, tmp_path / "db", arch="sm_90", epilogue_format=epilogue_format, compression=compression
    )
    (inst,) = RecordedExecution.from_json(db).kernel_instances.values()
    prologue = Snapshot.open(inst.prologue_path)
    epilogue = Snapshot.open(inst.epilogue_path, base=prologue)
    assert [r.encoding for r in prologue.regions] == [whole, whole]
    assert prologue.version == (2 if compression == "lz4" else 1)  # only LZ4 needs the newer format
    assert [r.encoding for r in epilogue.regions] == [whole if e == "whole" else e for e in expected]
    assert prologue.read_region(BASE) == x.tobytes()
    assert epilogue.read_region(BASE + (2 << 20)) == y1.tobytes()


@needs_nvcc
def test_a_cooperative_launch_with_clusters_is_finalized_with_both_and_older_manifests_as_plain(tmp_path):
    """What the recorder writes for cuLaunchKernelEx with the cooperative and cluster attributes."""
    (db,) = recorder.finalize(
        _saxpy_raw(tmp_path / "a", cooperative=True, cluster=[2, 1, 1]), tmp_path / "a" / "db", arch="sm_90"
    )
    (inst,) = RecordedExecution.from_json(db).kernel_instances.values()
    assert inst.cooperative and inst.cluster_dim.as_tuple() == (2, 1, 1)
    (db,) = recorder.finalize(
        _saxpy_raw(tmp_path / "b", cooperative=False, cluster=[0, 0, 0]), tmp_path / "b" / "db", arch="sm_90"
    )
    (inst,) = RecordedExecution.from_json(db).kernel_instances.values()
    assert not inst.cooperative and inst.cluster_dim is None
    (db,) = recorder.finalize(_saxpy_raw(tmp_path / "c"), tmp_path / "c" / "db", arch="sm_90")  # before the fields
    assert not any(i.launch_attributes.names for i in RecordedExecution.from_json(db).kernel_instances.values())


@needs_nvcc
@pytest.mark.parametrize(
    "launch, field",
    [
        ({"cooperative": 1}, "cooperative"),
        ({"cluster": [2, 0, 1]}, "cluster"),
        ({"cluster": [2, 1]}, "cluster"),
        ({"cluster": [3, 1, 1]}, "cluster"),
        ({"cluster": [2, 1, 1], "grid": ["4", 1, 1]}, "grid"),
    ],
)
def test_a_malformed_launch_attribute_in_a_manifest_is_an_error_naming_the_file_and_field(tmp_path, launch, field):
    raw = _saxpy_raw(tmp_path, **launch)
    with pytest.raises(MnemeError, match="manifest.json") as err:
        recorder.finalize(raw, tmp_path / "db", arch="sm_90")
    assert f"field {field!r}" in str(err.value)
    assert not list((tmp_path / "db").glob("*.json"))  # no database written
