"""Snapshot container: writing, reading, streaming, diffs, atomic writes, MemStateRef."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from mneme.core.errors import FormatError, MnemeError, UsageError
from mneme.core.snapshot import (
    MemStateRef,
    RegionPolicy,
    Snapshot,
    SnapshotType,
    SnapshotWriteError,
    SnapshotWriter,
    changed_regions,
    compare,
)

A, B, C = 0x7F00_0000_0000, 0x7F00_1000_0000, 0x7F00_2000_0000
CHUNK = 64 << 10  # small chunks so that small test regions span many of them


def field(n: int, seed: int = 0) -> np.ndarray:
    """A smooth float32 field with a little noise: data that compresses like real results."""
    x = np.linspace(0, 8 * np.pi, n, dtype=np.float32)
    noise = np.random.default_rng(seed).standard_normal(n).astype(np.float32) * np.float32(1e-4)
    return np.sin(x) + noise


@pytest.fixture
def folder(tmp_path):
    return tmp_path


def write_prologue(
    path, regions, *, encoding="raw", args=b"\x01" * 24, layout=((0, 8), (8, 8), (16, 8)), globals_=None
):
    with SnapshotWriter(path, SnapshotType.PROLOGUE, static_hash="s1", dynamic_hash="d1", chunk_size=CHUNK) as w:
        w.set_args(args, layout)
        for addr, data in regions.items():
            w.add_region(addr, data, encoding=encoding)
        for name, data in (globals_ or {}).items():
            w.add_global(name, data)
    return path


def test_round_trip_keeps_header_args_regions_and_globals(folder):
    x, idx = field(100_000), np.arange(5000, dtype=np.int64)
    path = write_prologue(folder / "p.mneme", {B: idx, A: x}, globals_={"gScale": b"\x00\x00\x80\x3f", "gN": b"\x05"})
    with Snapshot.open(path, verify=True) as snap:
        assert snap.kind is SnapshotType.PROLOGUE
        assert (snap.static_hash, snap.dynamic_hash, snap.version) == ("s1", "d1", 1)
        assert snap.args == b"\x01" * 24 and snap.arg_layout == [(0, 8), (8, 8), (16, 8)] and snap.num_args == 3
        assert [r.addr for r in snap.regions] == [A, B]  # address order, whatever the write order
        assert snap.read_region(A) == x.tobytes() and snap.read_region(B) == idx.tobytes()
        assert snap.globals == {"gScale": b"\x00\x00\x80\x3f", "gN": b"\x05"}
        assert snap.region(A).num_chunks == -(-x.nbytes // CHUNK)


def test_zstd_region_is_smaller_and_reads_back_exactly(folder):
    x = field(300_000)
    raw = write_prologue(folder / "raw.mneme", {A: x})
    packed = write_prologue(folder / "zstd.mneme", {A: x}, encoding="zstd")
    assert packed.stat().st_size < 0.8 * raw.stat().st_size
    with Snapshot.open(packed) as snap:
        info = snap.region(A)
        assert info.encoding == "zstd" and info.stored_size < x.nbytes
        assert snap.read_region(A) == x.tobytes()


def test_incompressible_zstd_chunks_are_kept_raw(folder):
    noise = np.random.default_rng(1).integers(0, 256, 200_000, dtype=np.uint8)
    path = write_prologue(folder / "n.mneme", {A: noise}, encoding="zstd")
    with Snapshot.open(path) as snap:
        assert snap.read_region(A) == noise.tobytes()
        assert snap.region(A).stored_size < noise.nbytes + 100 * snap.region(A).num_chunks


def test_streamed_region_from_odd_sized_pieces_equals_the_whole(folder):
    data = field(77_777).tobytes()
    pieces = [data[i : i + 1234] for i in range(0, len(data), 1234)]
    path = folder / "s.mneme"
    with SnapshotWriter(path, "prologue", chunk_size=CHUNK) as w:
        w.add_region_stream(A, len(data), iter(pieces), encoding="zstd")
    with Snapshot.open(path) as snap:
        assert snap.read_region(A) == data
        got = list(snap.iter_region(A, chunk_size=3 * CHUNK))
        assert all(len(p) <= 3 * CHUNK for p in got) and b"".join(got) == data
        assert snap.read_range(A, 100_001, 70_000) == data[100_001:170_001]


def test_stream_with_wrong_total_leaves_no_file(folder):
    path = folder / "short.mneme"
    with pytest.raises(UsageError, match="announced"), SnapshotWriter(path, "prologue") as w:
        w.add_region_stream(A, 100, [b"x" * 60])
    assert list(folder.iterdir()) == []


def test_epilogue_diff_reconstructs_exactly_and_is_small(folder):
    before = field(500_000)
    after = before.copy()
    after[1234] = np.nan
    after[400_000:400_010] += 1
    pro_path = write_prologue(folder / "DeviceState.prologue.s.d.mneme", {A: before, B: before[:1000]})
    epi_path = folder / "DeviceState.epilogue.s.d.mneme"
    with Snapshot.open(pro_path) as pro:
        with SnapshotWriter(epi_path, SnapshotType.EPILOGUE, chunk_size=CHUNK) as w:
            w.add_diff_region(A, pro, after, policy=RegionPolicy("f32", 1e-6, relative=True))
            w.add_diff_region(B, before[:1000], before[:1000])  # unchanged, against plain bytes
            w.add_region(C, np.ones(100, np.float64))  # allocated by the kernel
        assert epi_path.stat().st_size < 4096  # 2 MB of state, a few changed bytes
        with Snapshot.open(epi_path, base=pro) as epi:
            assert epi.read_region(A) == after.tobytes()
            assert epi.read_region(B) == before[:1000].tobytes()
            assert epi.region(A).policy == RegionPolicy("f32", 1e-6, relative=True)
            assert epi.base_id == pro.snapshot_id
            written = changed_regions(pro, epi)
    assert written[0][0] <= A + 1234 * 4 < written[0][0] + written[0][1]
    assert any(a <= A + 400_000 * 4 < a + n for a, n in written)
    assert (C, 800) in written and all(not (B <= a < B + 4000) for a, _ in written)
    assert sum(n for _, n in written) < 8192 + 800


def test_diff_of_a_mostly_rewritten_chunk_is_stored_whole(folder):
    before = np.zeros(CHUNK // 4 * 3, np.float32)
    after = field(before.size)
    pro_path = write_prologue(folder / "p.mneme", {A: before})
    with Snapshot.open(pro_path) as pro:
        with SnapshotWriter(folder / "e.mneme", "epilogue", chunk_size=CHUNK) as w:
            w.add_diff_region(A, pro, after)
        with Snapshot.open(folder / "e.mneme", base=pro) as epi:
            assert epi.read_region(A) == after.tobytes()
            assert changed_regions(pro, epi) == [(A, after.nbytes)]


def test_changed_regions_of_non_diff_epilogue_compares_contents(folder):
    before = np.arange(100_000, dtype=np.int32)
    after = before.copy()
    after[50_000] = -1
    pro = write_prologue(folder / "p.mneme", {A: before, B: before})
    with SnapshotWriter(folder / "e.mneme", "epilogue", chunk_size=CHUNK) as w:
        w.add_region(A, after, encoding="zstd")
        w.add_region(B, before)
    with Snapshot.open(pro) as p, Snapshot.open(folder / "e.mneme") as e:
        ((addr, size),) = changed_regions(p, e)
        assert addr <= A + 200_000 < addr + size and size <= 1024


def test_writer_error_inside_with_block_leaves_nothing(folder):
    path = folder / "p.mneme"
    with pytest.raises(RuntimeError), SnapshotWriter(path, "prologue") as w:
        w.add_region(A, b"x" * 1000)
        raise RuntimeError("recorder crashed")
    assert list(folder.iterdir()) == []


def test_writer_rejects_overlapping_regions_and_diffs_in_a_prologue(folder):
    with SnapshotWriter(folder / "p.mneme", "prologue") as w:
        w.add_region(A, b"x" * 100)
        with pytest.raises(UsageError, match="overlaps"):
            w.add_region(A + 50, b"y" * 100)
        with pytest.raises(UsageError, match="only an epilogue"):
            w.add_diff_region(B, b"a", b"b")
        with pytest.raises(UsageError, match="already added"):
            w.add_global("g", b"1")
            w.add_global("g", b"2")


def test_full_disk_removes_the_temp_file_and_says_so(folder, monkeypatch):
    real_write = os.write
    budget = {"left": 300_000}

    def filling_write(fd, data):  # the disk fills up after `budget` bytes
        if budget["left"] <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        n = real_write(fd, memoryview(data)[: budget["left"]])
        budget["left"] -= n
        return n

    monkeypatch.setattr(os, "write", filling_write)
    path = folder / "big.mneme"
    with pytest.raises(SnapshotWriteError, match="disk is full") as info:
        with SnapshotWriter(path, "prologue") as w:
            w.add_region(A, field(250_000))
    assert str(path) in str(info.value) and info.value.errno == errno.ENOSPC
    assert list(folder.iterdir()) == []


def test_file_size_limit_is_a_clear_error_and_leaves_nothing(folder):
    # A real OS write failure (EFBIG from RLIMIT_FSIZE) in a child process.
    script = textwrap.dedent(f"""
        import resource, signal, sys
        import numpy as np
        from mneme.core.snapshot import SnapshotWriter, SnapshotWriteError
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000))
        try:
            with SnapshotWriter({str(folder / "p.mneme")!r}, "prologue") as w:
                w.add_region(0x1000, np.zeros(1_000_000, np.uint8))
        except SnapshotWriteError as exc:
            print(exc)
            sys.exit(3)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 3, proc.stderr
    assert "p.mneme" in proc.stdout and "partial file was removed" in proc.stdout
    assert list(folder.iterdir()) == []


