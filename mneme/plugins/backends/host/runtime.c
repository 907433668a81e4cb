/* Mneme host runtime: runs a kernel grid on the CPU.
 *
 * Blocks run in parallel on the calling thread plus parked helper threads (one per core). A
 * block runs in one of four modes, chosen when the kernel was compiled (backend.py):
 *   MODE_BLOCK   no barriers, thread index read only by the kernel: one call loops over the block;
 *   MODE_THREAD  no barriers: one call per thread;
 *   MODE_STEPS   barriers, shuffles, votes in the kernel itself: one call runs a thread to its next
 *                barrier or warp point (steps.py); the scheduler lets a warp pass a warp point
 *                when all its lanes are there, and the block pass a barrier likewise;
 *   MODE_FIBERS  everything else (synchronization in called functions, activemask...): every GPU
 *                thread is a fiber with its own stack, switched at each barrier and warp operation.
 * JIT-compiled kernel code calls back into the functions named __mneme_*. A fault (SIGSEGV,
 * SIGBUS, SIGFPE, SIGILL), a trap or a device-side assert inside a kernel ends the launch with an
 * error instead of killing the process. A launch running past the time limit (mneme_set_timeout)
 * is stopped the same way: a watchdog thread signals the workers still inside kernel code, and
 * the launch fails with "timed out" (docs/security.md). Compiled at first use by the Python
 * backend (runtime.py).
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
} mn_ctx;

typedef void (*mn_entry_fn)(void *args);

enum { F_READY, F_BLOCK_WAIT, F_WARP_WAIT, F_DONE };
/* How the entry runs: once per thread, once per thread as a fiber, or once per block. */
enum { MODE_THREAD = 0, MODE_FIBERS = 1, MODE_BLOCK = 2, MODE_STEPS = 3 };
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
} mn_fiber;

typedef struct mn_launch {
  mn_entry_fn entry;
  void *args;
  uint32_t grid[3], block[3];
  uint64_t nblocks, shared_bytes;
  int mode;
  uint32_t warp, warp_shift; /* lanes per warp: 32 (CUDA) or 64 (an AMD wave64), and its log2 */
  uint64_t frame_bytes; /* per thread, step form */
  _Atomic uint64_t next_block;
  _Atomic int abort;
  _Atomic int failed;
  _Atomic int timed_out;
  _Atomic int nworkers;
  struct mn_worker *workers[MAX_WORKERS]; /* those that took part, for the watchdog */
  char message[512];
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
} mn_worker;

/* initial-exec: no __tls_get_addr call on every context read (the runtime needs few TLS bytes) */
static __thread mn_worker *tls_worker __attribute__((tls_model("initial-exec")));
static __thread mn_ctx *tls_ctx __attribute__((tls_model("initial-exec")));
static size_t fiber_stack_bytes = 128 << 10;
static long page_bytes;

/* ---- context switch ------------------------------------------------------------------- */
#if defined(__x86_64__)
void mn_switch(void **save_sp, void *to_sp);
void mn_fiber_start(void);
__asm__(".text\n"
        ".globl mn_switch\n.hidden mn_switch\n.type mn_switch,@function\n"
        "mn_switch:\n"
        "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
        "  movq %rsp, (%rdi)\n  movq %rsi, %rsp\n"
        "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
        "  ret\n"
        ".size mn_switch, .-mn_switch\n"
        ".globl mn_fiber_start\n.hidden mn_fiber_start\n.type mn_fiber_start,@function\n"
        "mn_fiber_start:\n  call mn_fiber_main\n  ud2\n"
        ".size mn_fiber_start, .-mn_fiber_start\n");
#endif

__attribute__((visibility("hidden"), noreturn)) void mn_fiber_main(void);

static void fiber_init(mn_worker *w, int i) {
  char *lo = w->stacks + (size_t)i * w->stride;
  /* Stagger the stack tops so the fibers' hot frames do not all fall into the same cache sets. */
  char *top = lo + w->stride - (size_t)(i % 64) * 64;
#if defined(__x86_64__)
  /* Kernels never change the floating-point control registers, so switches do not save them. */
  uint64_t *sp = (uint64_t *)((uintptr_t)top & ~(uintptr_t)15) - 2; /* 16-aligned after ret */
  *--sp = (uint64_t)(uintptr_t)mn_fiber_start;
  for (int r = 0; r < 6; r++) *--sp = 0;
  w->fibers[i].sp = sp;
#else
  getcontext(&w->fibers[i].uc);
  w->fibers[i].uc.uc_stack.ss_sp = lo + page_bytes;
  w->fibers[i].uc.uc_stack.ss_size = w->stride - (size_t)page_bytes;
  w->fibers[i].uc.uc_link = NULL;
  makecontext(&w->fibers[i].uc, (void (*)(void))mn_fiber_main, 0);
#endif
  w->fibers[i].state = F_READY;
}

static inline void switch_in(mn_worker *w, int i) {
  w->cur = i;
  tls_ctx = &w->ctxs[i];
#if defined(__x86_64__)
  mn_switch(&w->sched_sp, w->fibers[i].sp);
#else
  swapcontext(&w->sched_uc, &w->fibers[i].uc);
#endif
}

