"""Compile two Triton kernels on the GPU machine and collect the LLVM IR Triton emitted (`.llir`).

The IR toolkit's tests need real Triton IR (issue 3); the GPU machine has Triton, this one does
not. Run there by `scripts/gpu-suite`; it copies each kernel's cache entry (`.llir`, `.json`,
`.cubin`, `.ptx`) under OUT/triton/<kernel>/ and checks that the kernels compute the right thing.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out", type=Path)
    args = parser.parse_args()
    cache = Path(tempfile.mkdtemp(prefix="triton-cache-"))
    os.environ["TRITON_CACHE_DIR"] = str(cache)

    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        tl.store(
            out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask), mask=mask
        )

    @triton.jit
    def softmax_kernel(out_ptr, in_ptr, stride, n_cols, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        x = tl.load(in_ptr + row * stride + cols, mask=cols < n_cols, other=-float("inf"))
        x = x - tl.max(x, axis=0)
        e = tl.exp(x)
        tl.store(out_ptr + row * stride + cols, e / tl.sum(e, axis=0), mask=cols < n_cols)

    n = 1 << 20
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    out = torch.empty_like(x)
    add_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
    rows, cols = 512, 781
    a = torch.randn(rows, cols, device="cuda")
    sm = torch.empty_like(a)
    softmax_kernel[(rows,)](sm, a, a.stride(0), cols, BLOCK=1024)
    torch.cuda.synchronize()
    ok_add = torch.allclose(out, x + y)
    ok_softmax = torch.allclose(sm, torch.softmax(a, dim=1), atol=1e-6)
    print(f"triton {triton.__version__}: add_kernel correct={ok_add}, softmax_kernel correct={ok_softmax}")

    found = 0
    for llir in sorted(cache.rglob("*.llir")):
        dest = args.out / "triton" / llir.stem
        dest.mkdir(parents=True, exist_ok=True)
        for sibling in llir.parent.iterdir():
            if sibling.suffix in (".llir", ".json", ".cubin", ".ptx", ".ttir", ".ttgir"):
                shutil.copy2(sibling, dest / sibling.name)
        found += 1
        print(f"collected {llir.stem}: {llir.stat().st_size} bytes of LLVM IR")
    return 0 if found >= 2 and ok_add and ok_softmax else 1


if __name__ == "__main__":
    sys.exit(main())