def test_existing_file_is_replaced_only_on_success(folder):
    path = write_prologue(folder / "p.mneme", {A: b"old!" * 10})
    with pytest.raises(RuntimeError), SnapshotWriter(path, "prologue") as w:
        w.add_region(A, b"new!" * 10)
        raise RuntimeError
    with Snapshot.open(path) as snap:
        assert snap.read_region(A) == b"old!" * 10
    write_prologue(path, {A: b"new!" * 10})
    with Snapshot.open(path) as snap:
        assert snap.read_region(A) == b"new!" * 10


def test_read_region_into_numpy_buffer(folder):
    x = field(10_000)
    path = write_prologue(folder / "p.mneme", {A: x}, encoding="zstd")
    out = np.empty_like(x)
    with Snapshot.open(path) as snap:
        snap.read_region_into(A, out)
        with pytest.raises(UsageError, match="buffer"):
            snap.read_region_into(A, np.empty(3, np.float32))
        with pytest.raises(UsageError, match="no region at address 0x1"):
            snap.read_region(0x1)
    assert np.array_equal(out, x)


def test_closed_snapshot_raises_instead_of_crashing(folder):
    path = write_prologue(folder / "p.mneme", {A: b"abcd" * 4})
    snap = Snapshot.open(path)
    snap.close()
    snap.close()  # closing twice is fine
    with pytest.raises(MnemeError, match="closed"):
        snap.read_region(A)