static inline int next_ready(mn_worker *w, int from) {
  for (int i = from; i < w->round_end; i++)
    if (w->fibers[i].state == F_READY) return i;
  return -1;
}

/* Leave the running fiber: straight to the next ready fiber of the round, else to the scheduler. */
static inline void switch_out(mn_worker *w, int state) {
  mn_fiber *f = &w->fibers[w->cur];
  f->state = state;
  int next = next_ready(w, w->cur + 1);
  if (next >= 0) {
    w->cur = next;
    tls_ctx = &w->ctxs[next];
#if defined(__x86_64__)
    mn_switch(&f->sp, w->fibers[next].sp);
#else
    swapcontext(&f->uc, &w->fibers[next].uc);
#endif
    return;
  }
#if defined(__x86_64__)
  mn_switch(&f->sp, w->sched_sp);
#else
  swapcontext(&f->uc, &w->sched_uc);
#endif
}

void mn_fiber_main(void) {
  mn_worker *w = tls_worker;
  w->launch->entry(w->launch->args);
  switch_out(w, F_DONE);
  abort(); /* a finished fiber is never resumed */
}

/* ---- errors ----------------------------------------------------------------------------- */
static void fail_launch(mn_worker *w, const char *fmt, ...) {
  mn_launch *L = w->launch;
  int expected = 0;
  if (atomic_compare_exchange_strong(&L->failed, &expected, 1)) {
    int n = 0;
    if (tls_ctx && L->mode == MODE_BLOCK)
      n = snprintf(L->message, sizeof L->message, "block (%u, %u, %u): ", tls_ctx->ctaid[0], tls_ctx->ctaid[1],
                   tls_ctx->ctaid[2]);
    else if (tls_ctx)
      n = snprintf(L->message, sizeof L->message, "block (%u, %u, %u) thread (%u, %u, %u): ", tls_ctx->ctaid[0],
                   tls_ctx->ctaid[1], tls_ctx->ctaid[2], tls_ctx->tid[0], tls_ctx->tid[1], tls_ctx->tid[2]);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(L->message + n, sizeof L->message - (size_t)n, fmt, ap);
    va_end(ap);
  }
  atomic_store(&L->abort, 1);
}

static void leave_kernel(mn_worker *w) {
  w->in_kernel = 0;
  siglongjmp(w->jump, 1);
}

/* ---- faults ----------------------------------------------------------------------------- */
static const int fault_signals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL};
static struct sigaction previous[32];
static pthread_mutex_t handler_lock = PTHREAD_MUTEX_INITIALIZER;

static void on_fault(int sig, siginfo_t *info, void *uctx) {
  mn_worker *w = tls_worker;
  if (w && w->in_kernel) {
    const char *what = sig == SIGSEGV   ? "invalid memory access (SIGSEGV)"
                       : sig == SIGBUS  ? "bus error (SIGBUS)"
                       : sig == SIGFPE  ? "arithmetic fault, e.g. integer division by zero (SIGFPE)"
                                        : "trap instruction (SIGILL)";
    fail_launch(w, "%s at address %p", what, info->si_addr);
    leave_kernel(w);
  }
  struct sigaction *old = &previous[sig];
  if ((old->sa_flags & SA_SIGINFO) && old->sa_sigaction) {
    old->sa_sigaction(sig, info, uctx);
  } else if (old->sa_handler == SIG_IGN) {
    return;
  } else if (old->sa_handler != SIG_DFL && old->sa_handler) {
    old->sa_handler(sig);
  } else {
    signal(sig, SIG_DFL); /* the faulting instruction runs again and ends the process as usual */
  }
}

static void install_handlers(void) {
  pthread_mutex_lock(&handler_lock);
  for (size_t i = 0; i < sizeof fault_signals / sizeof *fault_signals; i++) {
    int sig = fault_signals[i];
    struct sigaction cur;
    sigaction(sig, NULL, &cur);
    if ((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == on_fault) continue;
    struct sigaction act;
    memset(&act, 0, sizeof act);
    act.sa_sigaction = on_fault;
    act.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
    sigemptyset(&act.sa_mask);
    sigaction(sig, &act, &previous[sig]);
  }
  pthread_mutex_unlock(&handler_lock);
}

/* ---- time limit ------------------------------------------------------------------------- */
/* A watchdog thread (started at the first launch with a limit) polls the current launch's
   deadline; past it, it marks the launch timed out and sends SIG_TIMEOUT to every worker still
   in kernel code, whose handler leaves the kernel as a fault does. A late signal finds its
   launch not timed out and is ignored. A plain mutex guards the launch pointer (no condition
   variable: the watchdog sleeps in short steps). */
#define SIG_TIMEOUT (SIGRTMIN + 3)
#define DOG_STEP_NS 20000000L /* 20 ms */
static double timeout_seconds; /* 0: no limit */
static struct {
  pthread_mutex_t lock;
  pid_t pid; /* the watchdog does not survive fork(): a child starts its own */
  mn_launch *launch;
  uint64_t deadline_ns; /* CLOCK_MONOTONIC */
} dog = {.lock = PTHREAD_MUTEX_INITIALIZER};

API void mneme_set_timeout(double seconds) { timeout_seconds = seconds > 0 ? seconds : 0; }

static uint64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static void on_timeout(int sig, siginfo_t *info, void *uctx) {
  (void)sig, (void)info, (void)uctx;
  mn_worker *w = tls_worker;
  if (w && w->in_kernel && w->launch && atomic_load(&w->launch->timed_out)) leave_kernel(w);
}

static void expire(mn_launch *L) {
  int expected = 0;
  atomic_store(&L->timed_out, 1);
  if (atomic_compare_exchange_strong(&L->failed, &expected, 1))
    snprintf(L->message, sizeof L->message, "timed out after %g s (the limit: --timeout, or MNEME_LIMIT_TIMEOUT_SECONDS)",
             timeout_seconds);
  atomic_store(&L->abort, 1);
  int n = atomic_load(&L->nworkers);
  for (int i = 0; i < n && i < MAX_WORKERS; i++) {
    mn_worker *w = L->workers[i];
    if (w && w->in_kernel) pthread_kill(w->thread, SIG_TIMEOUT);
  }
}

static void *dog_main(void *arg) {
  (void)arg;
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, NULL);
  struct timespec step = {0, DOG_STEP_NS};
  for (;;) {
    nanosleep(&step, NULL);
    pthread_mutex_lock(&dog.lock);
    if (dog.launch && now_ns() >= dog.deadline_ns) expire(dog.launch); /* again each step until it ends */
    pthread_mutex_unlock(&dog.lock);
  }
  return NULL;
}

