"""The `.mneme_ir` entry format and the ELF reader, on real clang bitcode and real objects."""

from __future__ import annotations

import shutil
import struct
import subprocess

import pytest
from skips import needs

from mneme.core.demangle import demangle
from mneme.core.errors import CorruptFileError, FormatError, SchemaVersionError
from mneme.core.elf import ET_REL, ElfFile
from mneme.instrument.launcher import write_standins
from mneme.instrument.section import SECTION_NAME, EmbeddedEntry, iter_entries, pack_entries, read_entries
from mneme.instrument.symbols import module_symbols, short_names

pytestmark = needs("clang++-19")

KERNELS = r"""
__device__ float twice(float x) { return 2.0f * x; }
extern __device__ float external_helper(float);
__global__ void scale(float* x, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = a * twice(x[i]);
}
namespace ns {
template <typename T> __global__ void fill(T* x, T v) { x[threadIdx.x] = external_helper(v); }
template __global__ void fill<float>(float*, float);
}
"""


@pytest.fixture(scope="module")
def bitcode(tmp_path_factory) -> bytes:
    folder = tmp_path_factory.mktemp("bc")
    (folder / "k.cu").write_text(KERNELS)
    standins = write_standins(str(folder))
    subprocess.run(
        [
            "clang++-19",
            "-x",
            "cuda",
            "--cuda-device-only",
            "--cuda-gpu-arch=sm_80",
            "-fgpu-rdc",
            "-emit-llvm",
            "-O2",
            "-c",
            "k.cu",
            "-o",
            "k.bc",
            "--cuda-path=/usr/local/cuda",
            "-Wno-unknown-cuda-version",
            "-isystem",
            "/usr/local/cuda/include/cccl",
            "-idirafter",
            standins,
        ],
        cwd=folder,
        check=True,
        capture_output=True,
    )
    return (folder / "k.bc").read_bytes()


def entry(bitcode: bytes, **kw) -> EmbeddedEntry:
    fields = dict(source="/src/k.cu", arch="sm_80", bitcode=bitcode, targets=("sm_80",), kernels=("_Z5scalePffi",))
    fields.update(kw)
    return EmbeddedEntry(**fields)


def test_module_symbols_lists_kernels_definitions_and_external_needs(bitcode):
    syms = module_symbols(bitcode)
    assert set(syms.kernels) == {"_Z5scalePffi", "_ZN2ns4fillIfEEvPT_S1_"}
    assert "_Z5scalePffi" in syms.defined
    assert "_Z15external_helperf" in syms.undefined
    assert syms.target_cpu == "sm_80"
    assert "clang version 19" in syms.producer


def test_demangle_and_short_names_give_the_names_users_type():
    assert demangle("_ZN2ns4fillIfEEvPT_S1_") == "void ns::fill<float>(float*, float)"
    assert demangle("plain_c_kernel") == "plain_c_kernel"
    assert short_names("void ns::fill<float>(float*, float)") == ["ns::fill<float>", "ns::fill"]


def test_entries_round_trip_through_pack_and_walk(bitcode):
    a = entry(bitcode)
    b = entry(bitcode[:100] + bitcode[100:], arch="sm_90", source="/src/other.cu", rdc=True)
    got = list(iter_entries(pack_entries([a, b])))
    assert [(e.source, e.arch, e.rdc, e.bitcode) for e in got] == [
        ("/src/k.cu", "sm_80", False, bitcode),
        ("/src/other.cu", "sm_90", True, bitcode),
    ]
    assert got[0].kernels == ("_Z5scalePffi",)


def test_walk_skips_linker_padding_between_concatenated_sections(bitcode):
    one = entry(bitcode).pack()
    data = one + b"\0" * 13 + one + b"\0" * 3  # what `ld` makes of two objects' sections
    assert len(list(iter_entries(data))) == 2


def test_truncated_section_is_an_error_naming_file_and_offset(bitcode):
    data = entry(bitcode).pack()
    with pytest.raises(CorruptFileError, match=r"app: .*entry at file offset 0.*truncated"):
        list(iter_entries(data[:-200], "app"))


def test_flipped_bitcode_byte_fails_the_checksum(bitcode):
    data = bytearray(entry(bitcode).pack())
    data[-64] ^= 0xFF
    with pytest.raises(CorruptFileError, match="checksum"):
        list(iter_entries(bytes(data), "app"))


def test_entry_from_a_newer_format_is_refused_with_upgrade_advice(bitcode):
    data = bytearray(entry(bitcode).pack())
    struct.pack_into("<H", data, 8, 99)
    with pytest.raises(SchemaVersionError, match="upgrade Mneme"):
        list(iter_entries(bytes(data), "app"))


def test_garbage_in_the_section_is_reported_not_skipped(bitcode):
    with pytest.raises(CorruptFileError, match="bad magic"):
        list(iter_entries(entry(bitcode).pack() + b"garbage!" * 8, "app"))


def test_section_added_with_objcopy_is_read_back_from_the_object(tmp_path, bitcode):
    (tmp_path / "host.cpp").write_text("int f(int x) { return x + 1; }\n")
    subprocess.run(["g++", "-c", "host.cpp", "-o", "host.o"], cwd=tmp_path, check=True)
    (tmp_path / "blob").write_bytes(pack_entries([entry(bitcode)]))
    subprocess.run(["llvm-objcopy-19", "--add-section", f"{SECTION_NAME}=blob", "host.o"], cwd=tmp_path, check=True)
    elf = ElfFile.read(tmp_path / "host.o")
    assert elf.elf_type == ET_REL
    (section,) = elf.sections_named(SECTION_NAME)
    assert section.flags == 0  # not SHF_ALLOC: never mapped at run time
    (got,) = read_entries(tmp_path / "host.o")
    assert got.bitcode == bitcode and got.binary.endswith("host.o")


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_elf_reader_reads_a_cuda_cubin(tmp_path):
    (tmp_path / "k.cu").write_text("__global__ void k(int* x) { *x = 1; }\n")
    subprocess.run(["nvcc", "-cubin", "-arch=sm_90", "k.cu", "-o", "k.cubin"], cwd=tmp_path, check=True)
    elf = ElfFile.read(tmp_path / "k.cubin")
    from mneme_cuda.backend import CudaBackend

    assert elf.machine in CudaBackend.elf_machines
    assert elf.sections_named(".nv.info._Z1kPi")
    assert read_entries(tmp_path / "k.cubin") == []


def test_a_file_that_is_not_elf_is_a_format_error_naming_it(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(FormatError, match=r"notes.txt: not an ELF file"):
        read_entries(tmp_path / "notes.txt")