# -- MemStateRef: the seed API's handle ---------------------------------------------------------


def test_mem_state_ref_raises_for_a_missing_file(folder):
    with pytest.raises(FormatError, match="not found") as info:
        MemStateRef(folder / "nope.mneme", "saxpy", SnapshotType.PROLOGUE)
    assert "nope.mneme" in str(info.value)


def test_mem_state_ref_loads_on_enter_and_exposes_args(folder):
    path = write_prologue(folder / "DeviceState.prologue.s.d.mneme", {A: b"\x00" * 64})
    ref = MemStateRef(path, "saxpy", SnapshotType.PROLOGUE)
    with pytest.raises(MnemeError, match="not loaded"):
        _ = ref.args
    with ref as loaded:
        assert loaded is ref and ref.num_args == 3 and ref.args == b"\x01" * 24
        assert ref.arg_values == [b"\x01" * 8] * 3
    with pytest.raises(MnemeError, match="not loaded"):
        _ = ref.num_args
    assert ref.open() is ref
    ref.close()


def test_mem_state_ref_equality_compares_loaded_contents(folder):
    x = field(20_000)
    p1 = write_prologue(folder / "a.mneme", {A: x})
    p2 = write_prologue(folder / "b.mneme", {A: x}, encoding="zstd")
    y = x.copy()
    y[7] += 1
    p3 = write_prologue(folder / "c.mneme", {A: y})
    with (
        MemStateRef(p1, "k", "prologue") as a,
        MemStateRef(p2, "k", "prologue") as b,
        MemStateRef(p3, "k", "prologue") as c,
    ):
        assert a == b and not (a != b)  # noqa: SIM202 - both operators are under test
        assert a != c and not (a == c)  # noqa: SIM201