/* Arm the watchdog for launch L (no-op without a limit); returns whether it was armed. */
static int arm_watchdog(mn_launch *L) {
  if (timeout_seconds <= 0) return 0;
  /* in a forked child the lock may have been copied held by the parent's watchdog; launches are
     serialized by launch_lock, so re-initializing it here races with nothing */
  if (dog.pid != getpid()) pthread_mutex_init(&dog.lock, NULL);
  pthread_mutex_lock(&dog.lock);
  if (dog.pid != getpid()) {
    pthread_t thread;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 1 << 16);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&thread, &attr, dog_main, NULL);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
      pthread_mutex_unlock(&dog.lock);
      return 0;
    }
    dog.pid = getpid();
    struct sigaction act;
    memset(&act, 0, sizeof act);
    act.sa_sigaction = on_timeout;
    act.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
    sigemptyset(&act.sa_mask);
    sigaction(SIG_TIMEOUT, &act, NULL);
  }
  dog.deadline_ns = now_ns() + (uint64_t)(timeout_seconds * 1e9);
  dog.launch = L;
  pthread_mutex_unlock(&dog.lock);
  return 1;
}

static void disarm_watchdog(void) {
  pthread_mutex_lock(&dog.lock);
  dog.launch = NULL;
  pthread_mutex_unlock(&dog.lock);
}

/* ---- workers ---------------------------------------------------------------------------- */
static mn_worker *worker_pool[MAX_WORKERS];
static int worker_pool_size;
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;

static mn_worker *acquire_worker(void) {
  mn_worker *w = NULL;
  pthread_mutex_lock(&pool_lock);
  if (worker_pool_size > 0) w = worker_pool[--worker_pool_size];
  pthread_mutex_unlock(&pool_lock);
  if (!w) {
    w = calloc(1, sizeof *w);
    if (!w) return NULL;
    w->altstack = malloc(1 << 16);
    if (!w->altstack) {
      free(w);
      return NULL;
    }
  }
  return w;
}

static void release_worker(mn_worker *w) {
  pthread_mutex_lock(&pool_lock);
  if (worker_pool_size < MAX_WORKERS) {
    worker_pool[worker_pool_size++] = w;
    w = NULL;
  }
  pthread_mutex_unlock(&pool_lock);
  if (w) {
    if (w->stacks) munmap(w->stacks, w->stacks_bytes);
    free(w->fibers);
    free(w->ctxs);
    free(w->slots);
    free(w->shared);
    free(w->frames);
    free(w->altstack);
    free(w);
  }
}

