"""Corpus IR for the GPU tests: prebuilt into `.gpu/ir/` (the GPU machine has no clang), else built here."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PREBUILT = Path(os.environ.get("MNEME_GPU_IR", ROOT / ".gpu" / "ir"))


# sources outside the kernel corpus that GPU tests compile too
EXTRA = (
    ROOT / "tests" / "data" / "realkernels" / "resources.cu",
    ROOT / "tests" / "data" / "realkernels" / "ptx_blocks.cu",
    ROOT / "tests" / "data" / "capture" / "real_inputs.cu",
    ROOT / "tests" / "data" / "realkernels" / "grid_sync.cu",
)


def cuda_ir(source: str | Path) -> Path:
    """NVPTX IR (sm_90) of a corpus source such as "saxpy", or of one of the `EXTRA` files."""
    path = PREBUILT / f"{Path(source).stem}.ll"
    if path.exists():
        return path
    import irbuild  # tests/ is on sys.path through tests/conftest.py

    return irbuild.build_cuda_ir(source)


def prebuild(out: Path = PREBUILT) -> list[Path]:
    """Build every CUDA corpus source's IR, and the `EXTRA` files', into `out` (run where clang-19 is installed)."""
    import irbuild

    return [irbuild.build_cuda_ir(source, out_dir=out) for source in [k.source for k in irbuild.corpus()] + list(EXTRA)]