def test_mem_state_ref_finds_the_prologue_of_a_diff_epilogue_by_name(folder):
    before = field(30_000)
    after = before.copy()
    after[5] = 0
    pro = write_prologue(folder / "DeviceState.prologue.s.d.mneme", {A: before})
    epi = folder / "DeviceState.epilogue.s.d.mneme"
    with Snapshot.open(pro) as p, SnapshotWriter(epi, "epilogue") as w:
        w.add_diff_region(A, p, after)
    with MemStateRef(epi, "k", SnapshotType.EPILOGUE) as ref:
        assert ref.snapshot.read_region(A) == after.tobytes()


def test_mem_state_ref_refuses_the_wrong_kind(folder):
    path = write_prologue(folder / "p.mneme", {A: b"1234"})
    with pytest.raises(FormatError, match="holds a prologue but is used as the epilogue"):
        MemStateRef(path, "k", SnapshotType.EPILOGUE).open()


def test_mem_state_ref_reset_writes_recorded_bytes_to_a_device(folder):
    x = field(50_000)
    path = write_prologue(folder / "p.mneme", {A: x, B: b"\x07" * 100})

    class HostMemory:  # the one Device method reset uses, over a dict of bytearrays
        def __init__(self):
            self.mem = {A: bytearray(x.nbytes), B: bytearray(100)}

        def write(self, addr, data):
            base = max(a for a in self.mem if a <= addr)
            self.mem[base][addr - base : addr - base + len(data)] = data

    dev = HostMemory()
    with MemStateRef(path, "k", "prologue") as ref:
        ref.reset(dev, chunk_size=CHUNK)
        assert dev.mem[A] == x.tobytes() and dev.mem[B] == b"\x07" * 100
        dev.mem[A][8:16] = b"\xff" * 8
        ref.reset(dev, ranges=[(A + 8, 8)])
        assert dev.mem[A] == x.tobytes()
        with pytest.raises(MnemeError, match="not inside one recorded region"):
            ref.reset(dev, ranges=[(A - 8, 16)])
        with pytest.raises(MnemeError, match="needs a device"):
            ref.reset()
        dev.mem[B][:] = bytes(100)
        ref.bind(dev).reset()  # the seed API's form
        assert dev.mem[B] == b"\x07" * 100


def test_mem_state_ref_del_never_raises(folder):
    path = write_prologue(folder / "p.mneme", {A: b"1234"})
    ref = MemStateRef(path, "k", "prologue").open()
    ref._snapshot.close()  # already disposed underneath
    ref.__del__()
    del ref


def test_empty_region_and_empty_state_round_trip(folder):
    path = folder / "e.mneme"
    with SnapshotWriter(path, "prologue") as w:
        w.add_region(A, b"")
    with Snapshot.open(path, verify=True) as snap:
        assert snap.read_region(A) == b"" and list(snap.iter_region(A)) == [] and snap.args == b""
    with SnapshotWriter(folder / "none.mneme", "epilogue"):
        pass
    with Snapshot.open(folder / "none.mneme") as snap:
        assert snap.regions == [] and snap.kind is SnapshotType.EPILOGUE


def test_non_contiguous_data_is_a_usage_error_naming_the_region(folder):
    strided = np.arange(100, dtype=np.float32)[::2]
    with SnapshotWriter(folder / "p.mneme", "prologue") as w:
        with pytest.raises(UsageError, match="region 0x7f0000000000 must be a contiguous"):
            w.add_region(A, strided)


def test_conventional_file_name():
    from mneme.core.snapshot import file_name

    assert file_name("epilogue", "abc", "def") == "DeviceState.epilogue.abc.def.mneme"
    assert file_name(SnapshotType.PROLOGUE, "s", "d") == "DeviceState.prologue.s.d.mneme"


def test_a_folder_is_not_a_snapshot(folder):
    with pytest.raises(FormatError, match="cannot read the snapshot"):
        Snapshot.open(folder)


