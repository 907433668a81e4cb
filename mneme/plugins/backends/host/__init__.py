"""The host backend: runs CUDA-flavoured NVPTX kernel IR on the CPU through llvmlite's JIT."""
