/* Mneme host runtime: runs a kernel grid on the CPU.
 *
 * Blocks run in parallel on the calling thread plus parked helper threads (one per core). A
 * block runs in one of four modes, chosen when the kernel was compiled (backend.py):
 *   MODE_BLOCK   no barriers, thread index read only by the kernel: one call loops over the block
 *                (asked as MODE_BLOCK_RUNS: over a run of blocks along x, a row of each in turn);
 *   MODE_THREAD  no barriers: one call per thread;
 *   MODE_STEPS   barriers, shuffles, votes in the kernel itself: one call runs a thread to its next
 *                barrier or warp point (steps.py); the scheduler lets a warp pass a warp point
 *                when all its lanes are there, and the block pass a barrier likewise;
 *   MODE_FIBERS  everything else (synchronization in called functions, activemask...): every GPU
 *                thread is a fiber with its own stack, switched at each barrier and warp operation.
 * A kernel that synchronizes its whole grid (cooperative groups' grid.sync(), which reads the grid
 * workspace) runs in MODE_GRID instead: one worker keeps every block resident, all their threads
 * fibers, and a thread polling memory lets the other blocks run (grid.inc).
 * JIT-compiled kernel code calls back into the functions named __mneme_*. A fault (SIGSEGV,
 * SIGBUS, SIGFPE, SIGILL), a trap or a device-side assert inside a kernel ends the launch with an
 * error instead of killing the process. A launch running past the time limit (mneme_set_timeout)
 * is stopped the same way: a watchdog thread signals the workers still inside kernel code, and
 * the launch fails with "timed out" (docs/security.md). With the sandbox on (the default), this
 * library runs recorded kernels only in a sandbox process, one per loaded kernel, whose every
 * thread is under a seccomp filter (serve.inc, sandbox.inc); the backend's process keeps the time
 * limit and kills it. Compiled at first use by the Python backend (runtime.py).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#if !defined(__x86_64__)
#include <ucontext.h>
#endif

#define API __attribute__((visibility("default")))
#define MAX_WORKERS 256

/* Read by JIT-compiled code at fixed offsets: keep in sync with retarget.py (CTX_OFFSETS). */
typedef struct mn_ctx {
  uint32_t tid[3];    /* 0 */
  uint32_t ntid[3];   /* 12 */
  uint32_t ctaid[3];  /* 24 */
  uint32_t nctaid[3]; /* 36 */
  uint32_t laneid;    /* 48 */
  uint32_t warpid;    /* 52 */
  uint32_t nwarps;    /* 56 */
  uint32_t linear;    /* 60 */
  char *shared;       /* 64 */
  uint32_t exchanges; /* warp exchanges done so far: picks the slot bank (runtime only) */
  uint32_t run;       /* 76: MODE_BLOCK with runs: the blocks along x from ctaid[0] on that the call runs */
  uint32_t run_rows;  /* 80: set by an entry that runs the run's rows as one loop: a failure names the run */
} mn_ctx;

typedef void (*mn_entry_fn)(void *args);

/* F_SPIN: polling memory that another block writes (grid launches); it runs again at the next pass. */
enum { F_READY, F_BLOCK_WAIT, F_WARP_WAIT, F_DONE, F_SPIN };
/* How the entry runs: once per thread, once per thread as a fiber, or once per block; MODE_GRID:
   as MODE_FIBERS, with every block of the grid resident at once. */
enum { MODE_THREAD = 0, MODE_FIBERS = 1, MODE_BLOCK = 2, MODE_STEPS = 3, MODE_GRID = 4 };
/* What a launch asks for a MODE_BLOCK kernel whose entry runs a row of blocks along x per call
   (retarget.FLAG_BLOCK_RUNS: mn_ctx.run blocks from ctaid[0] on); it runs as MODE_BLOCK with runs. */
#define MODE_BLOCK_RUNS 5
/* Step form: the entry runs one thread from `resume` to its next barrier or its end, and stores
   in the frame's first word where to resume (-1: done). */
typedef void (*mn_step_fn)(void *args, void *frame, int32_t resume);
#define STEP_WARP_BIT (1 << 30) /* resume ids of warp points (steps.py WARP_BIT) */

typedef struct mn_fiber {
#if defined(__x86_64__)
  void *sp;
#else
  ucontext_t uc;
#endif
  int state;
  uint64_t polled_value; /* grid launches: what its last poll of polled_at read */
  const void *polled_at;
} mn_fiber;

#define MAX_SHARES 16 /* a launch's shares of blocks: a worker past the 16th starts in share k % 16 */
typedef struct {
  _Atomic uint64_t next; /* the share's next unclaimed block */
  uint64_t end;          /* and its end */
  char pad[48];
} mn_share;

