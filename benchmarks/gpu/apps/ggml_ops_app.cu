// llama.cpp's CUDA operators, driven as its backend-operations test drives them: each case builds a
// ggml graph node on the host (ggml-base), runs llama.cpp's own CUDA implementation of the operator
// (ggml-cuda's ggml_cuda_op_* entry points, from the llama-cpp-python sdist; never committed), and
// checks the result by its normalized mean squared error, as test-backend-ops does, against a
// reference: ggml-base's own dequantization for GET_ROWS of quantized rows (also counting the
// elements that differ in any bit), ggml-base's conversion for CPY to f16 (bit for bit), a
// double-precision computation elsewhere. Each case is launched three times with the same arguments
// and once more on other data, so each kernel has a repeated instance and a second one. Exit 0 when
// every case passes; one line per case on stdout.
//
// Built by benchmarks/gpu/apps/llama_build.py (`scripts/gpu-suite --prepare`) with `mneme-cc nvcc`
// for sm_90, linked with the ggml-cuda units it calls and ggml-base. ggml-cuda's host glue
// (ggml-cuda.cu, which needs cuBLAS and every unit) is not linked: the few functions the operators
// ask of it (device info, device selection, the error report, a scratch pool) are defined here.
#include "ggml.h"
#include "common.cuh"
#include "cpy.cuh"
#include "getrows.cuh"
#include "norm.cuh"
#include "rope.cuh"
#include "scale.cuh"
#include "softmax.cuh"
#include "unary.cuh"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

// ---- what ggml-cuda's operators ask of its host glue -------------------------------------------

[[noreturn]] void ggml_cuda_error(const char *stmt, const char *func, const char *file, int line, const char *msg) {
    fprintf(stderr, "ggml_ops_app: CUDA error: %s\n  in %s at %s:%d\n  %s\n", msg, func, file, line, stmt);
    exit(2);
}

int ggml_cuda_get_device() {
    int id = 0;
    CUDA_CHECK(cudaGetDevice(&id));
    return id;
}

void ggml_cuda_set_device(int device) {
    if (ggml_cuda_get_device() != device) CUDA_CHECK(cudaSetDevice(device));
}

const ggml_cuda_device_info &ggml_cuda_info() {
    static ggml_cuda_device_info info = [] {
        ggml_cuda_device_info i = {};
        CUDA_CHECK(cudaGetDeviceCount(&i.device_count));
        if (i.device_count > GGML_CUDA_MAX_DEVICES) i.device_count = GGML_CUDA_MAX_DEVICES;
        i.physical_device_count = i.device_count;
        for (int id = 0; id < i.device_count; ++id) {
            cudaDeviceProp prop;
            CUDA_CHECK(cudaGetDeviceProperties(&prop, id));
            auto &d = i.devices[id];
            d.cc = 100 * prop.major + 10 * prop.minor;  // an NVIDIA device's compute capability, as ggml numbers it
            d.nsm = prop.multiProcessorCount;
            d.smpb = prop.sharedMemPerBlock;
            d.smpbo = prop.sharedMemPerBlockOptin;
            d.warp_size = prop.warpSize;
            d.total_vram = prop.totalGlobalMem;
            d.physical_device = id;
            d.physical_share_count = 1;
            d.supports_cooperative_launch = prop.cooperativeLaunch != 0;
        }
        return i;
    }();
    return info;
}

// The context's scratch pool: plain device allocations (ggml-cuda.cu's pool keeps them for reuse; a
// test that allocates a few buffers needs no more).
struct DevicePool : ggml_cuda_pool {
    int device;
    explicit DevicePool(int id) : device(id) {}
    void *alloc(size_t size, size_t *actual_size) override {
        ggml_cuda_set_device(device);
        void *ptr = nullptr;
        CUDA_CHECK(cudaMalloc(&ptr, size));
        *actual_size = size;
        return ptr;
    }
    void free(void *ptr, size_t) override { CUDA_CHECK(cudaFree(ptr)); }
};

std::unique_ptr<ggml_cuda_pool> ggml_backend_cuda_context::new_pool_for_device(int device, int) {
    return std::unique_ptr<ggml_cuda_pool>(new DevicePool(device));
}

// ---- cases ---------------------------------------------------------------------------------------

static uint64_t rng_state = 0x2545F4914F6CDD1DULL;

