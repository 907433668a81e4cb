"""The recorder's native snapshot writer (backends/cuda/recorder/snapshot_writer.cpp), without a GPU.

The writer is compiled with the system C++ compiler into a small library and driven through its
C interface from host buffers; what it writes is read back with mneme.core.snapshot (the format's
reference reader), byte for byte, and every checksum is verified (`mneme snapshot verify`).
"""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from paths import ROOT, TESTS
from raw_launches import launch_manifest, needs_nvcc, nvcc
from skips import needs_all

from mneme.core.snapshot import RegionPolicy, Snapshot, codec
from mneme.core.snapshot.format import ENC_DIFF, ENC_LZ4, ENC_LZ4_SHUFFLE, ENC_RAW, ENC_SHUFFLE, ENC_ZSTD

SOURCE = ROOT / "mneme" / "core" / "snapshot" / "native" / "snapshot_writer.cpp"
CXX = next((c for c in (os.environ.get("CXX", ""), "g++", "c++", "clang++") if c and shutil.which(c)), None)
HAVE_XXHASH = Path("/usr/include/xxhash.h").exists()

pytestmark = needs_all({"a C++ compiler": CXX is not None, "xxhash.h": HAVE_XXHASH})

BASE = 0x153940000000
F32, NORM_L2 = 10, 2
ZSTD, LZ4 = 1, 2  # mneme_snapshot_open's `compress`: the codec
needs_lz4 = pytest.mark.skipif(not codec.lz4_available(), reason="needs liblz4.so.1")


@pytest.fixture(scope="module")
def library(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("snapshot-writer") / "libsnapshot_writer.so"
    command = [
        CXX,
        "-std=c++17",
        "-O2",
        "-fPIC",
        "-shared",
        "-fvisibility=hidden",
        str(SOURCE),
        "-o",
        str(out),
        "-ldl",
        "-lpthread",
    ]
    proc = subprocess.run(command, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    return out


def load(path: Path):
    lib = ctypes.CDLL(str(path))
    lib.mneme_snapshot_open.restype = ctypes.c_void_p
    lib.mneme_snapshot_open.argtypes = [
        ctypes.c_char_p,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_uint64,
        ctypes.c_char_p,
        ctypes.c_char_p,
        ctypes.c_char_p,
        ctypes.c_void_p,
        ctypes.POINTER(ctypes.c_int),
    ]
    lib.mneme_snapshot_id.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    lib.mneme_snapshot_args.argtypes = [
        ctypes.c_void_p,
        ctypes.c_char_p,
        ctypes.c_uint64,
        ctypes.POINTER(ctypes.c_uint32),
        ctypes.c_uint64,
    ]
    lib.mneme_snapshot_region.argtypes = [
        ctypes.c_void_p,
        ctypes.c_uint64,
        ctypes.c_char_p,
        ctypes.c_uint64,
        ctypes.c_char_p,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_double,
        ctypes.c_int,
    ]
    lib.mneme_snapshot_global.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_uint64]
    lib.mneme_snapshot_finish.argtypes = [ctypes.c_void_p]
    return lib


class NativeWriter:
    """A thin Python face over the C interface; every call asserts success."""

    def __init__(
        self,
        lib,
        path: Path,
        kind: int,
        *,
        compress=True,
        level=1,
        chunk_size=0,
        base_id=None,
        static_hash="",
        dynamic_hash="",
    ):
        self.lib, err = lib, ctypes.c_int(0)
        self.handle = lib.mneme_snapshot_open(
            str(path).encode(),
            kind,
            level,
            int(compress),
            chunk_size,
            static_hash.encode(),
            dynamic_hash.encode(),
            b"mneme-cuda-recorder test",
            base_id,
            ctypes.byref(err),
        )
        assert self.handle, os.strerror(err.value)

    def snapshot_id(self) -> bytes:
        out = ctypes.create_string_buffer(16)
        self.lib.mneme_snapshot_id(self.handle, out)
        return out.raw

    def args(self, buffer: bytes, layout):
        table = (ctypes.c_uint32 * (2 * len(layout)))(*[v for pair in layout for v in pair])
        assert self.lib.mneme_snapshot_args(self.handle, buffer, len(buffer), table, len(layout)) == 0

    def region(
        self,
        addr,
        data: bytes,
        *,
        encoding=ENC_ZSTD,
        base: bytes | None = None,
        dtype=0,
        norm=0,
        relative=False,
        threshold=0.0,
        best=False,
    ) -> int:
        return self.lib.mneme_snapshot_region(
            self.handle, addr, data, len(data), base, encoding, dtype, norm, int(relative), threshold, int(best)
        )

    def global_(self, name: str, data: bytes):
        assert self.lib.mneme_snapshot_global(self.handle, name.encode(), data, len(data)) == 0

    def finish(self) -> int:
        return self.lib.mneme_snapshot_finish(self.handle)


def chunk_encodings(snap: Snapshot, addr: int) -> list[int]:
    return [c.encoding for c in snap._regions[addr].chunks]


def verify_cli(*args: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "mneme", "snapshot", "verify", *args], capture_output=True, text=True, check=False
    )
    if "No module named" in proc.stderr:  # the console script is the installed entry point
        proc = subprocess.run(["mneme", "snapshot", "verify", *args], capture_output=True, text=True, check=False)
    assert proc.returncode == 0 and ": ok (" in proc.stdout, proc.stdout + proc.stderr


