// What partial pivoting costs per column when the panel's rows are spread over one thread-block
// cluster (sm_90): each block keeps its share of an m x W float panel in shared memory; per
// column, one block-wide argmax, one cluster barrier, every block reading the blocks' bests and
// the pivot row from the owner's shared memory (distributed shared memory), and the rank-1
// update. Rows never move (a chosen row is frozen); the chosen order is checked against getf2 on
// the host. A probe for the LU panel's leaves (perf/RESULTS.md), not library code.
//
//   nvcc -arch=sm_90a -O3 -o /tmp/probe_cluster_panel perf/probes/probe_cluster_panel.cu
//   /tmp/probe_cluster_panel [m]        (default 32768)
#include <cooperative_groups.h>
#include <cuda_runtime.h>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace cg = cooperative_groups;

#define CHECK(call) do { cudaError_t e = (call); if (e != cudaSuccess) { \
    std::printf("%s failed: %s\n", #call, cudaGetErrorString(e)); std::exit(1); } } while (0)

constexpr int THREADS = 1024;

__device__ inline void warp_best(unsigned key, int row, unsigned& best, int& best_row)
{
    best = __reduce_max_sync(0xffffffffu, key);
    const int lane = __ffs(__ballot_sync(0xffffffffu, key == best)) - 1;
    best_row = __shfl_sync(0xffffffffu, row, lane);
}

// |a| as a key ordered as the magnitudes (1 + its bits; 0: no candidate)
__device__ inline unsigned key_of(float v, bool active) { return active ? 1u + __float_as_uint(fabsf(v)) : 0u; }

template <int W, int RPT>
__global__ void cluster_getf2(const float* A, int lda, int m, int* chosen)
{
    extern __shared__ float tile[];  // share x W, leading dimension share
    __shared__ unsigned warp_key[32], block_key[2];
    __shared__ int warp_row[32], block_row[2], winner;
    __shared__ float pivot_row[W];
    cg::cluster_group cluster = cg::this_cluster();
    const int C = cluster.num_blocks(), rank = cluster.block_rank(), tid = threadIdx.x;
    const int share = (m + C - 1) / C, r0 = rank * share, rows = min(m, r0 + share) - r0;
    for (int k = 0; k < W; ++k)
        for (int i = tid; i < rows; i += THREADS) tile[i + k * share] = A[r0 + i + (long long)k * lda];
    bool used[RPT];
#pragma unroll
    for (int r = 0; r < RPT; ++r) used[r] = tid + r * THREADS >= rows;
    __syncthreads();
    for (int j = 0; j < W; ++j) {
        unsigned key = 0;
        int row = 0;
#pragma unroll
        for (int r = 0; r < RPT; ++r) {
            const int i = tid + r * THREADS;
            const unsigned k = key_of(used[r] ? 0.f : tile[i + j * share], !used[r]);
            if (k > key) { key = k; row = r0 + i; }
        }
        unsigned best;
        int best_row;
        warp_best(key, row, best, best_row);
        if ((tid & 31) == 0) { warp_key[tid >> 5] = best; warp_row[tid >> 5] = best_row; }
        __syncthreads();
        if (tid < 32) {
            warp_best(warp_key[tid], warp_row[tid], best, best_row);
            if (tid == 0) { block_key[j & 1] = best; block_row[j & 1] = best_row; }
        }
        cluster.sync();
        if (tid < 32) {  // the blocks' bests, from each block's shared memory
            unsigned k = 0;
            int r = 0;
            if (tid < C) {
                k = *cluster.map_shared_rank(&block_key[j & 1], tid);
                r = *cluster.map_shared_rank(&block_row[j & 1], tid);
            }
            warp_best(k, r, best, best_row);
            const int owner = best_row / share;
            if (tid < W)
                pivot_row[tid] = cluster.map_shared_rank(tile, owner)[best_row - owner * share + tid * share];
            if (tid == 0 && rank == 0) chosen[j] = best_row;
            if (tid == 0) winner = best_row;
        }
        __syncthreads();
        const int p = winner;
        const float inverse = 1.0f / pivot_row[j];
#pragma unroll
        for (int r = 0; r < RPT; ++r) {
            const int i = tid + r * THREADS;
            if (r0 + i == p) used[r] = true;
            if (used[r]) continue;
            const float l = tile[i + j * share] * inverse;
            tile[i + j * share] = l;
#pragma unroll
            for (int k = j + 1; k < W; ++k) tile[i + k * share] -= l * pivot_row[k];
        }
    }
    cluster.sync();  // no block leaves while another may read its shared memory
}

template <int W, int RPT>
void run(int m, int C)
{
    std::vector<float> a((size_t)m * W);
    unsigned s = 12345;
    for (auto& v : a) { s = s * 1664525u + 1013904223u; v = (s >> 8) * (1.0f / 16777216.0f) - 0.5f; }
    // host getf2's order
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
            for (int k = j + 1; k < W; ++k) h[i + (size_t)k * m] -= l * h[j + (size_t)k * m];
        }
    }
    float* d_a;
    int* d_chosen;
    CHECK(cudaMalloc(&d_a, a.size() * 4));
    CHECK(cudaMalloc(&d_chosen, W * 4));
    CHECK(cudaMemcpy(d_a, a.data(), a.size() * 4, cudaMemcpyHostToDevice));
    const int share = (m + C - 1) / C;
    const size_t shared = (size_t)share * W * 4;
    if (share > RPT * THREADS) { std::printf("m %d over %d blocks: too many rows per thread\n", m, C); return; }
    auto kernel = cluster_getf2<W, RPT>;
    CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shared));
    CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(C);
    config.blockDim = dim3(THREADS);
    config.dynamicSmemBytes = shared;
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
    std::vector<float> times;
    for (int rep = 0; rep < 11; ++rep) {
        CHECK(cudaEventRecord(start));
        CHECK(cudaLaunchKernelEx(&config, kernel, (const float*)d_a, m, m, d_chosen));
        CHECK(cudaEventRecord(end));
        CHECK(cudaEventSynchronize(end));
        float ms;
        CHECK(cudaEventElapsedTime(&ms, start, end));
        if (rep) times.push_back(ms);
    }
    std::sort(times.begin(), times.end());
    std::vector<int> got(W);
    CHECK(cudaMemcpy(got.data(), d_chosen, W * 4, cudaMemcpyDeviceToHost));
    int same = 0;
    for (int j = 0; j < W; ++j) same += got[j] == ref[j];
    std::printf("| %d | %d | %d | %d KiB | %.4f | %.2f | %d of %d |\n", m, W, C, (int)(shared / 1024),
                times[times.size() / 2], 1000 * times[times.size() / 2] / W, same, W);
    CHECK(cudaFree(d_a));
    CHECK(cudaFree(d_chosen));
}

int main(int argc, char** argv)
{
    const int m = argc > 1 ? std::atoi(argv[1]) : 32768;
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    std::printf("device: %s\n", prop.name);
    std::printf("| m | width | cluster blocks | shared per block | time (ms) | us per column | pivots as getf2's |\n");
    std::printf("|---:|---:|---:|---:|---:|---:|---|\n");
    run<8, 4>(m, 8);
    run<16, 2>(m, 16);
    run<8, 2>(m, 16);
    run<32, 2>(m / 2, 16);
    return 0;
}
