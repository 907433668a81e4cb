"""Digests of what code generation makes of the test corpus, to show a refactoring changed no output.

`python tests/codegen_digests.py` writes `tests/data/codegen_digests.json`: for each corpus kernel
and configuration, the SHA-256 of the PTX (sm_90), of the cubin's resource report, of the hsaco
(gfx90a) and of the host backend's object, each with the hash of the input IR, the variant hash and
the toolchain that made it. The file holds sets of them, one per machine that wrote one: another CPU
makes other host code, other ROCm or CUDA headers other input IR. Without arguments the file is
rewritten with this machine's set alone (after a deliberate change of code generation: the other
machines' sets no longer hold); `--add` adds this machine's set to the others, once the sets whose
toolchain and input IR this machine shares give the same digests here (a new CI machine, code
generation unchanged). `test_codegen_digests.py` rebuilds them and compares each with the sets whose
toolchain and input IR are this machine's.
"""

from __future__ import annotations

import hashlib
import json
import platform
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import attrs  # noqa: E402
from irbuild import build_cuda_ir, build_hip_ir, corpus  # noqa: E402

from mneme.core import ir  # noqa: E402
from mneme.core.types import ExperimentConfiguration  # noqa: E402

FIXTURE = HERE / "data" / "codegen_digests.json"
BASE = ExperimentConfiguration(grid=(8, 1, 1), block=(128, 1, 1))
CONFIGS = {
    "O3": BASE,
    "O1-cg2-maxreg32": BASE.replace(passes="default<O1>", codegen_opt=2, max_registers=32),
    "specialize-dims": BASE.replace(specialize_dims=True, set_launch_bounds=True, max_threads=128),
}


def compile_kernel(module, kernel: str, config: ExperimentConfiguration, arch: str, emit: str):
    """One uncached build through the one compile path (the backend that claims `arch`)."""
    from mneme.core import build

    return build.compile(module, kernel, config, arch, emit=emit, cache=False)


def compile_host(module, kernel: str, config: ExperimentConfiguration):
    """The host backend's build of CUDA IR (what replay and tune run on a machine without a GPU).

    Without the read-checked copy of the kernel (`boundscheck`, issue 24): the digest is of the code
    the timed runs execute, as when the fixture was written.
    """
    import os

    from mneme.core import build
    from mneme.core.backend import get_backend
    from mneme.plugins.backends.host import boundscheck

    backend = get_backend("host")
    saved = os.environ.get(boundscheck.ENV)
    os.environ[boundscheck.ENV] = "0"
    try:
        return build.compile(module, kernel, config, backend.arch(), backend=backend, cache=False)
    finally:
        if saved is None:
            del os.environ[boundscheck.ENV]
        else:
            os.environ[boundscheck.ENV] = saved


def toolchains() -> dict[str, dict[str, str]]:
    """What the outputs depend on besides the input IR: LLVM, the assemblers, the host CPU."""
    from mneme.core.backend import get_backend

    def tools(backend: str, arch: str) -> dict[str, str]:
        # the host digests are of code built without the checked copy (compile_host), whatever its version
        return {k: v for k, v in get_backend(backend).toolchain(arch).items() if k not in ("backend", "bounds-checks")}

    return {
        "cuda": tools("cuda", "sm_90"),
        "hip": tools("hip", "gfx90a"),
        "host": {**tools("host", platform.machine()), "machine": platform.machine()},
    }


def _sha(data: bytes | str) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


def entries():
    """(backend, source, kernel, config name, lazily built digest) for the whole corpus."""
    for item in corpus():
        for kernel in item.kernels:
            for name, config in CONFIGS.items():
                yield "cuda", item.source, kernel, name, lambda s=item.source, k=kernel, c=config: _cuda(s, k, c)
                yield "hip", item.source, kernel, name, lambda s=item.source, k=kernel, c=config: _hip(s, k, c)
                yield "host", item.source, kernel, name, lambda s=item.source, k=kernel, c=config: _host(s, k, c)


def _cuda(source: str, kernel: str, config: ExperimentConfiguration) -> dict:
    module = ir.link([build_cuda_ir(source)], kernel)
    ptx = compile_kernel(module, kernel, config, "sm_90", "ptx")
    cubin = compile_kernel(module, kernel, config, "sm_90", "cubin")
    return {
        "input": ir.module_hash(module),
        "variant": ptx.variant_hash,
        "ptx": _sha(ptx.data),
        "cubin_resources": attrs.asdict(cubin.resources),
    }


def _hip(source: str, kernel: str, config: ExperimentConfiguration) -> dict:
    module = ir.link([build_hip_ir(source)], kernel)
    hsaco = compile_kernel(module, kernel, config, "gfx90a", "hsaco")
    return {
        "input": ir.module_hash(module),
        "variant": hsaco.variant_hash,
        "hsaco": _sha(hsaco.data),
        "resources": attrs.asdict(hsaco.resources),
    }


def _host(source: str, kernel: str, config: ExperimentConfiguration) -> dict:
    module = ir.link([build_cuda_ir(source)], kernel)
    binary = compile_host(module, kernel, config)
    return {
        "input": ir.module_hash(module),
        "variant": binary.variant_hash,
        "object": _sha(binary.data),
        "resources": attrs.asdict(binary.resources),
    }


def build() -> dict:
    """This machine's set: its toolchains and the digest of every entry."""
    digests = {}
    for backend, source, kernel, name, make in entries():
        digests[f"{backend}/{source}/{kernel}/{name}"] = make()
    return {"toolchains": toolchains(), "digests": digests}


def recorded_sets() -> list[dict]:
    """The sets in the file."""
    return json.loads(FIXTURE.read_text())["sets"]


def matching(sets: list[dict], backend: str, key: str, tools: dict, got: dict) -> list[dict]:
    """The entries of `key` in the sets written with `tools` for `backend` from the same input IR as `got`."""
    return [
        s["digests"][key]
        for s in sets
        if s["toolchains"][backend] == tools and key in s["digests"] and s["digests"][key]["input"] == got["input"]
    ]


def add(sets: list[dict], mine: dict) -> list[dict]:
    """`sets` and `mine` (in place of a set with the very same toolchains), once every entry of `mine` that a set
    shares (toolchain and input IR) is the same there."""
    for key, got in mine["digests"].items():
        backend = key.split("/", 1)[0]
        if any(e != got for e in matching(sets, backend, key, mine["toolchains"][backend], got)):
            raise SystemExit(
                f"{key}: this machine makes other code than a recorded set with the same toolchain and input IR; "
                "code generation changed: rewrite the file (no --add) and the other machines' sets with it"
            )
    return [s for s in sets if s["toolchains"] != mine["toolchains"]] + [mine]


if __name__ == "__main__":
    mine = build()
    sets = add(recorded_sets(), mine) if sys.argv[1:] == ["--add"] else [mine]
    FIXTURE.write_text(json.dumps({"sets": sets}, indent=1, sort_keys=True) + "\n")
    print(f"wrote {FIXTURE}: {len(sets)} set(s)")