def floats(n: int, seed: int = 0) -> bytes:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(n).astype(np.float32) * 3 + 100).tobytes()


def test_a_prologue_of_every_region_kind_reads_back_byte_for_byte(library, tmp_path):
    lib = load(library)
    path = tmp_path / "DeviceState.prologue.s.d.mneme"
    chunk = 64 << 10
    w = NativeWriter(lib, path, 0, chunk_size=chunk, static_hash="abc", dynamic_hash="0123")
    args = (7).to_bytes(4, "little") + bytes(4) + BASE.to_bytes(8, "little")
    w.args(args, [(0, 4), (8, 8)])
    plain = bytes(range(256)) * 100  # 25600 bytes: one short chunk
    noise = np.random.default_rng(1).integers(0, 256, 3 * chunk + 1000, dtype=np.uint8).tobytes()  # incompressible
    data = floats(5 * chunk // 4 + 3)  # several chunks, a partial last one, float data: byte planes pay
    regions = {
        BASE: (plain, ENC_RAW),
        BASE + (2 << 20): (noise, ENC_ZSTD),
        BASE + (4 << 20): (data, ENC_ZSTD),
        BASE + (8 << 20): (b"", ENC_ZSTD),
    }
    for addr, (content, encoding) in regions.items():
        typed = addr == BASE + (4 << 20)
        policy = {"dtype": F32, "norm": NORM_L2, "relative": True, "threshold": 1e-4} if typed else {}
        assert w.region(addr, content, encoding=encoding, **policy) == 0
    w.global_("counter", (42).to_bytes(8, "little"))
    w.global_("table", bytes(range(32)))
    assert w.finish() == 0
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # the temporary file is gone
    verify_cli(str(path))
    with Snapshot.open(path, verify=True) as snap:
        assert (snap.static_hash, snap.dynamic_hash, snap.producer) == ("abc", "0123", "mneme-cuda-recorder test")
        assert bytes(snap.args) == args and [tuple(p) for p in snap.arg_layout] == [(0, 4), (8, 8)]
        for addr, (content, _) in regions.items():
            assert bytes(snap.read_region(addr)) == content
        assert {r.addr: r.encoding for r in snap.regions} == {
            BASE: "raw",
            BASE + (2 << 20): "zstd",
            BASE + (4 << 20): "zstd",
            BASE + (8 << 20): "zstd",
        }
        assert chunk_encodings(snap, BASE) == [ENC_RAW]
        assert chunk_encodings(snap, BASE + (2 << 20)) == [ENC_RAW] * 4  # zstd would not make it smaller
        assert chunk_encodings(snap, BASE + (4 << 20)) == [ENC_SHUFFLE] * 5 + [ENC_RAW]  # 12 bytes: raw is smaller
        assert snap.region(BASE + (4 << 20)).chunk_size == chunk and snap.region(BASE + (4 << 20)).num_chunks == 6
        assert snap.region(BASE + (4 << 20)).policy == RegionPolicy(
            dtype="f32", threshold=1e-4, relative=True, norm="L2"
        )
        assert snap.region(BASE).policy == RegionPolicy()
        assert snap.region(BASE + (8 << 20)).size == 0
        assert {k: bytes(v) for k, v in snap.globals.items()} == {
            "counter": (42).to_bytes(8, "little"),
            "table": bytes(range(32)),
        }


def test_an_epilogue_stores_changed_runs_as_a_diff_against_its_prologue(library, tmp_path):
    lib = load(library)
    chunk = 64 << 10
    before = floats(chunk // 4 * 3, seed=2)
    after = bytearray(before)
    after[100:110] = b"\xff" * 10  # a few bytes of chunk 0 change
    after[chunk : 2 * chunk] = floats(chunk // 4, seed=3)  # chunk 1 is wholly rewritten; chunk 2 is untouched
    text = b"constant bytes " * 4000
    pro_path, epi_path = tmp_path / "DeviceState.prologue.s.d.mneme", tmp_path / "DeviceState.epilogue.s.d.mneme"
    pro = NativeWriter(lib, pro_path, 0, chunk_size=chunk)
    pro.args(b"", [])
    assert pro.region(BASE, before) == 0 and pro.region(BASE + (2 << 20), text) == 0
    assert pro.region(BASE + (4 << 20), before) == 0
    prologue_id = pro.snapshot_id()
    assert pro.finish() == 0
    epi = NativeWriter(lib, epi_path, 1, chunk_size=chunk, base_id=prologue_id)
    epi.args(b"", [])
    assert epi.region(BASE, bytes(after), encoding=ENC_DIFF, base=before) == 0
    assert epi.region(BASE + (2 << 20), text, encoding=ENC_DIFF, base=text, best=True) == 0  # unchanged
    rewritten = floats(len(before) // 4, seed=4)
    assert epi.region(BASE + (4 << 20), rewritten, encoding=ENC_DIFF, base=before, best=True) == 0
    assert epi.finish() == 0
    verify_cli(str(pro_path))
    verify_cli(str(epi_path), "--base", str(pro_path))
    with Snapshot.open(pro_path) as prologue, Snapshot.open(epi_path, base=prologue, verify=True) as snap:
        assert snap.base_id == prologue.snapshot_id
        assert bytes(snap.read_region(BASE)) == bytes(after)
        assert bytes(snap.read_region(BASE + (2 << 20))) == text
        assert bytes(snap.read_region(BASE + (4 << 20))) == rewritten
        assert chunk_encodings(snap, BASE) == [ENC_DIFF, ENC_SHUFFLE, ENC_DIFF]
        assert snap.changed_runs(BASE)[0] == (0, 1024)
        # best: a region rewritten in every chunk is labelled zstd, one with diffs stays a diff
        assert [r.encoding for r in snap.regions] == ["diff", "diff", "zstd"]
        assert snap.region(BASE).stored_size < len(before) // 2


@needs_lz4
def test_the_lz4_codec_writes_version_2_files_of_lz4_chunks_that_read_back(library, tmp_path):
    lib = load(library)
    chunk = 64 << 10
    data = floats(5 * chunk // 4 + 3)  # float data: LZ4 of the byte planes
    text = b"constant bytes " * 9000  # plain LZ4 pays
    noise = np.random.default_rng(1).integers(0, 256, chunk + 10, dtype=np.uint8).tobytes()  # stays raw
    path, zpath = tmp_path / "lz4.mneme", tmp_path / "zstd.mneme"
    for target, compress in ((path, LZ4), (zpath, ZSTD)):
        w = NativeWriter(lib, target, 0, compress=compress, chunk_size=chunk)
        w.args(b"", [])
        assert w.region(BASE, data, dtype=F32) == 0 and w.region(BASE + (2 << 20), text) == 0
        assert w.region(BASE + (4 << 20), noise) == 0 and w.region(BASE + (6 << 20), text, encoding=ENC_RAW) == 0
        assert w.finish() == 0
    verify_cli(str(path))
    with Snapshot.open(path, verify=True) as snap, Snapshot.open(zpath) as zsnap:
        assert snap.version == 2 and zsnap.version == 1  # only a file with LZ4 needs the newer format
        assert [r.encoding for r in snap.regions] == ["lz4", "lz4", "lz4", "raw"]
        assert chunk_encodings(snap, BASE) == [ENC_LZ4_SHUFFLE] * 5 + [ENC_RAW]
        assert set(chunk_encodings(snap, BASE + (2 << 20))) == {ENC_LZ4}
        assert chunk_encodings(snap, BASE + (4 << 20)) == [ENC_RAW, ENC_RAW]
        for addr, content in (
            (BASE, data),
            (BASE + (2 << 20), text),
            (BASE + (4 << 20), noise),
            (BASE + (6 << 20), text),
        ):
            assert bytes(snap.read_region(addr)) == content
        # LZ4 stores a few percent more than zstd, not multiples
        assert snap.region(BASE).stored_size < 1.25 * zsnap.region(BASE).stored_size < len(data)


@needs_lz4
def test_an_lz4_epilogue_keeps_diffs_and_stores_rewritten_chunks_as_lz4(library, tmp_path):
    lib = load(library)
    chunk = 64 << 10
    before = floats(chunk // 4 * 3, seed=2)
    after = bytearray(before)
    after[100:110] = b"\xff" * 10
    after[chunk : 2 * chunk] = floats(chunk // 4, seed=3)
    rewritten = floats(len(before) // 4, seed=4)
    pro_path, epi_path = tmp_path / "DeviceState.prologue.s.d.mneme", tmp_path / "DeviceState.epilogue.s.d.mneme"
    pro = NativeWriter(lib, pro_path, 0, compress=LZ4, chunk_size=chunk)
    pro.args(b"", [])
    assert pro.region(BASE, before, dtype=F32) == 0 and pro.region(BASE + (4 << 20), before, dtype=F32) == 0
    prologue_id = pro.snapshot_id()
    assert pro.finish() == 0
    epi = NativeWriter(lib, epi_path, 1, compress=LZ4, chunk_size=chunk, base_id=prologue_id)
    epi.args(b"", [])
    assert epi.region(BASE, bytes(after), encoding=ENC_DIFF, base=before, dtype=F32) == 0
    assert epi.region(BASE + (4 << 20), rewritten, encoding=ENC_DIFF, base=before, best=True, dtype=F32) == 0
    assert epi.finish() == 0
    verify_cli(str(epi_path), "--base", str(pro_path))
    with Snapshot.open(pro_path) as prologue, Snapshot.open(epi_path, base=prologue, verify=True) as snap:
        assert snap.version == 2 and snap.base_id == prologue.snapshot_id  # the rewritten header kept the base
        assert chunk_encodings(snap, BASE) == [ENC_DIFF, ENC_LZ4_SHUFFLE, ENC_DIFF]
        assert [r.encoding for r in snap.regions] == ["diff", "lz4"]  # best: wholly rewritten is relabelled
        assert bytes(snap.read_region(BASE)) == bytes(after)
        assert bytes(snap.read_region(BASE + (4 << 20))) == rewritten


@needs_lz4
def test_by_default_lz4_regions_get_small_chunks_and_the_others_4_mib(library, tmp_path):
    lib = load(library)
    size = (5 << 20) + 4096  # 5 MiB and a bit: a short last chunk either way
    data = floats(size // 4, seed=5)
    pro_path, epi_path = tmp_path / "DeviceState.prologue.s.d.mneme", tmp_path / "DeviceState.epilogue.s.d.mneme"
    pro = NativeWriter(lib, pro_path, 0, compress=LZ4)  # chunk_size 0: the defaults
    pro.args(b"", [])
    assert pro.region(BASE, data, dtype=F32) == 0
    assert pro.region(BASE + (8 << 20), data, encoding=ENC_RAW) == 0
    prologue_id = pro.snapshot_id()
    assert pro.finish() == 0
    changed = bytearray(data)
    changed[-4096:] = bytes(4096)
    epi = NativeWriter(lib, epi_path, 1, compress=LZ4, base_id=prologue_id)
    epi.args(b"", [])
    assert epi.region(BASE, bytes(changed), encoding=ENC_DIFF, base=data, dtype=F32) == 0
    assert epi.finish() == 0
    with Snapshot.open(pro_path, verify=True) as prologue, Snapshot.open(epi_path, base=prologue, verify=True) as epi:
        lz, raw = prologue.region(BASE), prologue.region(BASE + (8 << 20))
        assert (lz.encoding, lz.chunk_size, lz.num_chunks) == ("lz4", 256 << 10, 21)
        assert set(chunk_encodings(prologue, BASE)) == {ENC_LZ4_SHUFFLE}
        assert (raw.encoding, raw.chunk_size, raw.num_chunks) == ("raw", 4 << 20, 2)
        assert epi.region(BASE).chunk_size == 4 << 20  # diffs keep 4 MiB: fewer runs tables, same restore path
        assert bytes(prologue.read_region(BASE)) == data and bytes(prologue.read_region(BASE + (8 << 20))) == data
        assert bytes(epi.read_region(BASE)) == bytes(changed)


def test_by_default_zstd_regions_keep_4_mib_chunks(library, tmp_path):
    lib = load(library)
    path = tmp_path / "p.mneme"
    w = NativeWriter(lib, path, 0, compress=ZSTD)
    w.args(b"", [])
    data = floats((4 << 20) // 4 + 2, seed=6)
    assert w.region(BASE, data, dtype=F32) == 0
    assert w.finish() == 0
    with Snapshot.open(path, verify=True) as snap:
        assert (snap.region(BASE).chunk_size, snap.region(BASE).num_chunks) == (4 << 20, 2)
        assert bytes(snap.read_region(BASE)) == data


def test_the_lz4_codec_without_liblz4_falls_back_to_zstd(library, tmp_path, monkeypatch):
    copy = tmp_path / "libsnapshot_writer_nolz4.so"  # a fresh copy: its loader state starts anew
    shutil.copy(library, copy)
    monkeypatch.setenv("MNEME_SNAPSHOT_NO_LZ4", "1")
    lib = load(copy)
    path = tmp_path / "p.mneme"
    w = NativeWriter(lib, path, 0, compress=LZ4, chunk_size=4096)
    w.args(b"", [])
    data = floats(3000)
    assert w.region(BASE, data, dtype=F32) == 0
    assert w.finish() == 0
    with Snapshot.open(path, verify=True) as snap:
        assert snap.version == 1 and [r.encoding for r in snap.regions] == ["zstd"]
        assert set(chunk_encodings(snap, BASE)) <= {ENC_SHUFFLE, ENC_RAW} and bytes(snap.read_region(BASE)) == data


def test_without_compression_every_chunk_is_raw_and_still_reads_back(library, tmp_path):
    lib = load(library)
    path = tmp_path / "p.mneme"
    w = NativeWriter(lib, path, 0, compress=False, chunk_size=4096)
    w.args(b"\x01\x02", [(0, 2)])
    data = bytes(10000)
    assert w.region(BASE, data) == 0
    assert w.finish() == 0
    with Snapshot.open(path, verify=True) as snap:
        assert chunk_encodings(snap, BASE) == [ENC_RAW] * 3 and bytes(snap.read_region(BASE)) == data


def test_a_diff_region_in_a_prologue_is_refused_and_leaves_no_file(library, tmp_path):
    lib = load(library)
    w = NativeWriter(lib, tmp_path / "p.mneme", 0)
    w.args(b"", [])
    assert w.region(BASE, b"abcd", encoding=ENC_DIFF, base=b"abcd") == errno.EINVAL
    assert w.finish() == errno.EINVAL
    assert list(tmp_path.iterdir()) == []


_FULL_DISK = r"""
import ctypes, resource, signal, sys
sys.path[:0] = [{here!r}, {tests!r}]  # the test module's folder, and tests/ for its helpers
from test_snapshot_writer_native import NativeWriter, load
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit then fails with EFBIG
resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
lib = load({library!r})
w = NativeWriter(lib, {path!r}, 0, compress=False)
w.args(b"", [])
code = w.region(0x1000, bytes(8 << 20))
print(code, w.finish())
"""


def test_a_write_past_the_file_size_limit_removes_the_file_and_reports_the_errno(library, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    script = _FULL_DISK.format(
        here=str(Path(__file__).resolve().parent),
        tests=str(TESTS),
        library=str(library),
        path=str(out / "DeviceState.prologue.s.d.mneme"),
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [str(errno.EFBIG), str(errno.EFBIG)]
    assert list(out.iterdir()) == []  # neither the snapshot nor its temporary file


# -- finalize: launch folders whose snapshots the recorder wrote itself (manifest version 2) -----


def _native_launch(lib, raw: Path, image: bytes, policy_in_file: int, policy_in_manifest: str) -> tuple[bytes, bytes]:
    """A launch folder laid out as the recorder writes it: saxpy's y = 2x + y over 4096 floats."""
    import json
    import struct

    n = 4096
    x, y0 = np.arange(n, dtype=np.float32), np.ones(n, dtype=np.float32)
    y1 = 2 * x + y0
    x_addr, y_addr = BASE, BASE + (2 << 20)
    args = struct.pack("<ifQQ", n, 2.0, x_addr, y_addr)
    layout = [(0, 4), (4, 4), (8, 8), (16, 8)]
    (raw / "images").mkdir(parents=True, exist_ok=True)
    (raw / "images" / "i.cubin").write_bytes(image)
    folder = raw / "launch-5-000000"
    folder.mkdir()
    pro = NativeWriter(lib, folder / "prologue.mneme", 0)
    pro.args(args, layout)
    assert pro.region(x_addr, x.tobytes()) == 0
    assert (
        pro.region(
            y_addr,
            y0.tobytes(),
            dtype=policy_in_file,
            threshold=1e-5 if policy_in_file else 0.0,
            relative=bool(policy_in_file),
        )
        == 0
    )
    base_id = pro.snapshot_id()
    assert pro.finish() == 0
    epi = NativeWriter(lib, folder / "epilogue.mneme", 1, base_id=base_id)
    epi.args(args, layout)
    assert epi.region(x_addr, x.tobytes(), encoding=ENC_DIFF, base=x.tobytes()) == 0
    assert (
        epi.region(
            y_addr,
            y1.tobytes(),
            encoding=ENC_DIFF,
            base=y0.tobytes(),
            dtype=policy_in_file,
            threshold=1e-5 if policy_in_file else 0.0,
            relative=bool(policy_in_file),
        )
        == 0
    )
    assert epi.finish() == 0
    manifest = launch_manifest(
        "saxpy",
        args,
        [list(p) for p in layout],
        [[x_addr, n * 4], [y_addr, n * 4]],
        version=2,
        pid=5,
        sequence=0,
        grid=[16, 1, 1],
        block=[256, 1, 1],
        image_kind="cubin",
        policies=[
            {
                "addr": y_addr,
                "dtype": policy_in_manifest,
                "threshold": 1e-5,
                "relative": True,
                "norm": "none",
                "tag": "y",
            }
        ],
        prologue="prologue.mneme",
        epilogue="epilogue.mneme",
        capture="device shadow",
        epilogue_format="diff",
        write_seconds=0.01,
        stored_bytes=1,
    )
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return y0.tobytes(), y1.tobytes()


@needs_nvcc
def test_finalize_moves_the_recorders_own_snapshots_under_their_database_names(library, tmp_path):
    recorder = pytest.importorskip("mneme_cuda.recorder")
    from mneme.core.records import RecordedExecution

    raw = tmp_path / "raw"
    y0, y1 = _native_launch(load(library), raw, nvcc(tmp_path, "saxpy.cu", "cubin"), F32, "f32")
    (db,) = recorder.finalize(raw, tmp_path / "db", arch="sm_90")
    (inst,) = RecordedExecution.from_json(db).kernel_instances.values()
    assert inst.prologue_path.parent == tmp_path / "db" and inst.prologue_path.name.startswith("DeviceState.prologue.")
    assert not (raw / "launch-5-000000" / "prologue.mneme").exists()  # moved, not copied
    with (
        Snapshot.open(inst.prologue_path) as prologue,
        Snapshot.open(inst.epilogue_path, base=prologue, verify=True) as epilogue,
    ):
        assert bytes(prologue.read_region(BASE + (2 << 20))) == y0
        assert bytes(epilogue.read_region(BASE + (2 << 20))) == y1
        assert epilogue.region(BASE + (2 << 20)).policy == RegionPolicy(dtype="f32", threshold=1e-5, relative=True)


@needs_nvcc
def test_finalize_refuses_snapshots_whose_policies_differ_from_the_manifest(library, tmp_path):
    recorder = pytest.importorskip("mneme_cuda.recorder")
    from mneme.core.errors import FormatError

    raw = tmp_path / "raw"
    _native_launch(
        load(library), raw, nvcc(tmp_path, "saxpy.cu", "cubin"), 0, "f32"
    )  # the file says exact, the manifest f32
    with pytest.raises(FormatError, match="policy") as info:
        recorder.finalize(raw, tmp_path / "db", arch="sm_90")
    assert "prologue.mneme" in str(info.value)
    assert (raw / "launch-5-000000" / "prologue.mneme").exists()  # nothing was moved
