// Mneme's HIP recorder: injected with LD_PRELOAD into an unmodified HIP application.
//
// One translation unit: the core's vendor-neutral engine (mneme/core/recorder/native: configuration,
// the placement zone, the capture writer, the record of a launch) and snapshot writer, then the HIP API layer
// (parts/*.h, in order: pieces of this unit, included nowhere else). It defines the HIP runtime's entry points it interposes (allocation,
// code loading, launches), finds the runtime's own with dlsym(RTLD_NEXT), and gives the engine
// its device operations over the HIP runtime (parts/runtime.h). It needs no ROCm header
// (hip_abi.h declares what it uses) and links no HIP library. backends/hip/README.md.
// It never changes the application's results: a failure of its own stops recording with one
// message on stderr and lets the application run on.

#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <regex>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine.h"           // mneme/core/recorder/native
#include "hip_abi.h"
#include "snapshot_writer.h"  // mneme/core/snapshot/native

using namespace mneme_engine;

namespace {

#include "parts/runtime.h"

}  // namespace

const mneme_device_ops &mneme_engine::device_ops() { return hip_ops(); }

namespace {

#include "parts/code_objects.h"
#include "parts/record.h"

}  // namespace

#include "parts/exports.h"
