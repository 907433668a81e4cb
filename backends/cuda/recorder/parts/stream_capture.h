// ---- stream capture in progress ----------------------------------------------------------------------
// While a stream is being captured into a graph, synchronizing the context is an error that
// invalidates the capture (in cudaStreamCaptureModeGlobal, from any thread), so a recorded launch,
// whose prologue synchronizes, would break the application's capture. The recorder notes the
// captures in progress (cuStreamBeginCapture, cuStreamBeginCaptureToGraph, until cuStreamEndCapture)
// and records nothing while one is: a selected launch on another stream then is counted with why,
// and a graph launch goes to the driver (its nodes are recorded at a later launch).

using begin_capture_t = CUresult (*)(CUstream, CUstreamCaptureMode);
using begin_capture_to_graph_t = CUresult (*)(CUstream, CUgraph, const CUgraphNode *, const CUgraphEdgeData *, size_t,
                                              CUstreamCaptureMode);
using end_capture_t = CUresult (*)(CUstream, CUgraph *);

struct RealCapture {
    begin_capture_t begin = nullptr, begin_ptsz = nullptr;
    begin_capture_to_graph_t to_graph = nullptr, to_graph_ptsz = nullptr;
    end_capture_t end = nullptr, end_ptsz = nullptr;
};

RealCapture &real_capture() {
    static auto *r = new RealCapture();
    return *r;
}

std::mutex &captures_mu() {
    static auto *m = new std::mutex();
    return *m;
}

std::multiset<CUstream> &captures() {  // the streams being captured now (captures_mu() held)
    static auto *s = new std::multiset<CUstream>();
    return *s;
}

std::atomic<int> capturing_streams{0};

// Whether a capture is in progress. A stream noted as capturing that is not any more (its end went
// through an entry point the recorder did not see, or the stream is gone) is forgotten here, so a
// missed end never stops recording for good; the per-thread default stream, which names the calling
// thread's own, is kept until its end.
bool capture_in_progress() {
    if (capturing_streams.load(std::memory_order_acquire) == 0) return false;
    DRV(cuStreamIsCapturing);
    std::lock_guard<std::mutex> lock(captures_mu());
    for (auto it = captures().begin(); it != captures().end();) {
        CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
        bool gone = *it != CU_STREAM_PER_THREAD && p_cuStreamIsCapturing &&
                    (p_cuStreamIsCapturing(*it, &status) != CUDA_SUCCESS || status == CU_STREAM_CAPTURE_STATUS_NONE);
        it = gone ? captures().erase(it) : std::next(it);
    }
    capturing_streams.store((int)captures().size(), std::memory_order_release);
    return !captures().empty();
}

CUresult note_capture_begin(CUresult r, CUstream stream) {
    if (r != CUDA_SUCCESS || !tracking()) return r;
    std::lock_guard<std::mutex> lock(captures_mu());
    captures().insert(stream);
    capturing_streams.store((int)captures().size(), std::memory_order_release);
    return r;
}

// A capture ends whether cuStreamEndCapture succeeds or reports it invalidated.
void note_capture_end(CUstream stream) {
    if (!tracking()) return;
    std::lock_guard<std::mutex> lock(captures_mu());
    auto it = captures().find(stream);
    if (it != captures().end()) captures().erase(it);
    capturing_streams.store((int)captures().size(), std::memory_order_release);
}

CUresult w_begin_capture(CUstream s, CUstreamCaptureMode mode) {
    auto fn = resolve_real(real_capture().begin, "cuStreamBeginCapture_v2");
    return fn ? note_capture_begin(fn(s, mode), s) : CUDA_ERROR_NOT_FOUND;
}

CUresult w_begin_capture_ptsz(CUstream s, CUstreamCaptureMode mode) {
    auto fn = resolve_real(real_capture().begin_ptsz, "cuStreamBeginCapture_v2_ptsz");
    return fn ? note_capture_begin(fn(s, mode), per_thread(s)) : CUDA_ERROR_NOT_FOUND;
}

CUresult w_begin_capture_to_graph(CUstream s, CUgraph g, const CUgraphNode *deps, const CUgraphEdgeData *data,
                                  size_t n, CUstreamCaptureMode mode) {
    auto fn = resolve_real(real_capture().to_graph, "cuStreamBeginCaptureToGraph");
    return fn ? note_capture_begin(fn(s, g, deps, data, n, mode), s) : CUDA_ERROR_NOT_FOUND;
}

CUresult w_begin_capture_to_graph_ptsz(CUstream s, CUgraph g, const CUgraphNode *deps, const CUgraphEdgeData *data,
                                       size_t n, CUstreamCaptureMode mode) {
    auto fn = resolve_real(real_capture().to_graph_ptsz, "cuStreamBeginCaptureToGraph_ptsz");
    return fn ? note_capture_begin(fn(s, g, deps, data, n, mode), per_thread(s)) : CUDA_ERROR_NOT_FOUND;
}

CUresult w_end_capture(CUstream s, CUgraph *graph) {
    auto fn = resolve_real(real_capture().end, "cuStreamEndCapture");
    if (!fn) return CUDA_ERROR_NOT_FOUND;
    CUresult r = fn(s, graph);
    note_capture_end(s);
    return r;
}

CUresult w_end_capture_ptsz(CUstream s, CUgraph *graph) {
    auto fn = resolve_real(real_capture().end_ptsz, "cuStreamEndCapture_ptsz");
    if (!fn) return CUDA_ERROR_NOT_FOUND;
    CUresult r = fn(s, graph);
    note_capture_end(per_thread(s));
    return r;
}