static int ensure_capacity(mn_worker *w, int nthreads, int fibers, uint64_t shared_bytes) {
  size_t n = (size_t)nthreads;
  if (n > w->capacity) {
    free(w->ctxs);
    free(w->fibers);
    free(w->slots);
    if (w->stacks) munmap(w->stacks, w->stacks_bytes);
    w->stacks = NULL;
    w->stacks_bytes = 0;
    w->ctxs = calloc(n, sizeof *w->ctxs);
    w->fibers = calloc(n, sizeof *w->fibers);
    w->slots = calloc(2 * ((n + 63) / 64) * 64, sizeof *w->slots); /* two banks, for warps of 32 or 64 */
    w->capacity = (w->ctxs && w->fibers && w->slots) ? n : 0;
    if (!w->capacity) return -1;
  }
  /* One guard page plus the stack per fiber: an odd number of pages apart, so the fibers' hot
     frames spread over the cache sets and do not evict one another. */
  size_t stride = fiber_stack_bytes + (size_t)page_bytes;
  if (fibers && (w->stride != stride || w->stacks_bytes < w->capacity * stride)) {
    if (w->stacks) munmap(w->stacks, w->stacks_bytes);
    w->stride = stride;
    w->stacks_bytes = w->capacity * stride;
    w->stacks = mmap(NULL, w->stacks_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (w->stacks == MAP_FAILED) {
      w->stacks = NULL;
      w->stacks_bytes = 0;
      return -1;
    }
    for (size_t i = 0; i < w->capacity; i++) /* a guard page under every fiber stack */
      mprotect(w->stacks + i * stride, (size_t)page_bytes, PROT_NONE);
  }
  if (w->launch->mode == MODE_STEPS) {
    size_t want_frames = w->capacity * ((w->launch->frame_bytes + 63) & ~(uint64_t)63);
    if (w->frames_bytes < want_frames) {
      free(w->frames);
      w->frames = aligned_alloc(64, want_frames);
      w->frames_bytes = w->frames ? want_frames : 0;
      if (!w->frames) return -1;
    }
  }
  size_t want = (size_t)shared_bytes + 64;
  if (w->shared_bytes < want) {
    free(w->shared);
    w->shared = aligned_alloc(64, (want + 63) & ~(size_t)63);
    w->shared_bytes = w->shared ? want : 0;
    if (!w->shared) return -1;
  }
  return 0;
}

static void init_ctx(mn_launch *L, mn_worker *w, mn_ctx *c, uint32_t linear, const uint32_t cta[3]) {
  uint32_t bx = L->block[0], by = L->block[1];
  c->tid[0] = linear % bx;
  c->tid[1] = (linear / bx) % by;
  c->tid[2] = linear / (bx * by);
  memcpy(c->ntid, L->block, sizeof c->ntid);
  memcpy(c->ctaid, cta, sizeof c->ctaid);
  memcpy(c->nctaid, L->grid, sizeof c->nctaid);
  c->laneid = linear & (L->warp - 1);
  c->warpid = linear >> L->warp_shift;
  c->nwarps = (uint32_t)((w->nthreads + L->warp - 1) / L->warp);
  c->linear = linear;
  c->shared = w->shared;
  c->exchanges = 0;
}

static void run_block(mn_launch *L, mn_worker *w, const uint32_t cta[3]) {
  int n = w->nthreads;
  if (L->mode == MODE_BLOCK) { /* the entry loops over the block's threads itself */
    init_ctx(L, w, &w->ctxs[0], 0, cta);
    tls_ctx = &w->ctxs[0];
    L->entry(L->args);
    return;
  }
  if (L->mode == MODE_STEPS) { /* each call runs a thread to its next barrier or warp point */
    size_t stride = (L->frame_bytes + 63) & ~(uint64_t)63;
    for (int i = 0; i < n; i++) {
      init_ctx(L, w, &w->ctxs[i], (uint32_t)i, cta);
      *(int32_t *)(w->frames + i * stride) = 0;
      w->fibers[i].state = F_READY;
    }
    mn_step_fn step = (mn_step_fn)(void (*)(void))L->entry;
    int W = (int)L->warp, nwarps = (n + W - 1) / W;
    w->red_count = 0;
    for (;;) {
      for (int wp = 0; wp < nwarps; wp++) {
        int lo = wp * W, hi = lo + W < n ? lo + W : n;
        for (;;) {
          int at_warp_point = 0;
          for (int i = lo; i < hi; i++) {
            if (w->fibers[i].state != F_READY) continue;
            int32_t *resume = (int32_t *)(w->frames + i * stride);
            tls_ctx = &w->ctxs[i];
            step(L->args, resume, *resume);
            w->fibers[i].state = *resume < 0 ? F_DONE : (*resume & STEP_WARP_BIT) ? F_WARP_WAIT : F_BLOCK_WAIT;
            at_warp_point |= w->fibers[i].state == F_WARP_WAIT;
          }
          if (!at_warp_point) break;
          for (int i = lo; i < hi; i++) /* the whole warp reached the point: it goes on */
            if (w->fibers[i].state == F_WARP_WAIT) w->fibers[i].state = F_READY;
        }
      }
      int waiting = 0;
      for (int i = 0; i < n; i++)
        if (w->fibers[i].state == F_BLOCK_WAIT) {
          w->fibers[i].state = F_READY;
          waiting++;
        }
      if (!waiting) break;
      w->red_result = w->red_count; /* for __syncthreads_count and friends */
      w->red_arrived = waiting;
      w->red_count = 0;
    }
    tls_ctx = NULL;
    return;
  }
  if (L->mode == MODE_THREAD) {
    mn_ctx *c = &w->ctxs[0];
    for (int i = 0; i < n; i++) {
      init_ctx(L, w, c, (uint32_t)i, cta);
      tls_ctx = c;
      L->entry(L->args);
    }
    return;
  }
  for (int i = 0; i < n; i++) {
    init_ctx(L, w, &w->ctxs[i], (uint32_t)i, cta);
    fiber_init(w, i);
  }
  w->red_count = 0;
  int W = (int)L->warp, nwarps = (n + W - 1) / W;
  for (;;) {
    for (int wp = 0; wp < nwarps; wp++) {
      int lo = wp * W, hi = lo + W < n ? lo + W : n;
      w->round_end = hi;
      for (;;) {
        int first = next_ready(w, lo);
        if (first >= 0) switch_in(w, first); /* returns when every fiber of the round has yielded */
        int warp_waiting = 0;
        for (int i = lo; i < hi; i++)
          if (w->fibers[i].state == F_WARP_WAIT) {
            w->fibers[i].state = F_READY;
            warp_waiting = 1;
          }
        if (!warp_waiting) break;
      }
    }
    int waiting = 0;
    for (int i = 0; i < n; i++)
      if (w->fibers[i].state == F_BLOCK_WAIT) {
        w->fibers[i].state = F_READY;
        waiting++;
      }
    if (!waiting) break;
    w->red_result = w->red_count;
    w->red_arrived = waiting;
    w->red_count = 0;
  }
  tls_ctx = NULL;
}

static void *worker_main(void *arg) {
  mn_worker *w = arg;
  mn_launch *L = w->launch;
  tls_worker = w;
  w->thread = pthread_self();
  {
    int slot = atomic_fetch_add(&L->nworkers, 1);
    if (slot < MAX_WORKERS) L->workers[slot] = w;
  }
  stack_t alt = {.ss_sp = w->altstack, .ss_size = 1 << 16, .ss_flags = 0}, old_alt;
  sigaltstack(&alt, &old_alt);
  w->nthreads = (int)(L->block[0] * L->block[1] * L->block[2]);
  if (ensure_capacity(w, w->nthreads, L->mode == MODE_FIBERS, L->shared_bytes) != 0) {
    fail_launch(w, "out of memory for %d threads per block and %llu bytes of shared memory", w->nthreads,
                (unsigned long long)L->shared_bytes);
    goto done;
  }
  if (sigsetjmp(w->jump, 1)) goto done; /* a fault or trap in a kernel */
  for (;;) {
    if (atomic_load_explicit(&L->abort, memory_order_relaxed)) break;
    uint64_t b = atomic_fetch_add(&L->next_block, 1);
    if (b >= L->nblocks) break;
    uint32_t cta[3] = {(uint32_t)(b % L->grid[0]), (uint32_t)((b / L->grid[0]) % L->grid[1]),
                       (uint32_t)(b / ((uint64_t)L->grid[0] * L->grid[1]))};
    w->in_kernel = 1;
    run_block(L, w, cta);
    w->in_kernel = 0;
  }
done:
  w->in_kernel = 0;
  tls_ctx = NULL;
  tls_worker = NULL;
  sigaltstack(&old_alt, NULL);
  return NULL;
}

static int worker_count(void) {
  const char *env = getenv("MNEME_HOST_THREADS");
  if (env && atoi(env) > 0) return atoi(env);
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

/* ---- helper threads: started once per process, parked between launches --------------------- */
static struct {
  pthread_mutex_t lock;
  pthread_cond_t wake, finished;
  pid_t pid; /* threads do not survive fork(): a child process starts its own */
  int count, participants, running;
  uint64_t generation; /* one per launch */
  uint64_t start_generation[MAX_WORKERS];
  mn_launch *launch;
  mn_worker *workers[MAX_WORKERS];
} helpers = {.lock = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER, .finished = PTHREAD_COND_INITIALIZER};
static pthread_mutex_t launch_lock = PTHREAD_MUTEX_INITIALIZER;

static void *helper_main(void *arg) {
  int index = (int)(intptr_t)arg;
  sigset_t quiet; /* asynchronous signals go to the application's threads, not to ours */
  sigfillset(&quiet);
  for (size_t i = 0; i < sizeof fault_signals / sizeof *fault_signals; i++) sigdelset(&quiet, fault_signals[i]);
  sigdelset(&quiet, SIG_TIMEOUT);
  pthread_sigmask(SIG_BLOCK, &quiet, NULL);
  pthread_mutex_lock(&helpers.lock);
  uint64_t seen = helpers.start_generation[index];
  for (;;) {
    while (helpers.generation == seen) pthread_cond_wait(&helpers.wake, &helpers.lock);
    seen = helpers.generation;
    if (index >= helpers.participants) continue;
    mn_worker *w = helpers.workers[index];
    w->launch = helpers.launch;
    pthread_mutex_unlock(&helpers.lock);
    worker_main(w);
    pthread_mutex_lock(&helpers.lock);
    if (--helpers.running == 0) pthread_cond_signal(&helpers.finished);
  }
  return NULL;
}

/* Start helpers up to `wanted` and hand them the launch; returns how many take part. */
static int wake_helpers(mn_launch *L, int wanted) {
  pthread_mutex_lock(&helpers.lock);
  if (helpers.pid != getpid()) {
    helpers.pid = getpid();
    helpers.count = 0;
  }
  while (helpers.count < wanted && helpers.count < MAX_WORKERS) {
    int i = helpers.count;
    if (!helpers.workers[i] && !(helpers.workers[i] = acquire_worker())) break;
    helpers.start_generation[i] = helpers.generation;
    pthread_t thread;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 8 << 20);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&thread, &attr, helper_main, (void *)(intptr_t)i);
    pthread_attr_destroy(&attr);
    if (rc != 0) break;
    helpers.count++;
  }
  int used = wanted < helpers.count ? wanted : helpers.count;
  helpers.launch = L;
  helpers.participants = used;
  helpers.running = used;
  helpers.generation++;
  pthread_cond_broadcast(&helpers.wake);
  pthread_mutex_unlock(&helpers.lock);
  return used;
}

