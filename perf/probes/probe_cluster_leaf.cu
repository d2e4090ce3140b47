// What partial pivoting can cost per column across one thread-block cluster (sm_90) when each
// column takes a single cluster barrier: the second design after probe_cluster_panel.cu (about
// 3 us per column, two dependent reads of other blocks' shared memory per column). Here:
//   - each thread keeps its rows of the m x W float panel in registers (the column loop fully
//     unrolled, so every index is a constant);
//   - per column, each block's best candidate row (its magnitude key, its index and its W values)
//     is *pushed* into every block's shared memory (distributed stores, no waiting on them);
//   - one cluster barrier (release / acquire); then every warp picks the winner from its own
//     shared memory and does its rows' rank-1 update with the pivot row read locally.
// Rows never move (a chosen row is frozen); the chosen order is checked against getf2 on the
// host. With a second argument, the same launches run beside a half-precision cuBLAS GEMM that
// is left all SMs but the cluster's (cublasSetSmCountTarget), as the LU's update runs beside its
// panels. A probe for the LU panel's leaves (perf/RESULTS.md), not library code.
//
//   nvcc -arch=sm_90a -O3 -o /tmp/probe_cluster_leaf perf/probes/probe_cluster_leaf.cu -lcublas
//   /tmp/probe_cluster_leaf [m [busy]]        (default 32768, idle)
#include <cooperative_groups.h>
#include <cuda/ptx>
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace cg = cooperative_groups;

