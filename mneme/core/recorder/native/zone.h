// The placement zone: every device allocation of the application placed inside one virtual range
// reserved at a fixed base (MNEME_RECORD_VA_BASE, MNEME_RECORD_VA_SIZE), backed lazily by physical
// memory mapped at a cursor that never goes back, so a replay can rebuild the same addresses.
// Device calls go through the backend's device_ops() (device_ops.h); docs/design/recording.md.
#pragma once

#include <stdint.h>

#include <map>
#include <mutex>
#include <vector>

#include "annotations.h"
#include "capture.h"  // wait_for_shadows: an allocation that finds no memory waits for the writer
#include "config.h"
#include "device_ops.h"
#include "log.h"

namespace mneme_engine {

struct Allocation {
    size_t size;     // as asked
    size_t mapped;   // rounded to the granularity
    uint64_t handle; // the backend's physical allocation
};

// Process-lifetime objects are never destroyed: the exit-time writer and late frees from other
// threads may still use them after static destructors have run (mu(), the recording lock: exclusive.h).

struct Placement {
    bool tried = false, ok = false;
    int device = 0;
    size_t granularity = 0;
    uint64_t cursor = 0;
    std::map<uint64_t, Allocation> live;
};

inline Placement &placement() {
    static auto *p = new Placement();
    return *p;
}

// Reserve the range once (mu() held); false: allocations are not placed.
inline bool reserve_range() {
    Placement &p = placement();
    if (p.tried) return p.ok;
    p.tried = true;
    const Config &c = config();
    if (!c.place) return false;
    const mneme_device_ops &d = device_ops();
    if (d.current_device(&p.device) != 0) {
        warn("no current %s context at the first allocation; allocations are not placed", d.api);
        return false;
    }
    if (d.granularity(p.device, &p.granularity) != 0) return false;
    uint64_t got = 0;
    if (d.address_reserve(&got, c.va_size, c.va_base) != 0 || got != c.va_base) {
        if (got) d.address_free(got, c.va_size);
        warn("could not reserve 0x%llx bytes at 0x%llx (got 0x%llx); allocations are not placed, replay may fail",
             (unsigned long long)c.va_size, (unsigned long long)c.va_base, (unsigned long long)got);
        return false;
    }
    p.cursor = c.va_base;
    p.ok = true;
    return true;
}

// A placed allocation freed stream-ordered, released once `done` (recorded on its stream) completes.
struct DeferredFree {
    uint64_t addr;
    size_t mapped;
    uint64_t handle;
    void *done;  // the backend's event
};

inline std::vector<DeferredFree> &deferred_frees() {  // mu() held
    static auto *v = new std::vector<DeferredFree>();
    return *v;
}

// Release the deferred frees whose stream has passed them (mu() held); an event query, never a wait.
inline void reap_deferred_frees() {
    auto &pending = deferred_frees();
    if (pending.empty()) return;
    const mneme_device_ops &d = device_ops();
    size_t kept = 0;
    for (DeferredFree &f : pending) {
        if (d.event_query(f.done) == d.status_not_ready) {
            pending[kept++] = f;
            continue;
        }
        d.mem_unmap(f.addr, f.mapped);
        d.mem_release(f.handle);
        d.event_destroy(f.done);
    }
    pending.resize(kept);
}

// Map `size` bytes at the cursor (mu() held, reserve_range() true); the backend's status.
inline int zone_alloc(uint64_t *dptr, size_t size) {
    Placement &p = placement();
    const mneme_device_ops &d = device_ops();
    size_t mapped = (size + p.granularity - 1) / p.granularity * p.granularity;
    if (mapped == 0) mapped = p.granularity;
    const Config &c = config();
    if (p.cursor + mapped > c.va_base + c.va_size) return d.status_out_of_memory;
    uint64_t handle = 0;
    int r = d.mem_create(&handle, mapped, p.device);
    // Out of memory while the recorder's shadows are pending: wait for the writer, retry once.
    if (r == d.status_out_of_memory && wait_for_shadows()) r = d.mem_create(&handle, mapped, p.device);
    if (r != 0) return r;
    r = d.mem_map(p.cursor, mapped, handle);
    if (r == 0) r = d.mem_set_access(p.cursor, mapped, p.device);
    if (r != 0) {
        d.mem_release(handle);
        return r;
    }
    *dptr = p.cursor;
    p.live[p.cursor] = Allocation{size, mapped, handle};
    p.cursor += mapped;  // never reused: a recorded address names one allocation
    return 0;
}

// Free a placed allocation (mu() held, `it` in placement().live) after the device's work on it.
inline void zone_free(std::map<uint64_t, Allocation>::iterator it) {
    const mneme_device_ops &d = device_ops();
    d.synchronize();  // a free's contract: work using the memory has finished
    d.mem_unmap(it->first, it->second.mapped);
    d.mem_release(it->second.handle);
    annotations().erase(it->first);
    placement().live.erase(it);
}

// Take a placed allocation out of the live set now and release it once `done` has completed
// (mu() held): work queued before a stream-ordered free still finds it mapped.
inline void zone_free_after(std::map<uint64_t, Allocation>::iterator it, void *done) {
    deferred_frees().push_back(DeferredFree{it->first, it->second.mapped, it->second.handle, done});
    annotations().erase(it->first);
    placement().live.erase(it);
    reap_deferred_frees();
}

}  // namespace mneme_engine