static void wait_helpers(void) {
  pthread_mutex_lock(&helpers.lock);
  while (helpers.running > 0) pthread_cond_wait(&helpers.finished, &helpers.lock);
  pthread_mutex_unlock(&helpers.lock);
}

static void put16(uint8_t *p, uint32_t v) { uint16_t x = (uint16_t)v; memcpy(p, &x, 2); }
static void put32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }

/* The HSA dispatch packet (hsa_kernel_dispatch_packet_t: workgroup sizes at 4, grid sizes in
   work-items at 12) and code object v5's hidden kernel arguments (block counts at 0, group sizes
   at 12, remainders at 18, grid dimensions at 64, dynamic LDS size at 120), as the ROCm runtime
   writes them; see docs/design/host-amdgpu.md. */
static void amd_dispatch_fill(mn_launch *L) {
  uint8_t *p = L->amd_packet, *h = L->amd_implicit;
  memset(p, 0, sizeof L->amd_packet);
  memset(h, 0, sizeof L->amd_implicit);
  int dims = L->grid[2] * L->block[2] > 1 ? 3 : L->grid[1] * L->block[1] > 1 ? 2 : 1;
  put16(p + 2, (uint32_t)dims);
  for (int i = 0; i < 3; i++) {
    put16(p + 4 + 2 * i, L->block[i]);
    put32(p + 12 + 4 * i, L->grid[i] * L->block[i]);
    put32(h + 4 * i, L->grid[i]);
    put16(h + 12 + 2 * i, L->block[i]);
    put16(h + 18 + 2 * i, 0); /* HIP grids are whole blocks: no partial last group */
  }
  put32(p + 28, (uint32_t)L->shared_bytes);
  put16(h + 64, (uint32_t)dims);
  put32(h + 120, (uint32_t)L->shared_bytes);
}

