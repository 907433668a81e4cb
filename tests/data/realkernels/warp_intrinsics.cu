// Warp-level intrinsics of sm_80+ real code uses: redux.sync (__reduce_*_sync), __match_any_sync, %laneid by asm.
// clang-19's __reduce_*_sync pass (mask, value) to llvm.nvvm.redux.sync.*, whose operands are (value, mask)
// (the PTX it emits reduces the mask over the lanes the value names); the builtins below are called in the
// intrinsic's own order, as later clang headers do.
#define FULL 0xffffffffu

extern "C" __global__ void warp_reduce_ops(const int* in, int* out) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int v = in[i];
  unsigned lane;
  asm("mov.u32 %0, %%laneid;" : "=r"(lane));
  int* o = out + i * 11;
  o[0] = __nvvm_redux_sync_add(v, FULL);
  o[1] = __nvvm_redux_sync_min(v, FULL);
  o[2] = __nvvm_redux_sync_max(v, FULL);
  o[3] = __nvvm_redux_sync_or(v, FULL);
  o[4] = (int)__match_any_sync(FULL, v & 3);
  o[5] = (int)lane;
  o[6] = __nvvm_redux_sync_and(v | 0x100, FULL);
  o[7] = __nvvm_redux_sync_umax(v, FULL);
  int pred = 0;
  o[8] = (int)__match_all_sync(FULL, lane < 32 ? 7 : v, &pred);  // all equal: the mask, pred 1
  o[9] = (int)__match_all_sync(FULL, v, &pred) + 2 * pred;       // distinct values: 0, pred 0
  o[10] = (int)__match_any_sync(FULL, (long long)(v & 1) << 40);  // 64-bit values differing in the high half
}