static float uniform() {  // in [-1, 1)
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((rng_state >> 40) & 0xffffff) / (float)0x800000 - 1.0f;
}

static std::vector<float> random_floats(size_t n, float scale) {
    std::vector<float> v(n);
    for (auto &x : v) x = scale * uniform();
    return v;
}

// One device copy of a tensor's data; the tensor points at it.
struct DeviceTensor {
    ggml_tensor *t;
    void *d = nullptr;
    DeviceTensor(ggml_tensor *tensor, const void *host) : t(tensor) {
        CUDA_CHECK(cudaMalloc(&d, ggml_nbytes(t)));
        if (host) CUDA_CHECK(cudaMemcpy(d, host, ggml_nbytes(t), cudaMemcpyHostToDevice));
        t->data = d;
    }
    ~DeviceTensor() { cudaFree(d); }
    std::vector<float> read() const {
        std::vector<float> out(ggml_nelements(t));
        CUDA_CHECK(cudaMemcpy(out.data(), d, ggml_nbytes(t), cudaMemcpyDeviceToHost));
        return out;
    }
    std::vector<uint8_t> read_bytes() const {
        std::vector<uint8_t> out(ggml_nbytes(t));
        CUDA_CHECK(cudaMemcpy(out.data(), d, out.size(), cudaMemcpyDeviceToHost));
        return out;
    }
};

// A tensor of a case's inputs and its host data.
struct HostTensor {
    ggml_tensor *t;
    std::vector<uint8_t> bytes;
};

static HostTensor host_f32(ggml_tensor *t, float scale) {
    std::vector<float> v = random_floats(ggml_nelements(t), scale);
    HostTensor h{t, std::vector<uint8_t>(ggml_nbytes(t))};
    memcpy(h.bytes.data(), v.data(), h.bytes.size());
    return h;
}

static const float *as_f32(const HostTensor &h) { return reinterpret_cast<const float *>(h.bytes.data()); }

static double nmse(const std::vector<float> &got, const std::vector<double> &want) {
    double err = 0, ref = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        if (!std::isfinite(got[i])) return INFINITY;
        err += (got[i] - want[i]) * (got[i] - want[i]);
        ref += want[i] * want[i];
    }
    return ref > 0 ? err / ref : err;
}

static int failures = 0;

static void report(const std::string &name, bool ok, const char *what, double value) {
    printf("%-40s %s (%s %.3g)\n", name.c_str(), ok ? "OK" : "FAIL", what, value);
    failures += !ok;
}

using Op = std::function<ggml_tensor *(ggml_context *, ggml_tensor *)>;
using Run = std::function<void(ggml_backend_cuda_context &, ggml_tensor *)>;
using Reference = std::function<void(const std::vector<float> &, int64_t, int64_t, std::vector<double> &)>;

// A row-wise f32 operator on [cols x rows]: 3 launches on one input, 1 on another, each checked.
static void row_case(ggml_backend_cuda_context &ctx, const std::string &name, int64_t cols, int64_t rows, Op op,
                     Run run, Reference ref, double max_nmse) {
    for (int input = 0; input < 2; ++input) {
        ggml_init_params params = {16 * ggml_tensor_overhead(), nullptr, true};
        ggml_context *g = ggml_init(params);
        ggml_tensor *a = ggml_new_tensor_2d(g, GGML_TYPE_F32, cols, rows);
        ggml_tensor *out = op(g, a);
        std::vector<float> x = random_floats(cols * rows, input ? 4.0f : 1.0f);
        std::vector<double> want(x.size());
        ref(x, cols, rows, want);
        DeviceTensor da(a, x.data()), dout(out, nullptr);
        double worst = 0;
        for (int rep = 0; rep < (input ? 1 : 3); ++rep) {
            CUDA_CHECK(cudaMemset(dout.d, 0xff, ggml_nbytes(out)));  // poisoned: an unwritten element fails
            // The copies and the memset ran on the legacy stream, which the context's non-blocking stream
            // does not wait for.
            CUDA_CHECK(cudaDeviceSynchronize());
            run(ctx, out);
            CUDA_CHECK(cudaGetLastError());
            CUDA_CHECK(cudaStreamSynchronize(ctx.stream()));
            worst = std::fmax(worst, nmse(dout.read(), want));
        }
        report(name + (input ? " (second input)" : ""), worst <= max_nmse, "nmse", worst);
        ggml_free(g);
    }
}