/* Run one grid to completion. Returns 0, or 1 with `message` set when the launch failed. */
API int mneme_launch(mn_entry_fn entry, void *args, const uint32_t grid[3], const uint32_t block[3],
                     uint64_t shared_bytes, int mode, uint64_t frame_bytes, int max_workers, char *message,
                     size_t message_len) {
  if (!page_bytes) page_bytes = sysconf(_SC_PAGESIZE);
  const char *env = getenv("MNEME_HOST_STACK_KB");
  if (env && atoi(env) >= 16) fiber_stack_bytes = (size_t)atoi(env) << 10;
  install_handlers();
  mn_launch L;
  memset(&L, 0, sizeof L);
  L.entry = entry;
  L.args = args;
  memcpy(L.grid, grid, sizeof L.grid);
  memcpy(L.block, block, sizeof L.block);
  L.nblocks = (uint64_t)grid[0] * grid[1] * grid[2];
  L.shared_bytes = shared_bytes;
  L.mode = mode & 0xff; /* bits 8..15: lanes per warp (0: 32) */
  L.warp = (mode >> 8) & 0xff ? (uint32_t)((mode >> 8) & 0xff) : 32;
  if (L.warp != 32 && L.warp != 64) {
    snprintf(message, message_len, "a warp of %u lanes is not supported (32 or 64)", L.warp);
    return 1;
  }
  L.warp_shift = L.warp == 64 ? 6 : 5;
  amd_dispatch_fill(&L);
  L.frame_bytes = frame_bytes < 4 ? 4 : frame_bytes;
  int n = max_workers > 0 ? max_workers : worker_count();
  if ((uint64_t)n > L.nblocks) n = (int)L.nblocks;
  if (n > MAX_WORKERS) n = MAX_WORKERS;
  /* The calling thread is worker 0; parked helper threads are the others. */
  pthread_mutex_lock(&launch_lock);
  int armed = arm_watchdog(&L);
  int helpers_used = wake_helpers(&L, n - 1);
  mn_worker *self = acquire_worker();
  if (self) {
    self->launch = &L;
    worker_main(self);
    release_worker(self);
  }
  wait_helpers();
  if (armed) disarm_watchdog();
  pthread_mutex_unlock(&launch_lock);
  if (!self && helpers_used == 0 && L.nblocks > 0) {
    snprintf(message, message_len, "out of memory for a worker");
    return 1;
  }
  if (L.failed) {
    snprintf(message, message_len, "%s", L.message);
    return 1;
  }
  return 0;
}

/* ---- called by kernel code -------------------------------------------------------------- */
API mn_ctx *__mneme_ctx(void) { return tls_ctx; }

static mn_worker *sync_worker(const char *what) {
  mn_worker *w = tls_worker;
  if (w->launch->mode != MODE_FIBERS) {
    fail_launch(w, "internal error: %s reached in a kernel compiled without fibers", what);
    leave_kernel(w);
  }
  return w;
}

API void __mneme_barrier(void) { switch_out(sync_worker("a barrier"), F_BLOCK_WAIT); }

/* __syncthreads_count (op 0), _and (op 1), _or (op 2) */
API int32_t __mneme_barrier_red(int32_t op, int32_t pred) {
  mn_worker *w = sync_worker("a barrier");
  w->red_count += pred != 0;
  switch_out(w, F_BLOCK_WAIT);
  if (op == 0) return w->red_result;
  if (op == 1) return w->red_result == w->red_arrived;
  return w->red_result != 0;
}