#define CHECK(call) do { auto e = (call); if ((int)e != 0) { \
    std::printf("%s failed: %d\n", #call, (int)e); std::exit(1); } } while (0)

constexpr int MAX_CLUSTER = 16;

// |a| as a key ordered as the magnitudes (1 + its bits; 0: no candidate)
__device__ inline unsigned key_of(float v) { return 1u + __float_as_uint(fabsf(v)); }

__device__ inline unsigned long long now_ns()
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

template <int W, int RPT, int T>
__global__ void __launch_bounds__(T) cluster_leaf(const float* A, int lda, int m, int* chosen,
                                                  unsigned long long* loop_ns)
{
    constexpr int WARPS = T / 32;
    __shared__ unsigned warp_key[WARPS];
    __shared__ int warp_row[WARPS];
    __shared__ float warp_values[WARPS][W];
    __shared__ unsigned block_key[2][MAX_CLUSTER];
    __shared__ int block_row[2][MAX_CLUSTER];
    __shared__ float block_values[2][MAX_CLUSTER][W];
    cg::cluster_group cluster = cg::this_cluster();
    const int C = cluster.num_blocks(), rank = cluster.block_rank(), tid = threadIdx.x;
    const int lane = tid & 31, warp = tid >> 5;
    const int share = RPT * T, r0 = rank * share;

    float a[RPT][W];
    bool live[RPT];
#pragma unroll
    for (int r = 0; r < RPT; ++r) {
        const int i = r0 + tid + r * T;
        live[r] = i < m;
#pragma unroll
        for (int k = 0; k < W; ++k) a[r][k] = live[r] ? A[i + (long long)k * lda] : 0.f;
    }
    cluster.sync();
    const unsigned long long start = now_ns();

#pragma unroll
    for (int j = 0; j < W; ++j) {
        const int parity = j & 1;
        // this thread's, then this warp's best row
        unsigned key = 0;
        int best_r = 0;
#pragma unroll
        for (int r = 0; r < RPT; ++r) {
            const unsigned k = live[r] ? key_of(a[r][j]) : 0u;
            if (k > key) { key = k; best_r = r; }
        }
        const unsigned warp_best = __reduce_max_sync(0xffffffffu, key);
        const int winner_lane = __ffs(__ballot_sync(0xffffffffu, key == warp_best)) - 1;
        if (lane == winner_lane) {
            warp_key[warp] = warp_best;
            warp_row[warp] = r0 + tid + best_r * T;
#pragma unroll
            for (int r = 0; r < RPT; ++r)
                if (r == best_r)
#pragma unroll
                    for (int k = 0; k < W; ++k) warp_values[warp][k] = a[r][k];
        }
        __syncthreads();
        // the block's best, pushed into every block of the cluster
        if (warp == 0) {
            const unsigned k = lane < WARPS ? warp_key[lane] : 0u;
            const unsigned block_best = __reduce_max_sync(0xffffffffu, k);
            const int best_warp = __ffs(__ballot_sync(0xffffffffu, k == block_best)) - 1;
            for (int item = lane; item < C * (W + 2); item += 32) {
                const int to = item / (W + 2), field = item % (W + 2);
                if (field < W)
                    *cluster.map_shared_rank(&block_values[parity][rank][field], to) =
                        warp_values[best_warp][field];
                else if (field == W)
                    *cluster.map_shared_rank(&block_key[parity][rank], to) = block_best;
                else
                    *cluster.map_shared_rank(&block_row[parity][rank], to) = warp_row[best_warp];
            }
        }
        cluster.sync();
        // every warp: the cluster's best from this block's copy, then its rows' update
        const unsigned k = lane < C ? block_key[parity][lane] : 0u;
        const unsigned best = __reduce_max_sync(0xffffffffu, k);
        const int winner = __ffs(__ballot_sync(0xffffffffu, k == best)) - 1;
        const int p = block_row[parity][winner];
        const float* pivot_row = block_values[parity][winner];
        if (rank == 0 && tid == 0) chosen[j] = p;
        const float inverse = 1.0f / pivot_row[j];
#pragma unroll
        for (int r = 0; r < RPT; ++r) {
            if (r0 + tid + r * T == p) live[r] = false;
            if (!live[r]) continue;
            const float l = a[r][j] * inverse;
            a[r][j] = l;
#pragma unroll
            for (int c = j + 1; c < W; ++c) a[r][c] = fmaf(-l, pivot_row[c], a[r][c]);
        }
    }
    if (rank == 0 && tid == 0) *loop_ns = now_ns() - start;
    cluster.sync();  // no block leaves while another may still write into its shared memory
}

// The same with the candidates pushed by st.async, each block counting the bytes that arrive in
// its own shared memory on an mbarrier (one phase per column): no cluster-wide barrier at all.
template <int W>
struct alignas(16) Candidate {
    unsigned key;
    int row;
    int pad[2];
    float values[W];
};

template <int W, int RPT, int T>
__global__ void __launch_bounds__(T) cluster_leaf_async(const float* A, int lda, int m, int* chosen,
                                                        unsigned long long* loop_ns, long long* phase_cycles)
{
    namespace ptx = cuda::ptx;
    constexpr int WARPS = T / 32, WORDS = sizeof(Candidate<W>) / 4;
    // double-buffered like the candidates: warp 0 may still be pushing column j's best while
    // the block's other warps, past column j's wait, publish column j + 1's
    __shared__ unsigned warp_key[2][WARPS];
    __shared__ int warp_row[2][WARPS];
    __shared__ float warp_values[2][WARPS][W];
    __shared__ Candidate<W> block_best[2][MAX_CLUSTER];
    __shared__ uint64_t arrived[2];
    cg::cluster_group cluster = cg::this_cluster();
    const int C = cluster.num_blocks(), rank = cluster.block_rank(), tid = threadIdx.x;
    const int lane = tid & 31, warp = tid >> 5;
    const int share = RPT * T, r0 = rank * share;

    float a[RPT][W];
    bool live[RPT];
#pragma unroll
    for (int r = 0; r < RPT; ++r) {
        const int i = r0 + tid + r * T;
        live[r] = i < m;
#pragma unroll
        for (int k = 0; k < W; ++k) a[r][k] = live[r] ? A[i + (long long)k * lda] : 0.f;
    }
    if (tid == 0) {
        ptx::mbarrier_init(&arrived[0], 1);
        ptx::mbarrier_init(&arrived[1], 1);
        ptx::fence_mbarrier_init(ptx::sem_release, ptx::scope_cluster);
    }
    cluster.sync();
    const unsigned long long start = now_ns();

#pragma unroll
    for (int j = 0; j < W; ++j) {
        const int parity = j & 1;
        long long t0 = clock64();
        unsigned key = 0;
        int best_r = 0;
#pragma unroll
        for (int r = 0; r < RPT; ++r) {
            const unsigned k = live[r] ? key_of(a[r][j]) : 0u;
            if (k > key) { key = k; best_r = r; }
        }
        const unsigned warp_best = __reduce_max_sync(0xffffffffu, key);
        const int winner_lane = __ffs(__ballot_sync(0xffffffffu, key == warp_best)) - 1;
        if (lane == winner_lane) {
            warp_key[parity][warp] = warp_best;
            warp_row[parity][warp] = r0 + tid + best_r * T;
#pragma unroll
            for (int r = 0; r < RPT; ++r)
                if (r == best_r)
#pragma unroll
                    for (int k = 0; k < W; ++k) warp_values[parity][warp][k] = a[r][k];
        }
        __syncthreads();
        long long t1 = clock64();
        if (warp == 0) {
            if (lane == 0)  // this column's phase: one arrival and every block's candidate
                ptx::mbarrier_arrive_expect_tx(ptx::sem_release, ptx::scope_cta, ptx::space_shared,
                                               &arrived[parity], C * (unsigned)sizeof(Candidate<W>));
            const unsigned k = lane < WARPS ? warp_key[parity][lane] : 0u;
            const unsigned block_key = __reduce_max_sync(0xffffffffu, k);
            const int best_warp = __ffs(__ballot_sync(0xffffffffu, k == block_key)) - 1;
            for (int item = lane; item < C * WORDS; item += 32) {
                const int to = item / WORDS, word = item % WORDS;
                unsigned value;
                if (word == 0) value = block_key;
                else if (word == 1) value = warp_row[parity][best_warp];
                else if (word < 4) value = 0;
                else value = __float_as_uint(warp_values[parity][best_warp][word - 4]);
                unsigned* slot = reinterpret_cast<unsigned*>(&block_best[parity][rank]) + word;
                ptx::st_async(cluster.map_shared_rank(slot, to), value,
                              cluster.map_shared_rank(&arrived[parity], to));
            }
        }
        long long t2 = clock64();
        while (!ptx::mbarrier_try_wait_parity(ptx::sem_acquire, ptx::scope_cluster, &arrived[parity],
                                              (unsigned)(j >> 1) & 1u)) { }
        long long t3 = clock64();
        const unsigned k = lane < C ? block_best[parity][lane].key : 0u;
        const unsigned best = __reduce_max_sync(0xffffffffu, k);
        const int winner = __ffs(__ballot_sync(0xffffffffu, k == best)) - 1;
        const int p = block_best[parity][winner].row;
        const float* pivot_row = block_best[parity][winner].values;
        if (rank == 0 && tid == 0) chosen[j] = p;
        const float inverse = 1.0f / pivot_row[j];
#pragma unroll
        for (int r = 0; r < RPT; ++r) {
            if (r0 + tid + r * T == p) live[r] = false;
            if (!live[r]) continue;
            const float l = a[r][j] * inverse;
            a[r][j] = l;
#pragma unroll
            for (int c = j + 1; c < W; ++c) a[r][c] = fmaf(-l, pivot_row[c], a[r][c]);
        }
        if (tid == 0 && rank == 0) {
            unsigned key_next = live[0] ? key_of(a[0][(j + 1) % W]) : 0u;  // the update done
            long long t4 = clock64() + (key_next == 12345u);
            phase_cycles[0] += t1 - t0; phase_cycles[1] += t2 - t1; phase_cycles[2] += t3 - t2;
            phase_cycles[3] += t4 - t3;
        }
    }
    if (rank == 0 && tid == 0) *loop_ns = now_ns() - start;
    cluster.sync();
}

static std::vector<int> host_order(const std::vector<float>& a, int m, int W)
{
    std::vector<float> h(a);
    std::vector<int> order(m), ref(W);
    for (int i = 0; i < m; ++i) order[i] = i;
    for (int j = 0; j < W; ++j) {
        int p = j;
        for (int i = j; i < m; ++i) if (std::fabs(h[i + (size_t)j * m]) > std::fabs(h[p + (size_t)j * m])) p = i;
        for (int k = 0; k < W; ++k) std::swap(h[j + (size_t)k * m], h[p + (size_t)k * m]);
        std::swap(order[j], order[p]);
        ref[j] = order[j];
        const float inverse = 1.0f / h[j + (size_t)j * m];
        for (int i = j + 1; i < m; ++i) {
            const float l = h[i + (size_t)j * m] * inverse;
            h[i + (size_t)j * m] = l;
            for (int k = j + 1; k < W; ++k) h[i + (size_t)k * m] = std::fma(-l, h[j + (size_t)k * m], h[i + (size_t)k * m]);
        }
    }
    return ref;
}

struct Busy {  // a half-precision GEMM on its own stream, on all SMs but `spare`
    cublasHandle_t handle;
    cudaStream_t stream;
    __half *a, *b;
    float* c;
    int n = 16384;
    Busy(int spare)
    {
        CHECK(cublasCreate(&handle));
        CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
        CHECK(cublasSetStream(handle, stream));
        int sms;
        CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
        CHECK(cublasSetSmCountTarget(handle, sms - spare));
        CHECK(cudaMalloc(&a, (size_t)n * n * 2));
        CHECK(cudaMalloc(&b, (size_t)n * n * 2));
        CHECK(cudaMalloc(&c, (size_t)n * n * 4));
        CHECK(cudaMemset(a, 0, (size_t)n * n * 2));
        CHECK(cudaMemset(b, 0, (size_t)n * n * 2));
    }
    void launch()
    {
        const float one = 1, zero = 0;
        CHECK(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a, CUDA_R_16F, n, b,
                           CUDA_R_16F, n, &zero, c, CUDA_R_32F, n, CUBLAS_COMPUTE_32F,
                           CUBLAS_GEMM_DEFAULT));
    }
};