// GET_ROWS of `type` rows (quantized on the host by ggml-base) into f32, against ggml-base's
// own dequantization of the same rows.
static void get_rows_case(ggml_backend_cuda_context &ctx, ggml_type type, int64_t cols, int64_t rows, int64_t picks) {
    for (int input = 0; input < 2; ++input) {
        ggml_init_params params = {16 * ggml_tensor_overhead(), nullptr, true};
        ggml_context *g = ggml_init(params);
        ggml_tensor *a = ggml_new_tensor_2d(g, type, cols, rows);
        ggml_tensor *idx = ggml_new_tensor_1d(g, GGML_TYPE_I32, picks);
        ggml_tensor *out = ggml_get_rows(g, a, idx);
        std::vector<float> x = random_floats(cols * rows, input ? 3.0f : 1.0f);
        std::vector<uint8_t> q(ggml_nbytes(a));
        if (type == GGML_TYPE_F32)
            memcpy(q.data(), x.data(), q.size());
        else
            ggml_quantize_chunk(type, x.data(), q.data(), 0, rows, cols, nullptr);
        std::vector<int32_t> pick(picks);
        for (int64_t i = 0; i < picks; ++i) pick[i] = (int32_t)((i * 37 + 11 * input) % rows);
        std::vector<float> want(cols * picks);
        const ggml_type_traits *traits = ggml_get_type_traits(type);
        for (int64_t i = 0; i < picks; ++i) {
            const uint8_t *row = q.data() + pick[i] * a->nb[1];
            if (type == GGML_TYPE_F32)
                memcpy(want.data() + i * cols, row, cols * sizeof(float));
            else
                traits->to_float(row, want.data() + i * cols, cols);
        }
        DeviceTensor da(a, q.data()), di(idx, pick.data()), dout(out, nullptr);
        size_t differ = 0;
        double worst = 0;
        for (int rep = 0; rep < (input ? 1 : 3); ++rep) {
            CUDA_CHECK(cudaMemset(dout.d, 0xff, ggml_nbytes(out)));
            CUDA_CHECK(cudaDeviceSynchronize());  // as in row_case
            ggml_cuda_op_get_rows(ctx, out);
            CUDA_CHECK(cudaGetLastError());
            CUDA_CHECK(cudaStreamSynchronize(ctx.stream()));
            std::vector<float> got = dout.read();
            for (size_t i = 0; i < got.size(); ++i) differ += memcmp(&got[i], &want[i], sizeof(float)) != 0;
            worst = std::fmax(worst, nmse(got, std::vector<double>(want.begin(), want.end())));
        }
        // Bit for bit where the dequantization is one rounding (f16, q4_0, q8_0); a K-quant's scale times
        // quant minus offset may be fused into one multiply-add by nvcc, so within rounding (nmse).
        report(std::string("get_rows ") + ggml_type_name(type) + (input ? " (second input)" : "") + " (" +
                   std::to_string(differ) + " elements not bit for bit)",
               worst <= 1e-12, "nmse", worst);
        ggml_free(g);
    }
}

using Build = std::function<ggml_tensor *(ggml_context *, std::vector<HostTensor> &, int input)>;
using Error = std::function<double(const std::vector<HostTensor> &, const std::vector<uint8_t> &)>;

// Any operator: `build` makes its node and the host data of its inputs (for input 0 and 1), `run` is the
// CUDA operator, `error` measures its output against a reference (at most `max_error`, named `what`).
static void op_case(ggml_backend_cuda_context &ctx, const std::string &name, Build build, Run run, Error error,
                    double max_error, const char *what) {
    for (int input = 0; input < 2; ++input) {
        ggml_init_params params = {32 * ggml_tensor_overhead(), nullptr, true};
        ggml_context *g = ggml_init(params);
        std::vector<HostTensor> in;
        ggml_tensor *out = build(g, in, input);
        std::vector<std::unique_ptr<DeviceTensor>> on_device;
        for (HostTensor &h : in) on_device.emplace_back(new DeviceTensor(h.t, h.bytes.data()));
        DeviceTensor dout(out, nullptr);
        double worst = 0;
        for (int rep = 0; rep < (input ? 1 : 3); ++rep) {
            CUDA_CHECK(cudaMemset(dout.d, 0xff, ggml_nbytes(out)));
            CUDA_CHECK(cudaDeviceSynchronize());  // as in row_case
            run(ctx, out);
            CUDA_CHECK(cudaGetLastError());
            CUDA_CHECK(cudaStreamSynchronize(ctx.stream()));
            worst = std::fmax(worst, error(in, dout.read_bytes()));
        }
        report(name + (input ? " (second input)" : ""), worst <= max_error, what, worst);
        ggml_free(g);
    }
}