typedef struct mn_launch {
  mn_entry_fn entry;
  void *args;
  uint32_t grid[3], block[3];
  uint64_t nblocks, shared_bytes;
  int mode;
  uint32_t warp, warp_shift; /* lanes per warp: 32 (CUDA) or 64 (an AMD wave64), and its log2 */
  uint64_t frame_bytes; /* per thread, step form */
  uint64_t chunk;   /* blocks a worker claims at once, at least, once the helpers are awake (workers.inc) */
  uint64_t opening; /* the launcher's next claim while its helpers sleep: 1, 2, 4, ... blocks */
  int runs;       /* MODE_BLOCK: the entry runs mn_ctx.run blocks along x per call */
  /* Helpers are woken only once the launching thread has run for WAKE_AFTER_NS with blocks left
     (helper_threads.inc): `lazy_helpers` still to wake, by `launcher`, from `wake_at_ns` on. */
  int lazy_helpers, helpers_used;
  uint64_t wake_at_ns;
  struct mn_worker *launcher;
  /* The blocks in `parts` contiguous shares, worker k's own the k-th (workers.inc, claim_blocks): a launch repeated
     on the same data finds each share's bytes in the cache of the CPU whose pinned worker ran it the time before; a
     worker done with its share claims from the others'. Each share's counter on a cache line of its own: every
     claim writes it, and the fields above are read for every block (a shared line made two workers no faster
     than one). */
  int parts;
  _Alignas(64) mn_share share[MAX_SHARES];
  _Alignas(64) _Atomic int abort;
  _Atomic int failed;
  _Atomic int timed_out;
  _Atomic int nworkers;
  struct mn_worker *workers[MAX_WORKERS]; /* those that took part, for the watchdog */
  char message[512];
  /* Grid launches: the grid workspace, whose address %envreg1/%envreg2 read (cooperative groups
     keep the grid barrier's arrival count in its second word), zeroed per launch; and a count of
     the scheduling events that show a pass over the grid did something (deadlock detection). */
  _Alignas(64) uint32_t workspace[16];
  uint64_t progress;
  /* What AMDGPU code reads through llvm.amdgcn.dispatch.ptr and .implicitarg.ptr (an HSA kernel
     dispatch packet, and code object v5's hidden arguments), filled once per launch. */
  _Alignas(64) uint8_t amd_packet[64];
  _Alignas(64) uint8_t amd_implicit[256];
} mn_launch;

typedef struct mn_worker {
  mn_launch *launch;
  /* fibers of the current block */
  mn_fiber *fibers;
  mn_ctx *ctxs;
  char *stacks;
  size_t stacks_bytes, capacity, stride;
  int cur, nthreads;
  int round_end; /* fibers [.., round_end) take part in the current scheduling round */
#if defined(__x86_64__)
  void *sched_sp;
#else
  ucontext_t sched_uc;
#endif
  uint64_t *slots; /* per warp, one per lane */
  int32_t red_count, red_result, red_arrived;
  char *shared;
  size_t shared_bytes;
  char *frames;
  size_t frames_bytes;
  char *altstack;
  sigjmp_buf jump;
  volatile int in_kernel;
  pthread_t thread; /* the thread running this worker in the current launch */
  int home;         /* its share of a launch's blocks: 0 the launcher, k the k-th helper (mn_launch.share) */
  /* atomic updates gathered during the current launch (deferred.inc): one slot per address and operation */
  struct mn_deferred {
    void *addr;
    uint32_t op, bytes; /* bytes: 4 or 8 */
    uint64_t bits;      /* the folded value: an integer, or a float's or double's bits */
  } deferred[16];
  uint32_t ndeferred;
} mn_worker;

/* initial-exec: no __tls_get_addr call on every context read (the runtime needs few TLS bytes) */
static __thread mn_worker *tls_worker __attribute__((tls_model("initial-exec")));
static __thread mn_ctx *tls_ctx __attribute__((tls_model("initial-exec")));
/* a helper thread's signal stack, installed once for its life (helper_threads.inc): its worker is its own */
static __thread char *tls_altstack __attribute__((tls_model("initial-exec")));
static size_t fiber_stack_bytes = 128 << 10;
static long page_bytes;

/* The runtime is one translation unit (its parts share static state and inline helpers), kept in
   files of one idea each, in dependency order. */
#include "runtime_parts/context_switch.inc"
#include "runtime_parts/errors.inc"
#include "runtime_parts/sandbox.inc"
#include "runtime_parts/faults.inc"
#include "runtime_parts/time_limit.inc"
#include "runtime_parts/deferred.inc"
#include "runtime_parts/workers.inc"
#include "runtime_parts/grid.inc"
#include "runtime_parts/helper_threads.inc"
#include "runtime_parts/kernel_api.inc"
#include "runtime_parts/bounds.inc"
#include "runtime_parts/serve.inc"
