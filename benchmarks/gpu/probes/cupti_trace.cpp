// Probe tool (issue 7 fidelity): a CUPTI injection library that writes every kernel's activity
// record to MNEME_CUPTI_TRACE_DIR/kernels-<pid>.tsv, so the same kernel's execution time as the
// GPU saw it (start to end of the kernel, without the front end's work between an event and the
// launch) and the hardware channel it ran on can be set beside the event-timed figures of the
// recorder and of the replay.
//
//   g++ -O2 -shared -fPIC -I/usr/local/cuda/include cupti_trace.cpp -L<cupti dir> -lcupti -o libmneme_cupti_trace.so
//   CUDA_INJECTION64_PATH=.../libmneme_cupti_trace.so MNEME_CUPTI_TRACE_DIR=dir <program>
//
// Columns: name grid_x block_x stream channel channel_type correlation start_ns end_ns
// queued_ns submitted_ns. Buffers are written as they complete (every 50 ms and at exit), so a
// process that ends with _exit keeps all but its last 50 ms.
#include <cupti.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>

namespace {

constexpr size_t kBuffer = 8u << 20;
std::mutex out_mu;
FILE *out = nullptr;

void CUPTIAPI requested(uint8_t **buffer, size_t *size, size_t *max_records) {
    *buffer = static_cast<uint8_t *>(aligned_alloc(8, kBuffer));
    *size = *buffer ? kBuffer : 0;
    *max_records = 0;
}

void CUPTIAPI completed(CUcontext, uint32_t, uint8_t *buffer, size_t, size_t valid) {
    std::lock_guard<std::mutex> lock(out_mu);
    CUpti_Activity *record = nullptr;
    while (out && cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
        if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && record->kind != CUPTI_ACTIVITY_KIND_KERNEL)
            continue;
        const auto *k = reinterpret_cast<const CUpti_ActivityKernel10 *>(record);
        fprintf(out, "%s\t%d\t%d\t%u\t%u\t%d\t%u\t%llu\t%llu\t%llu\t%llu\n", k->name ? k->name : "?", k->gridX,
                k->blockX, k->streamId, k->channelID, static_cast<int>(k->channelType), k->correlationId,
                static_cast<unsigned long long>(k->start), static_cast<unsigned long long>(k->end),
                static_cast<unsigned long long>(k->queued), static_cast<unsigned long long>(k->submitted));
    }
    if (out) fflush(out);
    free(buffer);
}

void finish() {
    cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    std::lock_guard<std::mutex> lock(out_mu);
    if (out) fclose(out);
    out = nullptr;
}

}  // namespace

extern "C" int InitializeInjection(void) {
    const char *dir = getenv("MNEME_CUPTI_TRACE_DIR");
    if (!dir) return 1;
    char path[4096];
    snprintf(path, sizeof path, "%s/kernels-%d.tsv", dir, static_cast<int>(getpid()));
    out = fopen(path, "w");
    if (!out) {
        fprintf(stderr, "cupti_trace: cannot write %s\n", path);
        return 1;
    }
    if (cuptiActivityRegisterCallbacks(requested, completed) != CUPTI_SUCCESS ||
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) {
        fprintf(stderr, "cupti_trace: CUPTI activity could not be enabled\n");
        return 1;
    }
    cuptiActivityEnableLatencyTimestamps(1);
    cuptiActivityFlushPeriod(50);
    atexit(finish);
    return 1;
}