@pytest.mark.parametrize("staging_size", [10_000, 3 * CHUNK + 100])
@pytest.mark.parametrize("encoding", ["raw", "zstd"])
def test_streaming_writer_may_reuse_its_buffer_between_pieces(folder, staging_size, encoding):
    data = field(200_000)
    raw = memoryview(data).cast("B")
    staging = bytearray(staging_size)

    def pieces():  # like a recorder copying device memory through one staging buffer
        for offset in range(0, len(raw), len(staging)):
            n = min(len(staging), len(raw) - offset)
            staging[:n] = raw[offset : offset + n]
            yield memoryview(staging)[:n]

    path = folder / "s.mneme"
    with SnapshotWriter(path, "prologue", chunk_size=CHUNK) as w:
        w.add_region_stream(A, len(raw), pieces(), encoding=encoding)
    with Snapshot.open(path) as snap:
        assert snap.read_region(A) == data.tobytes()


def test_reading_in_a_forked_child_after_the_parent_used_the_pool(folder):
    import multiprocessing

    x = field(400_000)
    path = write_prologue(folder / "p.mneme", {A: x}, encoding="zstd")
    with Snapshot.open(path) as snap:
        assert snap.read_region(A) == x.tobytes()  # the parent's decode pool is now running
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(1) as pool:
        assert pool.apply_async(_read_digest, (str(path),)).get(timeout=60) == hash(x.tobytes())


def _read_digest(path: str) -> int:
    with Snapshot.open(path) as snap:
        return hash(bytes(snap.read_region(A)))


@pytest.mark.timeout(120)
def test_diff_against_a_prologue_with_smaller_chunks_reads_back(folder):
    before = field(400_000)
    after = before.copy()
    after[::5000] += 1
    pro = folder / "p.mneme"
    with SnapshotWriter(pro, "prologue", chunk_size=CHUNK // 4) as w:  # 4 prologue chunks per epilogue chunk
        w.add_region(A, before)
    with Snapshot.open(pro) as p:
        with SnapshotWriter(folder / "e.mneme", "epilogue", chunk_size=CHUNK) as w:
            w.add_diff_region(A, p, after)
        with Snapshot.open(folder / "e.mneme", base=p) as e:
            assert e.read_region(A) == after.tobytes()
            assert compare(e, {A: after}).ok


def test_streaming_write_read_and_compare_hold_a_few_chunks_not_the_region(folder):
    import tracemalloc

    size, piece = 84 * (768 << 10), 768 << 10  # 63 MiB; pieces do not line up with the 1 MiB chunks
    rng = np.random.default_rng(3)
    base = field(piece // 4)  # 1 MiB of float data, varied per piece below

    def pieces():
        for i in range(size // piece):
            yield (base + np.float32(i)).tobytes() if i % 2 else rng.integers(0, 256, piece, np.uint8).tobytes()

    path = folder / "big.mneme"
    tracemalloc.start()
    try:
        with SnapshotWriter(path, "epilogue", chunk_size=1 << 20) as w:
            w.add_region_stream(A, size, pieces(), encoding="zstd")
        _, write_peak = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        with Snapshot.open(path) as snap:
            total = sum(len(p) for p in snap.iter_region(A, chunk_size=2 << 20))
            _, read_peak = tracemalloc.get_traced_memory()
            tracemalloc.reset_peak()
            other = Snapshot.open(path)
            with other:
                assert compare(snap, other, window=2 << 20).ok
            _, compare_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert total == size
    # a few 1 MiB chunks in flight per worker (each: input, shuffled, compressed), never the region
    from mneme.core.snapshot import codec

    limit = (codec.workers() + 3) * (4 << 20)
    assert limit <= size // 2
    assert max(write_peak, read_peak, compare_peak) < limit, (write_peak, read_peak, compare_peak)


@pytest.mark.parametrize("element", [2, 4, 8])
@pytest.mark.parametrize("length", [0, 1, 7, 8, 1000, 4099])
def test_byte_shuffle_round_trips_and_groups_bytes_by_position(element, length):
    from mneme.core.snapshot import codec

    data = np.random.default_rng(length).integers(0, 256, length, dtype=np.uint8).tobytes()
    planes = codec.shuffle(data, element)
    whole = length // element * element
    assert planes[: whole // element] == data[0:whole:element]  # plane 0: byte 0 of every element
    assert planes[whole:] == data[whole:]
    out = bytearray(length)
    codec.unshuffle(planes, element, out)
    assert out == data
