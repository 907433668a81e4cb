"""A PyTorch CUDA graph: two ATen elementwise kernels captured with torch.cuda.graph and replayed.

The same ops run first on other tensors (the warm-up PyTorch asks for before a capture, and another
argument set of each kernel), then the graph computes y = 2 x + 1 and is replayed REPLAYS times.
Prints `torch_graph_app OK` when the result is right.
"""

import sys

import torch

REPLAYS = 5


def main() -> int:
    n = 1 << 20
    x = torch.arange(n, device="cuda", dtype=torch.float32)
    y = torch.empty_like(x)
    w, z = torch.ones_like(x), torch.empty_like(x)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            torch.mul(w, 2.0, out=z)
            z.add_(1.0)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        torch.mul(x, 2.0, out=y)
        y.add_(1.0)
    for _ in range(REPLAYS):
        graph.replay()
    torch.cuda.synchronize()
    expected = torch.arange(n, dtype=torch.float32) * 2 + 1  # on the host: no more kernels of the same ops
    if not torch.equal(y.cpu(), expected) or not torch.equal(z.cpu(), torch.full((n,), 3.0)):
        print("torch_graph_app: wrong result", file=sys.stderr)
        return 1
    print("torch_graph_app OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