API void __mneme_warp_sync(uint32_t mask) {
  (void)mask;
  switch_out(sync_worker("__syncwarp"), F_WARP_WAIT);
}

/* The lanes' slots for this exchange. Consecutive exchanges alternate between two banks, so a
   lane can write its next value before slower lanes have read the previous one: one switch per
   exchange instead of two. */
static uint64_t *exchange_slots(mn_worker *w, mn_ctx *c) {
  size_t bank = c->exchanges++ & 1;
  uint32_t W = w->launch->warp;
  return w->slots + (bank * ((w->capacity + W - 1) / W) + c->warpid) * W;
}

static uint32_t warp_width(mn_worker *w, mn_ctx *c) {
  uint32_t W = w->launch->warp;
  int rest = w->nthreads - (int)(c->warpid * W);
  return rest >= (int)W ? W : (uint32_t)rest;
}

/* The lane a shfl.sync reads (mode 0 idx, 1 up, 2 down, 3 bfly; c packs clamp and segment
 * mask as PTX does) and whether the source lane is in range; out of range reads its own lane. */
static inline uint32_t shfl_source(uint32_t mode, uint32_t b, uint32_t c, uint32_t lane, uint32_t width,
                                   int *pred) {
  uint32_t clamp = c & 31, segmask = (c >> 8) & 31;
  uint32_t max_lane = (lane & segmask) | (clamp & ~segmask), min_lane = lane & segmask;
  uint32_t j;
  switch (mode) {
    case 1: j = lane - b; *pred = (int32_t)j >= (int32_t)max_lane; break;
    case 2: j = lane + b; *pred = j <= max_lane; break;
    case 3: j = lane ^ b; *pred = j <= max_lane; break;
    default: j = min_lane | (b & ~segmask); *pred = j <= max_lane; break;
  }
  return (!*pred || j >= width) ? lane : j;
}

/* shfl.sync: mode 0 idx, 1 up, 2 down, 3 bfly. Returns the value, and the predicate in bit 32. */
API uint64_t __mneme_shfl(uint32_t mode, uint32_t mask, uint32_t value, uint32_t b, uint32_t c) {
  (void)mask;
  mn_worker *w = sync_worker("a warp shuffle");
  mn_ctx *x = tls_ctx;
  uint64_t *slots = exchange_slots(w, x);
  uint32_t lane = x->laneid;
  slots[lane] = value;
  switch_out(w, F_WARP_WAIT);
  int pred;
  uint32_t j = shfl_source(mode, b, c, lane, warp_width(w, x), &pred);
  uint32_t result = (uint32_t)slots[j];
  return (uint64_t)result | ((uint64_t)(pred != 0) << 32);
}

/* The outcome of a vote over the predicates in `slots` of the lanes in `mask`:
 * mode 0 all, 1 any, 2 uni, 3 ballot. */
static uint32_t vote_of(uint64_t *slots, uint32_t width, uint32_t mode, uint32_t mask) {
  uint32_t ballot = 0, members = 0;
  for (uint32_t l = 0; l < width; l++) {
    if (!(mask >> l & 1)) continue;
    members |= 1u << l;
    if (slots[l]) ballot |= 1u << l;
  }
  switch (mode) {
    case 0: return ballot == members;
    case 1: return ballot != 0;
    case 2: return ballot == 0 || ballot == members;
    default: return ballot;
  }
}

/* vote.sync: mode 0 all, 1 any, 2 uni, 3 ballot */
API uint32_t __mneme_vote(uint32_t mode, uint32_t mask, uint32_t pred) {
  mn_worker *w = sync_worker("a warp vote");
  mn_ctx *x = tls_ctx;
  uint64_t *slots = exchange_slots(w, x);
  slots[x->laneid] = pred != 0;
  switch_out(w, F_WARP_WAIT);
  return vote_of(slots, warp_width(w, x), mode, mask);
}

/* Step form of a shuffle: each lane puts its value before the warp point, gets after it. */
API void __mneme_exchange_put(uint32_t value) {
  mn_ctx *x = tls_ctx;
  size_t bank = x->exchanges & 1;
  uint32_t W = tls_worker->launch->warp;
  tls_worker->slots[(bank * ((tls_worker->capacity + W - 1) / W) + x->warpid) * W + x->laneid] = value;
}

API uint64_t __mneme_exchange_get(uint32_t mode, uint32_t b, uint32_t c) {
  mn_worker *w = tls_worker;
  mn_ctx *x = tls_ctx;
  uint64_t *slots = exchange_slots(w, x);
  uint32_t lane = x->laneid;
  int pred;
  uint32_t j = shfl_source(mode, b, c, lane, warp_width(w, x), &pred);
  return (uint64_t)(uint32_t)slots[j] | ((uint64_t)(pred != 0) << 32);
}

/* Step form of a vote: the predicates were put before the warp point. */
API uint32_t __mneme_vote_get(uint32_t mode, uint32_t mask) {
  mn_worker *w = tls_worker;
  mn_ctx *x = tls_ctx;
  return vote_of(exchange_slots(w, x), warp_width(w, x), mode, mask);
}

/* Step form of __syncthreads_count/_and/_or: put before the barrier, get after it. */
API void __mneme_block_put(int32_t pred) { tls_worker->red_count += pred != 0; }

