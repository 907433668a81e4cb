"""A Python process launching PyTorch ops (cudart used dynamically, the caching allocator).

Prints `torch_app OK <a address> <c address>` when the result is right.
"""

import sys

import torch


def main() -> int:
    n = 1 << 20
    a = torch.arange(n, device="cuda", dtype=torch.float32)
    b = torch.full((n,), 2.0, device="cuda", dtype=torch.float32)
    c = torch.empty_like(a)
    torch.mul(a, b, out=c)  # an elementwise kernel of ATen
    c.add_(a)
    torch.cuda.synchronize()
    if not torch.equal(c, a * 3):
        print("torch_app: wrong result", file=sys.stderr)
        return 1
    print(f"torch_app OK {a.data_ptr():#x} {c.data_ptr():#x}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
