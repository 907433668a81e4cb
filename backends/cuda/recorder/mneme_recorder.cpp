// Mneme's CUDA recorder: injected with LD_PRELOAD into an unmodified application.
//
// One translation unit, read as files of one idea each (parts/*.h, included in order below): every
// part shares the process-lifetime state, and the anonymous namespace keeps all of it internal (the
// parts are named .h so that every C++ tool reads them, but they are pieces of this unit, included
// nowhere else). The vendor-neutral engine (configuration, messages, files, JSON, intervals, the
// placement zone, the capture writer, which reach the device through parts/device_ops.h, and the
// record of a launch) comes from the core's
// mneme/core/recorder/native, the snapshot writer from mneme/core/snapshot/native (docs/design/native.md).
//
// How it gets in (docs/design/recording.md, backends/cuda/recorder/README.md):
//  * cudart (static or shared) finds the driver through dlopen("libcuda.so.1") and
//    dlsym(h, "cuGetProcAddress_v2"), then asks cuGetProcAddress for every entry point. We
//    interpose dlsym and hand out a cuGetProcAddress wrapper, which in turn hands out
//    wrappers for allocation, free, module loading, symbol lookup and launch entry points.
//  * Programs that link libcuda directly (cuda-python, Triton's launcher) call the plain
//    symbols, which this library also defines.
// What it does:
//  * Places every cuMemAlloc allocation inside one virtual range it reserves at a fixed base
//    (MNEME_RECORD_VA_BASE, default 0x153940000000; 1 TiB), backed lazily with cuMemCreate +
//    cuMemMap, so replay can rebuild the same addresses; pitched and stream-ordered allocations
//    too (cuMemFreeAsync releases once its stream has passed it), and the application's own VMM
//    reservations get hints in a zone above that range, their accessible mappings recorded.
//  * Times each recorded launch and the next MNEME_RECORD_TIMED launches of the same instance,
//    each alone on the device (the work already queued drains first; other threads' launches wait
//    until it ends; MNEME_RECORD_TIMING_EXCLUSIVE=0: not): by the GPU's own kernel timestamps
//    (CUPTI activity records, libcupti opened at run time: MNEME_RECORD_TIMER=auto|cupti|events,
//    MNEME_CUPTI_LIB), else with events on the application's stream, behind a gate that holds the
//    stream until both events and the kernel are queued. MNEME_RECORD_RETIME=1: the recorded launch
//    runs and is timed once more from its restored prologue, then its epilogue is restored (parts/retime.h).
//  * Records kernel nodes of CUDA graphs: a graph launch that holds one still to record runs node by
//    node on its stream, the kernels through the launch path above (parts/graphs.h, graph_updates.h,
//    graph_launch.h).
//  * Remembers each loaded code image (fatbin, cubin, PTX) and the device globals the process
//    looked up (cuModuleGetGlobal / cuLibraryGetGlobal), per module.
//  * For each selected launch (MNEME_RECORD_KERNEL regex, MNEME_RECORD_SKIP,
//    MNEME_RECORD_MAX distinct instances per kernel): copies the argument bytes, synchronizes,
//    dumps every live allocation and the module's globals (prologue), launches, synchronizes,
//    dumps them again (epilogue), and writes launch-<pid>-<n>/ {manifest.json, prologue.bin,
//    epilogue.bin} atomically (temp folder, rename); the module's image goes to images/ once,
//    /proc/self/maps to maps-<pid>.txt once. `mneme record` turns these into snapshots and
//    databases.
//  * Keeps the verification policies the application declared with mneme_annotate()
//    (include/mneme_annotate.h, mneme.annotate) per allocation and writes them into each
//    manifest ("policies"), which finalize turns into the regions' RegionPolicy.
// It never changes the application's results: any failure of its own disables recording with
// one message on stderr and lets the application run on.

#include <cuda.h>
#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <new>
#include <regex>
#include <set>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

#define MNEME_DEVICE_TIMER "cupti"  // MNEME_RECORD_TIMER=cupti: CUPTI's kernel records
#include "engine.h"           // mneme/core/recorder/native: the vendor-neutral engine
#include "snapshot_writer.h"  // mneme/core/snapshot/native: the snapshot format's writer
#ifdef MNEME_CUPTI
#include "cupti_timer.h"  // mneme_cuda/native/: the replay's kernel timer is the same code
#endif

using namespace mneme_engine;

namespace {

#include "parts/driver.h"
#include "parts/device_ops.h"

}  // namespace

// The engine's device operations (zone.h, capture.h) are the driver's.
const mneme_device_ops &mneme_engine::device_ops() { return cuda_ops(); }

namespace {

#include "parts/placement.h"
#include "parts/modules.h"
#include "parts/timer_park.h"
#include "parts/launches.h"
#include "parts/retime.h"
#include "parts/record.h"
#include "parts/wrappers.h"
#include "parts/stream_capture.h"
#include "parts/teardown.h"
#include "parts/memory.h"
#include "parts/graphs.h"
#include "parts/graph_updates.h"
#include "parts/graph_launch.h"
#include "parts/hooks.h"

}  // namespace

#include "parts/exports.h"