API int32_t __mneme_block_get(int32_t op) {
  mn_worker *w = tls_worker;
  if (op == 0) return w->red_result;
  if (op == 1) return w->red_result == w->red_arrived;
  return w->red_result != 0;
}

/* AMDGPU cross-lane reads (ds_bpermute, ds_swizzle, readlane): every lane puts its value, the
   wave meets, each lane reads lane `src` (a lane past the wave's end reads 0). */
API uint32_t __mneme_wave_read(uint32_t value, uint32_t src) {
  mn_worker *w = sync_worker("a cross-lane read");
  mn_ctx *x = tls_ctx;
  uint64_t *slots = exchange_slots(w, x);
  slots[x->laneid] = value;
  switch_out(w, F_WARP_WAIT);
  return src < warp_width(w, x) ? (uint32_t)slots[src] : 0u;
}

/* AMDGPU ballot over the whole wave (64 lanes on gfx9): bit l set when lane l's predicate is. */
API uint64_t __mneme_wave_ballot(uint32_t pred) {
  mn_worker *w = sync_worker("a wave ballot");
  mn_ctx *x = tls_ctx;
  uint64_t *slots = exchange_slots(w, x);
  slots[x->laneid] = pred != 0;
  switch_out(w, F_WARP_WAIT);
  uint64_t ballot = 0;
  uint32_t width = warp_width(w, x);
  for (uint32_t l = 0; l < width; l++)
    if (slots[l]) ballot |= (uint64_t)1 << l;
  return ballot;
}

API const uint8_t *__mneme_amd_dispatch(void) { return tls_worker->launch->amd_packet; }
API const uint8_t *__mneme_amd_implicitarg(void) { return tls_worker->launch->amd_implicit; }

API uint32_t __mneme_activemask(void) {
  mn_worker *w = tls_worker;
  uint32_t width = warp_width(w, tls_ctx);
  return width == 32 ? 0xffffffffu : (1u << width) - 1;
}

API int32_t __mneme_is_shared(const char *p) {
  mn_worker *w = tls_worker;
  return p >= w->shared && p < w->shared + w->launch->shared_bytes;
}

API uint64_t __mneme_clock64(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

API uint32_t __mneme_prmt(uint32_t a, uint32_t b, uint32_t c) {
  uint64_t bytes = ((uint64_t)b << 32) | a;
  uint32_t r = 0;
  for (int i = 0; i < 4; i++) {
    uint32_t sel = (c >> (4 * i)) & 15;
    uint32_t byte = (uint32_t)(bytes >> (8 * (sel & 7))) & 0xff;
    if (sel & 8) byte = (byte & 0x80) ? 0xff : 0;
    r |= byte << (8 * i);
  }
  return r;
}

API void __mneme_trap(void) {
  mn_worker *w = tls_worker;
  fail_launch(w, "the kernel executed a trap");
  leave_kernel(w);
}

/* CUDA's device-side assert() */
API void __assertfail(const char *msg, const char *file, uint32_t line, const char *func, size_t charsize) {
  (void)charsize;
  mn_worker *w = tls_worker;
  fail_launch(w, "%s:%u: %s: device-side assertion `%s' failed", file, line, func, msg);
  leave_kernel(w);
}

/* CUDA's device-side printf: arguments packed, each aligned to its size (doubles for floats). */
API int32_t __mneme_vprintf(const char *format, const char *args) {
  char out[4096], spec[32];
  size_t used = 0, off = 0;
  const char *p = format;
  while (*p && used < sizeof out - 1) {
    if (*p != '%') {
      out[used++] = *p++;
      continue;
    }
    if (p[1] == '%') {
      out[used++] = '%';
      p += 2;
      continue;
    }
    size_t n = 0;
    int longs = 0;
    while (p[n] && !strchr("diouxXcsfFeEgGaAp", p[n]) && n < sizeof spec - 2) {
      if (p[n] == 'l') longs++;
      n++;
    }
    if (!p[n]) break;
    char conv = p[n];
    memcpy(spec, p, n + 1);
    spec[n + 1] = 0;
    p += n + 1;
    size_t room = sizeof out - used;
    int wrote = 0;
    if (strchr("fFeEgGaA", conv)) {
      off = (off + 7) & ~(size_t)7;
      double v;
      memcpy(&v, args + off, 8);
      off += 8;
      wrote = snprintf(out + used, room, spec, v);
    } else if (conv == 's' || conv == 'p') {
      off = (off + 7) & ~(size_t)7;
      const char *v;
      memcpy(&v, args + off, 8);
      off += 8;
      wrote = snprintf(out + used, room, spec, v);
    } else if (longs) {
      off = (off + 7) & ~(size_t)7;
      long long v;
      memcpy(&v, args + off, 8);
      off += 8;
      wrote = snprintf(out + used, room, spec, v);
    } else {
      off = (off + 3) & ~(size_t)3;
      int v;
      memcpy(&v, args + off, 4);
      off += 4;
      wrote = snprintf(out + used, room, spec, v);
    }
    if (wrote > 0) used += (size_t)wrote < room ? (size_t)wrote : room - 1;
  }
  out[used] = 0;
  fputs(out, stdout);
  fflush(stdout);
  return (int32_t)used;
}
