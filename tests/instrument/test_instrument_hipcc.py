"""`mneme-cc hipcc` on a real hipcc (Debian's 5.2, `apt-get install hipcc`).

The real command runs unchanged: its object is byte for byte hipcc's own plus the `.mneme_ir`
section, which holds clang-19's device bitcode of the same translation unit for the same
`--offload-arch`. The kernel is then listed and extracted with `mneme ir` and its parameters
are checked against the kernel's signature and against the code object hipcc built.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
from skips import needs
from click.testing import CliRunner
from irbuild import KERNELS_DIR

from mneme.core import ir
from mneme.core.cli import cli
from mneme_hip.metadata import amdgpu_metadata
from mneme.core.elf import ElfFile
from mneme.instrument.section import SECTION_NAME, read_entries
from mneme.instrument.symbols import module_symbols

pytestmark = [
    pytest.mark.skipif(shutil.which("hipcc") is None, reason="needs hipcc: apt-get install hipcc"),
    needs("clang++-19", "llvm-objcopy-19"),
]

LAUNCHER = [sys.executable, "-m", "mneme.instrument.launcher"]
ARCH = "gfx90a"
BROKEN = "#include <hip/hip_runtime.h>\n__global__ void k(float* x {\n"


def compile_in(folder, *, launcher: bool, arch: bool = True, platform: str = "amd") -> subprocess.CompletedProcess:
    # HIP_PLATFORM is needed: Debian's hipcc targets NVIDIA (runs nvcc) when nvcc is on PATH and
    # no unversioned clang++ is
    env = {k: v for k, v in os.environ.items() if not k.startswith("MNEME_CC_")}
    env["HIP_PLATFORM"] = platform
    command = ["hipcc", *([f"--offload-arch={ARCH}"] if arch else []), "-c", "k.hip", "-o", "k.o"]
    return subprocess.run(
        [*LAUNCHER, *command] if launcher else command, cwd=folder, env=env, capture_output=True, text=True, check=False
    )


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    """The same commands in twin folders, once with plain hipcc and once through mneme-cc."""
    root = tmp_path_factory.mktemp("hipcc")
    for name in (
        "plain",
        "mneme",
        "plain-broken",
        "mneme-broken",
        "plain-noarch",
        "mneme-noarch",
        "plain-nvidia",
        "mneme-nvidia",
    ):
        (root / name).mkdir()
        if name.endswith("broken"):
            (root / name / "k.hip").write_text(BROKEN)
        else:
            shutil.copy(KERNELS_DIR / "vector_add.hip", root / name / "k.hip")
    with ThreadPoolExecutor(8) as pool:
        futures = {
            name: pool.submit(
                compile_in,
                root / name,
                launcher=name.startswith("mneme"),
                arch=not name.endswith("noarch"),
                platform="nvidia" if name.endswith("nvidia") else "amd",
            )
            for name in os.listdir(root)
        }
        done = {name: f.result() for name, f in futures.items()}
    plain = done["plain"]
    assert plain.returncode == 0, f"hipcc itself cannot compile a HIP kernel here:\n{plain.stdout}{plain.stderr}"
    return root, done


def code_objects(obj) -> dict[str, bytes]:
    """{arch: AMDGPU code object} of the clang offload bundle in an object's .hip_fatbin."""
    elf = ElfFile.read(obj)
    (section,) = elf.sections_named(".hip_fatbin")
    bundle = elf.section_data(section)
    assert bundle.startswith(b"__CLANG_OFFLOAD_BUNDLE__")
    (count,) = struct.unpack_from("<Q", bundle, 24)
    found, pos = {}, 32
    for _ in range(count):
        offset, size, triple_size = struct.unpack_from("<QQQ", bundle, pos)
        triple = bundle[pos + 24 : pos + 24 + triple_size].decode()
        pos += 24 + triple_size
        if "amdgcn" in triple:
            found[triple.rpartition("--")[2]] = bundle[offset : offset + size]
    return found


def code_object(obj, arch: str) -> bytes:
    return code_objects(obj)[arch]


def test_the_real_hipcc_command_runs_unchanged(builds, tmp_path):
    root, done = builds
    assert (done["mneme"].returncode, done["mneme"].stdout, done["mneme"].stderr) == (0, done["plain"].stdout, "")
    # removing the section gives back hipcc's object byte for byte
    subprocess.run(
        ["llvm-objcopy-19", "--remove-section", SECTION_NAME, str(root / "mneme" / "k.o"), str(tmp_path / "without.o")],
        check=True,
    )
    assert (tmp_path / "without.o").read_bytes() == (root / "plain" / "k.o").read_bytes()