static Reference softmax_reference(double scale) {
    return [scale](const std::vector<float> &x, int64_t n, int64_t m, std::vector<double> &y) {
        for (int64_t r = 0; r < m; ++r) {
            double top = -INFINITY, sum = 0;
            for (int64_t i = 0; i < n; ++i) top = std::fmax(top, scale * x[r * n + i]);
            for (int64_t i = 0; i < n; ++i) sum += y[r * n + i] = std::exp(scale * x[r * n + i] - top);
            for (int64_t i = 0; i < n; ++i) y[r * n + i] /= sum;
        }
    };
}

int main() {
    ggml_cuda_set_device(0);
    // Never destroyed: its destructor is ggml-cuda.cu's (not linked); the process's exit frees its stream.
    ggml_backend_cuda_context &ctx = *new ggml_backend_cuda_context(0);
    const int64_t cols = 4096, rows = 512;

    row_case(ctx, "norm", cols, rows, [](ggml_context *g, ggml_tensor *a) { return ggml_norm(g, a, 1e-5f); },
             ggml_cuda_op_norm,
             [](const std::vector<float> &x, int64_t n, int64_t m, std::vector<double> &y) {
                 for (int64_t r = 0; r < m; ++r) {
                     double mean = 0, var = 0;
                     for (int64_t i = 0; i < n; ++i) mean += x[r * n + i];
                     mean /= n;
                     for (int64_t i = 0; i < n; ++i) var += (x[r * n + i] - mean) * (x[r * n + i] - mean);
                     var /= n;
                     for (int64_t i = 0; i < n; ++i) y[r * n + i] = (x[r * n + i] - mean) / std::sqrt(var + 1e-5);
                 }
             },
             1e-7);
    row_case(ctx, "rms_norm", cols, rows, [](ggml_context *g, ggml_tensor *a) { return ggml_rms_norm(g, a, 1e-6f); },
             ggml_cuda_op_rms_norm,
             [](const std::vector<float> &x, int64_t n, int64_t m, std::vector<double> &y) {
                 for (int64_t r = 0; r < m; ++r) {
                     double sum = 0;
                     for (int64_t i = 0; i < n; ++i) sum += (double)x[r * n + i] * x[r * n + i];
                     double scale = 1.0 / std::sqrt(sum / n + 1e-6);
                     for (int64_t i = 0; i < n; ++i) y[r * n + i] = x[r * n + i] * scale;
                 }
             },
             1e-7);
    row_case(ctx, "soft_max", 1000, 256,
             [](ggml_context *g, ggml_tensor *a) { return ggml_soft_max_ext(g, a, nullptr, 0.125f, 0.0f); },
             ggml_cuda_op_soft_max, softmax_reference(0.125), 1e-7);
    // Rows too long for one block's shared memory: ggml-cuda spreads each over every multiprocessor with a
    // cooperative launch (cudaLaunchCooperativeKernel), where the device supports it.
    row_case(ctx, "soft_max (rows across the GPU)", 131072, 4,
             [](ggml_context *g, ggml_tensor *a) { return ggml_soft_max_ext(g, a, nullptr, 1.0f, 0.0f); },
             ggml_cuda_op_soft_max, softmax_reference(1.0), 1e-7);
    row_case(ctx, "scale", cols, rows, [](ggml_context *g, ggml_tensor *a) { return ggml_scale(g, a, 0.5f); },
             ggml_cuda_op_scale,
             [](const std::vector<float> &x, int64_t, int64_t, std::vector<double> &y) {
                 for (size_t i = 0; i < x.size(); ++i) y[i] = 0.5 * x[i];
             },
             0.0);
    row_case(ctx, "silu", cols, rows, [](ggml_context *g, ggml_tensor *a) { return ggml_silu(g, a); },
             ggml_cuda_op_silu,
             [](const std::vector<float> &x, int64_t, int64_t, std::vector<double> &y) {
                 for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] / (1.0 + std::exp(-(double)x[i]));
             },
             1e-7);
    row_case(ctx, "gelu", cols, rows, [](ggml_context *g, ggml_tensor *a) { return ggml_gelu(g, a); },
             ggml_cuda_op_gelu,
             [](const std::vector<float> &x, int64_t, int64_t, std::vector<double> &y) {
                 // ggml's GELU: the tanh approximation, whose tanhf nvcc's fast math makes an approximate
                 // instruction (relative error about 1e-3), hence the looser bound
                 const double k = std::sqrt(2.0 / M_PI);
                 for (size_t i = 0; i < x.size(); ++i) {
                     double v = x[i];
                     y[i] = 0.5 * v * (1.0 + std::tanh(k * (v + 0.044715 * v * v * v)));
                 }
             },
             1e-5);
    for (ggml_type type : {GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_Q4_0, GGML_TYPE_Q8_0, GGML_TYPE_Q4_K})
        get_rows_case(ctx, type, cols, 256, 64);

    // CPY of f32 into f16 (as a KV cache is written): bit for bit against ggml-base's conversion.
    op_case(
        ctx, "cpy f32 -> f16",
        [](ggml_context *g, std::vector<HostTensor> &in, int input) {
            in.push_back(host_f32(ggml_new_tensor_2d(g, GGML_TYPE_F32, 4096, 512), input ? 100.0f : 1.0f));
            return ggml_cpy(g, in[0].t, ggml_new_tensor_2d(g, GGML_TYPE_F16, 4096, 512));
        },
        [](ggml_backend_cuda_context &c, ggml_tensor *out) {
            out->src[1]->data = out->data;  // the node is a view of its destination
            ggml_cuda_cpy(c, out->src[0], out->src[1]);
        },
        [](const std::vector<HostTensor> &in, const std::vector<uint8_t> &out) {
            std::vector<ggml_fp16_t> want(out.size() / sizeof(ggml_fp16_t));
            ggml_fp32_to_fp16_row(as_f32(in[0]), want.data(), (int64_t)want.size());
            double differ = 0;
            for (size_t i = 0; i < want.size(); ++i) differ += memcmp(&want[i], out.data() + 2 * i, 2) != 0;
            return differ;
        },
        0.0, "elements differing");

    // ROPE (normal mode) of [head dim 128, 32 heads, 64 tokens] at the tokens' positions.
    op_case(
        ctx, "rope",
        [](ggml_context *g, std::vector<HostTensor> &in, int input) {
            in.push_back(host_f32(ggml_new_tensor_3d(g, GGML_TYPE_F32, 128, 32, 64), 1.0f));
            HostTensor pos{ggml_new_tensor_1d(g, GGML_TYPE_I32, 64), std::vector<uint8_t>(64 * sizeof(int32_t))};
            for (int32_t t = 0; t < 64; ++t) reinterpret_cast<int32_t *>(pos.bytes.data())[t] = t + 100 * input;
            in.push_back(pos);
            return ggml_rope(g, in[0].t, in[1].t, 128, GGML_ROPE_TYPE_NORMAL);
        },
        ggml_cuda_op_rope,
        [](const std::vector<HostTensor> &in, const std::vector<uint8_t> &out) {
            const float *x = as_f32(in[0]);
            const int32_t *pos = reinterpret_cast<const int32_t *>(in[1].bytes.data());
            std::vector<float> y(out.size() / sizeof(float));
            memcpy(y.data(), out.data(), out.size());
            std::vector<double> want(y.size());
            for (int64_t t = 0; t < 64; ++t)
                for (int64_t h = 0; h < 32; ++h)
                    for (int64_t i = 0; i < 128; i += 2) {
                        const int64_t at = (t * 32 + h) * 128 + i;
                        const double theta = pos[t] * std::pow(10000.0, -(double)i / 128);
                        want[at] = x[at] * std::cos(theta) - x[at + 1] * std::sin(theta);
                        want[at + 1] = x[at] * std::sin(theta) + x[at + 1] * std::cos(theta);
                    }
            return nmse(y, want);
        },
        1e-7, "nmse");

    printf("%s: %d failure(s)\n", failures ? "FAILED" : "passed", failures);
    return failures ? 1 : 0;
}
