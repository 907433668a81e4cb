// Empty stand-in: CUDA 13 dropped this header, which clang-19's CUDA wrapper still includes.
