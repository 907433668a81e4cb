"""A Python process launching a Triton kernel (recorded with the recorder LD_PRELOADed into python3).

Prints `triton_app OK <x address> <out address>` when the result is right.
"""

import sys

import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask), mask=mask)


def main() -> int:
    n = 100_000
    x = torch.arange(n, device="cuda", dtype=torch.float32)
    y = torch.full((n,), 3.0, device="cuda", dtype=torch.float32)
    out = torch.empty_like(x)
    for _ in range(2):
        add_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
    torch.cuda.synchronize()
    if not torch.equal(out, x + y):
        print("triton_app: wrong result", file=sys.stderr)
        return 1
    print(f"triton_app OK {x.data_ptr():#x} {out.data_ptr():#x}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
