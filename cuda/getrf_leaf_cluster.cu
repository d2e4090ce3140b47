// The LU factorization with partial pivoting of a recursive panel's leaf (m x w float, m <= 32768,
// w <= 16) in one launch on one thread-block cluster of 16 blocks (sm_90), LAPACK's getf2 column
// by column, with the leaf's interchanges applied to the panel's other columns too (so that the
// recursion above needs no laswp: panel/lu.py).
//
// Why: partial pivoting needs one reduction over the panel's whole height per column, and that
// exchange is what limits a GPU panel (cuSOLVER's getrf: 6.7 us per column on an H100; our
// getrf_panel_fused, one exchange through global memory per column: 5.2). Inside a cluster the
// exchange goes through the blocks' shared memory: perf/probe_cluster_leaf.cu measured about 2
// us per column with one cluster barrier per column, and less with the exchange below.
//
// Layout: block b of the cluster holds rows [b S, (b + 1) S), S = ROWS_PER_THREAD x THREADS, in
// registers: thread t rows b S + t + r THREADS, all w columns (every index a constant: the column
// loop is unrolled). Rows never move while the leaf is factored: each row carries its position
// (LAPACK's row after the interchanges so far), and a chosen row is frozen. Column j:
//   1. each warp's best candidate (the largest |a|, the lowest position on a tie: LAPACK's
//      isamax on the rows as they stand), then the block's, by redux instructions;
//   2. the block's candidate (its key, position and w values) pushed into every block's shared
//      memory by st.async, each block counting the bytes that arrive on an mbarrier (one phase
//      per column, two buffers by the parity of j): no cluster-wide barrier;
//   3. every warp takes the winner from its own block's copy; the row at position j takes the
//      winner's position (the interchange); the rows below scale column j (by the reciprocal
//      unless it would overflow, as getf2) and do their rank-1 update.
// A buffer of parity j & 1 is written again at column j + 2 only by a block that has received
// every block's column j + 1, which each sends after its own barrier of column j + 1, which
// its threads reach only when they are done reading column j.
//
// Then every row is written to its final position, and each block's thread 0 turns the pivots
// into the moves they amount to (at most 2 w), which the cluster's threads apply to the panel's
// other columns, a column per thread.
//
// Requires tslu.cu's magnitude_key (compiled in the same module, before this file).

#include <cooperative_groups.h>
#include <cuda/ptx>

// sm_90 and later only (clusters, st.async); the backend launches it only there
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900

#define LEAF_CLUSTER_BLOCKS 16
#define LEAF_CLUSTER_THREADS 512
#define LEAF_CLUSTER_ROWS_PER_THREAD 4
#define LEAF_CLUSTER_WIDTH 16