template <int W, int RPT, int T, bool ASYNC>
void run(int m, int C, Busy* busy)
{
    const int share = RPT * T;
    if ((long long)share * C < m) { std::printf("| %d | %d | %d | %d | too few rows per thread |\n", m, W, C, T); return; }
    std::vector<float> a((size_t)m * W);
    unsigned s = 12345;
    for (auto& v : a) { s = s * 1664525u + 1013904223u; v = (s >> 8) * (1.0f / 16777216.0f) - 0.5f; }
    const std::vector<int> ref = host_order(a, m, W);
    float* d_a;
    int* d_chosen;
    unsigned long long* d_ns;
    CHECK(cudaMalloc(&d_a, a.size() * 4));
    CHECK(cudaMalloc(&d_chosen, W * 4));
    CHECK(cudaMalloc(&d_ns, 8));
    long long* d_phases;
    CHECK(cudaMalloc(&d_phases, 32));
    CHECK(cudaMemset(d_phases, 0, 32));
    CHECK(cudaMemcpy(d_a, a.data(), a.size() * 4, cudaMemcpyHostToDevice));
    CHECK(cudaFuncSetAttribute(cluster_leaf<W, RPT, T>, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    CHECK(cudaFuncSetAttribute(cluster_leaf_async<W, RPT, T>, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(C);
    config.blockDim = dim3(T);
    cudaLaunchAttribute attribute;
    attribute.id = cudaLaunchAttributeClusterDimension;
    attribute.val.clusterDim.x = C;
    attribute.val.clusterDim.y = 1;
    attribute.val.clusterDim.z = 1;
    config.attrs = &attribute;
    config.numAttrs = 1;
    cudaEvent_t start, end;
    CHECK(cudaEventCreate(&start));
    CHECK(cudaEventCreate(&end));
    std::vector<float> times, loops;
    if (busy) busy->launch();
    for (int rep = 0; rep < 11; ++rep) {
        CHECK(cudaEventRecord(start));
        if (ASYNC)
            CHECK(cudaLaunchKernelEx(&config, cluster_leaf_async<W, RPT, T>, (const float*)d_a, m, m,
                                     d_chosen, d_ns, d_phases));
        else
            CHECK(cudaLaunchKernelEx(&config, cluster_leaf<W, RPT, T>, (const float*)d_a, m, m,
                                     d_chosen, d_ns));
        CHECK(cudaEventRecord(end));
        CHECK(cudaEventSynchronize(end));
        float ms;
        unsigned long long ns;
        CHECK(cudaEventElapsedTime(&ms, start, end));
        CHECK(cudaMemcpy(&ns, d_ns, 8, cudaMemcpyDeviceToHost));
        if (rep) { times.push_back(ms); loops.push_back(ns * 1e-6f); }
    }
    if (busy) CHECK(cudaStreamSynchronize(busy->stream));
    std::sort(times.begin(), times.end());
    std::sort(loops.begin(), loops.end());
    std::vector<int> got(W);
    CHECK(cudaMemcpy(got.data(), d_chosen, W * 4, cudaMemcpyDeviceToHost));
    int same = 0;
    for (int j = 0; j < W; ++j) same += got[j] == ref[j];
    const float t = times[times.size() / 2], loop = loops[loops.size() / 2];
    std::printf("| %s | %d | %d | %d | %d | %s | %.4f | %.4f | %.2f | %d of %d |\n", ASYNC ? "st.async" : "barrier", m, W, C, T,
                busy ? "busy" : "idle", t, loop, 1000 * loop / W, same, W);
    if (ASYNC) {
        long long phases[4];
        CHECK(cudaMemcpy(phases, d_phases, 32, cudaMemcpyDeviceToHost));
        std::printf("|  | cycles per column (block 0, thread 0): candidates %lld, push %lld, wait %lld, update %lld |\n",
                    phases[0] / (11 * W), phases[1] / (11 * W), phases[2] / (11 * W), phases[3] / (11 * W));
    }
    CHECK(cudaFree(d_a));
    CHECK(cudaFree(d_chosen));
    CHECK(cudaFree(d_ns));
    CHECK(cudaFree(d_phases));
}

template <int W, int RPT, int T>
void both(int m, int C, Busy* busy)
{
    run<W, RPT, T, false>(m, C, busy);
    run<W, RPT, T, true>(m, C, busy);
}

int main(int argc, char** argv)
{
    const int m = argc > 1 ? std::atoi(argv[1]) : 32768;
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    std::printf("device: %s\n", prop.name);
    std::printf("| exchange | m | width | cluster blocks | threads | GPU | launch (ms) | column loop (ms) | us per column | pivots as getf2's |\n");
    std::printf("|---|---:|---:|---:|---:|---|---:|---:|---:|---|\n");
    for (int b = 0; b < (argc > 2 ? 2 : 1); ++b) {
        Busy* busy = b ? new Busy(16) : nullptr;
        both<16, 4, 512>(m, 16, busy);
        both<16, 2, 1024>(m, 16, busy);
        both<8, 4, 1024>(m, 8, busy);
        both<16, 8, 256>(m, 16, busy);
        both<32, 2, 512>(m / 2, 16, busy);
        both<32, 2, 256>(m / 4, 16, busy);
        both<32, 1, 256>(m / 8, 16, busy);
        both<16, 1, 256>(m / 8, 16, busy);
        both<16, 1, 128>(m / 16, 16, busy);
        both<16, 4, 512>(m / 16, 1, busy);
        both<16, 4, 512>(m / 8, 2, busy);
        both<16, 4, 512>(m / 4, 4, busy);
        both<16, 4, 512>(m / 2, 8, busy);
    }
    return 0;
}