def test_the_section_holds_clang19_bitcode_for_the_offload_arch(builds):
    root, _ = builds
    assert read_entries(root / "plain" / "k.o") == []
    (entry,) = read_entries(root / "mneme" / "k.o")
    assert os.path.realpath(entry.source) == os.path.realpath(root / "mneme" / "k.hip")
    assert (entry.arch, entry.targets, entry.language, entry.rdc) == (ARCH, (ARCH,), "hip", False)
    assert entry.kernels == ("vector_add",)
    assert "clang version 19" in entry.clang_version
    syms = module_symbols(entry.bitcode)
    assert (syms.triple, syms.target_cpu) == ("amdgcn-amd-amdhsa", ARCH)


def test_ir_list_and_extract_give_the_kernel_with_its_signature(builds, tmp_path):
    root, _ = builds
    obj = str(root / "mneme" / "k.o")
    listed = CliRunner().invoke(cli, ["ir", "list", "--json", obj])
    assert listed.exit_code == 0, listed.output
    (row,) = [json.loads(line) for line in listed.output.splitlines()]
    assert (row["kernel"], row["arch"], row["language"]) == ("vector_add", ARCH, "hip")
    out = tmp_path / "vector_add.bc"
    extracted = CliRunner().invoke(cli, ["ir", "extract", obj, "vector_add", "-o", str(out)])
    assert extracted.exit_code == 0, extracted.output
    params = ir.kernel_params(ir.load(out), "vector_add")
    # vector_add(const float* a, const float* b, float* c, int n): three global pointers and an int
    assert [(p.kind, p.type, p.size, p.offset) for p in params] == [
        ("pointer", "ptr addrspace(1)", 8, 0),
        ("pointer", "ptr addrspace(1)", 8, 8),
        ("pointer", "ptr addrspace(1)", 8, 16),
        ("int", "i32", 4, 24),
    ]
    # and they are the arguments of the kernel hipcc compiled
    (kernel,) = amdgpu_metadata(code_object(obj, ARCH))["amdhsa.kernels"]
    explicit = [a for a in kernel[".args"] if not a[".value_kind"].startswith("hidden")]
    assert [(a[".size"], a[".offset"]) for a in explicit] == [(p.size, p.offset) for p in params]


def test_the_ir_has_the_code_object_version_hipcc_built(builds):
    # the version sets the kernel's hidden arguments (Debian's hipcc 5.2 builds v4; clang-19 alone would build v5)
    root, _ = builds
    (entry,) = read_entries(root / "mneme" / "k.o")
    text = str(ir.load(entry.bitcode))
    version = int(re.search(r'!"amdhsa_code_object_version", i32 (\d+)', text).group(1))
    major, minor = amdgpu_metadata(code_object(root / "plain" / "k.o", ARCH))["amdhsa.version"]
    assert (major, version) == (1, (minor + 3) * 100)


def test_failing_hipcc_compile_keeps_its_exit_status_and_messages(builds):
    _, done = builds
    plain, through = done["plain-broken"], done["mneme-broken"]
    assert through.returncode == plain.returncode != 0
    assert (through.stdout, through.stderr) == (plain.stdout, plain.stderr)
    assert "mneme-cc" not in through.stderr


def test_without_offload_arch_the_ir_is_for_the_arch_hipcc_built(builds):
    # hipcc asks rocm_agent_enumerator, then leaves it to its clang's default (gfx803 for clang 15, not clang-19's)
    root, done = builds
    assert done["mneme-noarch"].returncode == done["plain-noarch"].returncode == 0
    # (where no GPU is present, rocm_agent_enumerator's complaint is in both)
    assert done["mneme-noarch"].stderr == done["plain-noarch"].stderr
    (built,) = code_objects(root / "plain-noarch" / "k.o")
    (entry,) = read_entries(root / "mneme-noarch" / "k.o")
    assert (entry.arch, entry.kernels) == (built, ("vector_add",))
    assert module_symbols(entry.bitcode).target_cpu == built


def test_hipcc_for_nvidia_runs_unchanged_with_one_warning(builds):
    # HIP_PLATFORM=nvidia: hipcc runs nvcc (which rejects --offload-arch); no HIP IR to capture
    _, done = builds
    plain, through = done["plain-nvidia"], done["mneme-nvidia"]
    assert (through.returncode, through.stdout) == (plain.returncode, plain.stdout)
    warning, _, rest = through.stderr.partition("\n")
    assert rest == plain.stderr
    assert warning.startswith("mneme-cc: warning: no IR for k.hip: hipcc compiles it with nvcc")
    assert "HIP_PLATFORM=amd" in warning