namespace leaf_cluster {

namespace cg = cooperative_groups;
namespace ptx = cuda::ptx;

constexpr int C = LEAF_CLUSTER_BLOCKS, T = LEAF_CLUSTER_THREADS, RPT = LEAF_CLUSTER_ROWS_PER_THREAD;
constexpr int W = LEAF_CLUSTER_WIDTH, WARPS = T / 32, SHARE = RPT * T;

// A block's candidate as pushed: 16-byte aligned, so that each part goes in one v4 store
struct alignas(16) Candidate {
    unsigned key;
    int position;
    int unused[2];
    float values[W];
};
constexpr int PARTS = sizeof(Candidate) / 16;

// The better of the keys among the lanes, then the lowest position holding it.
__device__ inline void warp_winner(unsigned key, int position, unsigned& best, int& best_position)
{
    best = __reduce_max_sync(0xffffffffu, key);
    best_position = (int)__reduce_min_sync(0xffffffffu, key == best ? (unsigned)position : ~0u);
}

// The moves on the panel's other columns (left_cols before A's first, right_cols after its w),
// a column per thread of the cluster from `first`: every source read before any destination is
// written. Not inlined: its registers stay out of the column loop's.
__device__ __noinline__ void apply_moves(float* A, long long lda, int w, int left_cols,
                                         int right_cols, int count, const int* move_to,
                                         const int* move_from, int first)
{
    for (int c = first; c < left_cols + right_cols; c += C * T) {
        float* column = A + (c < left_cols ? c - left_cols : w + c - left_cols) * lda;
        float moved[2 * W];
#pragma unroll
        for (int e = 0; e < 2 * W; ++e)
            if (e < count) moved[e] = column[move_from[e]];
#pragma unroll
        for (int e = 0; e < 2 * W; ++e)
            if (e < count) column[move_to[e]] = moved[e];
    }
}

__device__ void getrf_leaf(float* A, long long lda, int m, int w, int left_cols, int right_cols,
                           int* ipiv, int row_offset)
{
    // double-buffered like the candidates: warp 0 may still be pushing column j's best while the
    // block's other warps, past column j's wait, publish column j + 1's
    __shared__ unsigned warp_key[2][WARPS];
    __shared__ int warp_position[2][WARPS];
    __shared__ float warp_values[2][WARPS][W];
    __shared__ Candidate block_best[2][C];
    __shared__ uint64_t arrived[2];
    __shared__ int pivots[W];
    __shared__ int move_count, move_to[2 * W], move_from[2 * W];
    cg::cluster_group cluster = cg::this_cluster();
    const int rank = cluster.block_rank(), tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int first_row = rank * SHARE;

    float a[RPT][W];
    int position[RPT];  // -1: no row (past m)
#pragma unroll
    for (int r = 0; r < RPT; ++r) {
        const int i = first_row + tid + r * T;
        position[r] = i < m ? i : -1;
#pragma unroll
        for (int k = 0; k < W; ++k) a[r][k] = i < m && k < w ? A[i + k * lda] : 0.f;
    }
    if (tid == 0) {
        ptx::mbarrier_init(&arrived[0], 1);
        ptx::mbarrier_init(&arrived[1], 1);
        ptx::fence_mbarrier_init(ptx::sem_release, ptx::scope_cluster);
    }
    cluster.sync();  // every block's barriers ready (and every row read) before any push

#pragma unroll
    for (int j = 0; j < W; ++j) {
        if (j >= w) break;
        const int parity = j & 1;
        // 1. this warp's best row still below the pivots, its values put where warp 0 finds them
        unsigned key = 0;
        int candidate = INT_MAX, holder = 0;
#pragma unroll
        for (int r = 0; r < RPT; ++r) {
            const unsigned k = magnitude_key(fabsf(a[r][j]), position[r] >= j);
            if (k > key || (k == key && k != 0 && position[r] < candidate)) {
                key = k;
                candidate = position[r];
                holder = r;
            }
        }
        unsigned best;
        int best_position;
        warp_winner(key, candidate, best, best_position);
        if (best == 0) {
            if (lane == 0) warp_key[parity][warp] = 0;
        } else if (key == best && candidate == best_position) {
            warp_key[parity][warp] = best;
            warp_position[parity][warp] = best_position;
#pragma unroll
            for (int r = 0; r < RPT; ++r)
                if (r == holder)
#pragma unroll
                    for (int k = 0; k < W; ++k) warp_values[parity][warp][k] = a[r][k];
        }
        __syncthreads();
        // 2. warp 0: the block's best, pushed into every block (one expected arrival: its own)
        if (warp == 0) {
            if (lane == 0)
                ptx::mbarrier_arrive_expect_tx(ptx::sem_release, ptx::scope_cta, ptx::space_shared,
                                               &arrived[parity], C * (unsigned)sizeof(Candidate));
            const unsigned k = lane < WARPS ? warp_key[parity][lane] : 0u;
            warp_winner(k, k ? warp_position[parity][lane] : INT_MAX, best, best_position);
            const int from = __ffs(__ballot_sync(0xffffffffu,
                                                 k == best && k != 0 &&
                                                 warp_position[parity][lane % WARPS] ==
                                                     best_position)) - 1;
            for (int item = lane; item < C * PARTS; item += 32) {
                const int to = item / PARTS, part = item % PARTS;
                unsigned words[4];
                if (part == 0) {
                    words[0] = best;
                    words[1] = (unsigned)best_position;
                    words[2] = words[3] = 0;
                } else {
#pragma unroll
                    for (int e = 0; e < 4; ++e)
                        words[e] = best ? __float_as_uint(warp_values[parity][from][4 * (part - 1) + e])
                                        : 0u;
                }
                unsigned* slot = reinterpret_cast<unsigned*>(&block_best[parity][rank]) + 4 * part;
                ptx::st_async(cluster.map_shared_rank(slot, to), words,
                              cluster.map_shared_rank(&arrived[parity], to));
            }
        }
        while (!ptx::mbarrier_try_wait_parity(ptx::sem_acquire, ptx::scope_cluster,
                                              &arrived[parity], (unsigned)(j >> 1) & 1u)) { }
        // 3. the cluster's best, from this block's copy; the interchange; column j of L and the
        //    rank-1 update of the rows below
        const unsigned k = lane < C ? block_best[parity][lane].key : 0u;
        warp_winner(k, k ? block_best[parity][lane].position : INT_MAX, best, best_position);
        const int winner = __ffs(__ballot_sync(0xffffffffu, k == best && k != 0 &&
                                               block_best[parity][lane % C].position ==
                                                   best_position)) - 1;
        const float* pivot_row = block_best[parity][winner < 0 ? 0 : winner].values;
        const int p = winner < 0 ? j : best_position;
        if (tid == 0) pivots[j] = p;
        const float pivot = winner < 0 ? 0.f : pivot_row[j];
        // getf2: multiply by the reciprocal unless it would overflow; a zero pivot (the column
        // zero from row j down) scales nothing
        const bool reciprocal = fabsf(pivot) >= FLT_MIN;
        const float inverse = 1.0f / pivot;
#pragma unroll
        for (int r = 0; r < RPT; ++r) {
            const int at = position[r] == p ? j : position[r] == j ? p : position[r];
            position[r] = at;  // the pivot row frozen at row j; the row it displaces at row p
            if (at > j && pivot != 0.f) {
                const float l = reciprocal ? a[r][j] * inverse : a[r][j] / pivot;
                a[r][j] = l;
#pragma unroll
                for (int c = j + 1; c < W; ++c) a[r][c] = fmaf(-l, pivot_row[c], a[r][c]);
            }
        }
    }

    // every row to its final position
#pragma unroll
    for (int r = 0; r < RPT; ++r)
        if (position[r] >= 0)
#pragma unroll
            for (int k = 0; k < W; ++k)
                if (k < w) A[position[r] + k * lda] = a[r][k];
    __syncthreads();
    // the pivots, and the moves they amount to (final row := original row), from each block's
    // copy; the panel's other columns are moved by the whole cluster, a column per thread
    if (tid == 0) {
        int count = 0;  // move_to[e] holds original row move_from[e] so far
        for (int j = 0; j < w; ++j) {
            const int p = pivots[j];
            if (rank == 0) ipiv[j] = p + row_offset;
            if (p == j) continue;
            int at_j = j, at_p = p, ej = -1, ep = -1;
            for (int e = 0; e < count; ++e) {
                if (move_to[e] == j) { at_j = move_from[e]; ej = e; }
                if (move_to[e] == p) { at_p = move_from[e]; ep = e; }
            }
            if (ej < 0) { ej = count++; move_to[ej] = j; }
            if (ep < 0) { ep = count++; move_to[ep] = p; }
            move_from[ej] = at_p;
            move_from[ep] = at_j;
        }
        move_count = count;
    }
    __syncthreads();
    apply_moves(A, lda, w, left_cols, right_cols, move_count, move_to, move_from, rank * T + tid);
    cluster.sync();  // no block leaves while another may still push into its shared memory
}

}  // namespace leaf_cluster

// A: the leaf's top-left (row and column r0 of the matrix), lda; m x w; the panel's other
// columns: left_cols before A's first column, right_cols after its last; ipiv: the leaf's w
// pivots, written as 0-based rows + row_offset (LAPACK's sequence of interchanges).
extern "C" __global__ void __cluster_dims__(LEAF_CLUSTER_BLOCKS, 1, 1)
__launch_bounds__(LEAF_CLUSTER_THREADS, 1)
getrf_leaf_cluster_s(float* A, long long lda, int m, int w, int left_cols, int right_cols,
                     int* ipiv, int row_offset)
{
    leaf_cluster::getrf_leaf(A, lda, m, w, left_cols, right_cols, ipiv, row_offset);
}
#else
extern "C" __global__ void getrf_leaf_cluster_s(float*, long long, int, int, int, int, int*, int)
{
    __trap();
}
#endif
