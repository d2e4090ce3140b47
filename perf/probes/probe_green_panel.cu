// Does a true split of the SMs let an LU panel run beside the trailing update's GEMM? The
// mixed LU's factor phase (perf/RESULTS.md) is about the sum of its updates (0.158 s) and its
// panels (about 0.2 s), not their maximum: cuSOLVER's getrf, a chain of small kernels, waits
// for SMs while a tensor-core GEMM holds them (a 32768 x 1536 float panel: 10 ms alone, 165 ms
// beside a GEMM), and cublasSetSmCountTarget (mixed.lu_panel_sms) only shapes the GEMM's grid.
// Here the panel runs in a green context of N SMs and the GEMM in one of the rest
// (cuDevSmResourceSplitByCount, CUDA 12.4+), and both are timed alone and together.
// A probe, not library code.
//
//   nvcc -O3 -o /tmp/probe_green_panel perf/probes/probe_green_panel.cu -lcuda -lcublas -lcusolver
//   /tmp/probe_green_panel [m [width]]        (default 32768 1536)
#include <cublas_v2.h>
#include <cuda.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cusolverDn.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK(call) do { auto e = (call); if ((int)e != 0) { \
    std::printf("%s failed: %d (line %d)\n", #call, (int)e, __LINE__); std::exit(1); } } while (0)

static double now_ms()
{
    return std::chrono::duration<double, std::milli>(
               std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Work {
    int m, w, n = 16384, gemms = 4;
    float *panel, *original, *work, *c;
    __half *a, *b;
    int *ipiv, *info;
    cusolverDnHandle_t solver;
    cublasHandle_t blas;
    Work(int m_, int w_) : m(m_), w(w_)
    {
        std::vector<float> host((size_t)m * w);
        unsigned s = 12345;
        for (auto& v : host) { s = s * 1664525u + 1013904223u; v = (s >> 8) * (1.0f / 16777216.0f) - 0.5f; }
        CHECK(cudaMalloc(&panel, host.size() * 4));
        CHECK(cudaMalloc(&original, host.size() * 4));
        CHECK(cudaMemcpy(original, host.data(), host.size() * 4, cudaMemcpyHostToDevice));
        CHECK(cusolverDnCreate(&solver));
        CHECK(cublasCreate(&blas));
        int lwork;
        CHECK(cusolverDnSgetrf_bufferSize(solver, m, w, panel, m, &lwork));
        CHECK(cudaMalloc(&work, (size_t)lwork * 4));
        CHECK(cudaMalloc(&ipiv, w * 4));
        CHECK(cudaMalloc(&info, 4));
        CHECK(cudaMalloc(&a, (size_t)n * n * 2));
        CHECK(cudaMalloc(&b, (size_t)n * n * 2));
        CHECK(cudaMalloc(&c, (size_t)n * n * 4));
        CHECK(cudaMemset(a, 0, (size_t)n * n * 2));
        CHECK(cudaMemset(b, 0, (size_t)n * n * 2));
    }
    void panel_lu(cudaStream_t s)
    {
        CHECK(cudaMemcpyAsync(panel, original, (size_t)m * w * 4, cudaMemcpyDeviceToDevice, s));
        CHECK(cusolverDnSetStream(solver, s));
        CHECK(cusolverDnSgetrf(solver, m, w, panel, m, work, ipiv, info));
    }
    void gemm(cudaStream_t s)
    {
        const float one = 1, zero = 0;
        CHECK(cublasSetStream(blas, s));
        for (int g = 0; g < gemms; ++g)
            CHECK(cublasGemmEx(blas, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a, CUDA_R_16F, n, b,
                               CUDA_R_16F, n, &zero, c, CUDA_R_32F, n, CUBLAS_COMPUTE_32F,
                               CUBLAS_GEMM_DEFAULT));
    }
};

// median of 3 of f's time (ms), f enqueueing and this waiting on `s`
template <typename F>
static double timed(F f, cudaStream_t s)
{
    std::vector<double> t;
    for (int rep = 0; rep < 4; ++rep) {
        CHECK(cudaStreamSynchronize(s));
        const double t0 = now_ms();
        f();
        CHECK(cudaStreamSynchronize(s));
        if (rep) t.push_back(now_ms() - t0);
    }
    std::sort(t.begin(), t.end());
    return t[1];
}

int main(int argc, char** argv)
{
    const int m = argc > 1 ? std::atoi(argv[1]) : 32768, w = argc > 2 ? std::atoi(argv[2]) : 1536;
    CHECK(cudaSetDevice(0));
    CHECK(cudaFree(0));
    CUdevice dev;
    CHECK(cuDeviceGet(&dev, 0));
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    CUdevResource all;
    CHECK(cuDeviceGetDevResource(dev, &all, CU_DEV_RESOURCE_TYPE_SM));
    std::printf("device: %s, %d SMs\n", prop.name, all.sm.smCount);
    Work work(m, w);
    std::printf("| panel SMs | GEMM SMs | panel alone (ms) | %d GEMMs alone (ms) | both: panel (ms) | both: all (ms) |\n", work.gemms);
    std::printf("|---:|---:|---:|---:|---:|---:|\n");
    for (int panel_sms : {0, 8, 16, 24, 32, 48}) {
        cudaStream_t panel_stream, gemm_stream;
        int gemm_sms = all.sm.smCount, got = all.sm.smCount;
        if (panel_sms == 0) {
            int least, greatest;
            CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
            CHECK(cudaStreamCreateWithPriority(&panel_stream, cudaStreamNonBlocking, greatest));
            CHECK(cudaStreamCreateWithPriority(&gemm_stream, cudaStreamNonBlocking, least));
        } else {
            CUdevResource group, rest;
            unsigned groups = 1;
            CHECK(cuDevSmResourceSplitByCount(&group, &groups, &all, &rest, 0, panel_sms));
            CUdevResourceDesc panel_desc, gemm_desc;
            CHECK(cuDevResourceGenerateDesc(&panel_desc, &group, 1));
            CHECK(cuDevResourceGenerateDesc(&gemm_desc, &rest, 1));
            CUgreenCtx panel_ctx, gemm_ctx;
            CHECK(cuGreenCtxCreate(&panel_ctx, panel_desc, dev, CU_GREEN_CTX_DEFAULT_STREAM));
            CHECK(cuGreenCtxCreate(&gemm_ctx, gemm_desc, dev, CU_GREEN_CTX_DEFAULT_STREAM));
            CUstream ps, gs;
            CHECK(cuGreenCtxStreamCreate(&ps, panel_ctx, CU_STREAM_NON_BLOCKING, 0));
            CHECK(cuGreenCtxStreamCreate(&gs, gemm_ctx, CU_STREAM_NON_BLOCKING, 0));
            panel_stream = ps;
            gemm_stream = gs;
            got = group.sm.smCount;
            gemm_sms = rest.sm.smCount;
        }
        const double panel_alone = timed([&] { work.panel_lu(panel_stream); }, panel_stream);
        const double gemm_alone = timed([&] { work.gemm(gemm_stream); }, gemm_stream);
        std::vector<double> both_panel, both_all;
        for (int rep = 0; rep < 3; ++rep) {
            CHECK(cudaDeviceSynchronize());
            const double t0 = now_ms();
            work.gemm(gemm_stream);
            work.panel_lu(panel_stream);
            CHECK(cudaStreamSynchronize(panel_stream));
            both_panel.push_back(now_ms() - t0);
            CHECK(cudaStreamSynchronize(gemm_stream));
            both_all.push_back(now_ms() - t0);
        }
        std::sort(both_panel.begin(), both_panel.end());
        std::sort(both_all.begin(), both_all.end());
        std::printf("| %d | %d | %.2f | %.2f | %.2f | %.2f |\n", panel_sms ? got : all.sm.smCount,
                    gemm_sms, panel_alone, gemm_alone, both_panel[1], both_all[1]);
    }
    return 0;
}
