// The LU factorization with partial pivoting of a short panel (m x w float, w <= m <= 1024,
// w <= 512) in one launch: the leaves of a window-pivoted LU's panels (panel/lu.py's
// getrf_panel_window, 1024 x 512 with leaves of 512), blocked by 32 columns, LAPACK's getrf
// with getf2 below it.
//
// Why a kernel of our own: cuSOLVER's getrf spends about 2 us per column on such a panel
// (1.03 ms for 1024 x 512 on the H100, perf/RESULTS.md), and from the middle of a mixed LU on
// the four leaves of each step's window are its critical path. Its cost is a device-wide step
// per column. Here a column's pivot search stays inside one thread block, which holds the
// column's whole height: the exchanges between blocks are one per 32 columns.
//
// Layout: block b holds the panel's columns [32 b, 32 b + 32) (fewer in the last block), all m
// rows, in registers: thread t rows t and t + 512 (two rows a thread share
// each column's block-wide steps and each shared-memory read of the update). Block b, for each
// block column j in order:
//   j < b   waits for block j's publication, applies its interchanges to its own rows (as the
//           row moves they amount to, at most 64), solves U(j, b) := L(j, j)^-1 A(j, b) (one
//           warp, column by column) and updates A(i, b) -= L(i, j) U(j, b) below (a GEMM of
//           depth 32 from L2 and shared memory);
//   j = b   factors its columns by getf2: per column the block-wide argmax (the first largest
//           |a|, LAPACK's isamax on the rows as they stand: magnitude keys and redux
//           instructions), the pivot row and the row it displaces through shared memory, the
//           scaling (by the reciprocal unless the pivot is below the smallest normal, as getf2)
//           and the rank-1 update. Then it publishes its rows (L(:, j)), the row moves and a
//           tag: a flag per block column, written last, that carries this launch's tag so no
//           flag needs resetting;
//   j > b   waits for block j and applies its interchanges (the L columns follow their rows).
// Then each block writes its columns back, and block j has written the pivots of its columns
// (LAPACK's sequence of interchanges, 0-based rows + row_offset). A block waits only for
// blocks of lower index until its own columns are done, and the launch is cooperative (every
// block resident), so the waits end.
//
// Bytes moved: the panel read and written once; each block column's L published once (m x 32)
// and read from L2 by the blocks to its right.
//
// Requires tslu.cu's magnitude_key (compiled in the same module, before this file).

#include <cfloat>
#include <climits>

#define SHORT_PANEL_THREADS 512
#define SHORT_PANEL_MAX_ROWS 1024
#define SHORT_PANEL_MAX_BLOCKS 16

namespace short_panel {

constexpr int T = SHORT_PANEL_THREADS, RPT = SHORT_PANEL_MAX_ROWS / SHORT_PANEL_THREADS;
constexpr int BW = 32, WARPS = T / 32, MAX_MOVES = 2 * BW, GROUP = 4;

// A block column's publication: its rows (row i's 32 values at rows + i * BW), its row moves
// (count, then destination and source pairs).
struct Publication {
    float* rows;
    int* moves;
};
__device__ inline Publication published(float* rows, int* moves, int j)
{
    return {rows + (size_t)j * SHORT_PANEL_MAX_ROWS * BW, moves + j * (1 + 2 * MAX_MOVES)};
}

struct Shared {
    float4 update_row[BW / 4];         // the pivot row where the rank-1 update uses it, else 0
    unsigned slot_key[WARPS];
    int slot_position[WARPS];
    float pivot;
    int move_count, move_to[MAX_MOVES], move_from[MAX_MOVES];
    float staged[MAX_MOVES][BW];       // rows in transit between positions
    float diagonal[BW][BW + 1];        // L(j, j), padded: a lane reads a column
    float solved[BW][BW + 1];          // U(j, b) as the warp solves it, padded likewise
    float4 u[BW][BW / 4];              // U(j, b) for the update's broadcast reads
};

__device__ inline void wait_for(const unsigned* flag, unsigned tag)
{
    if (threadIdx.x == 0) {
        while (*(volatile const unsigned*)flag != tag) {
        }
        __threadfence();
    }
    __syncthreads();
}

// The rows this thread holds take their positions after block column j's interchanges.
__device__ inline void apply_moves(float (&a)[RPT][BW], const Publication& pub, Shared& s,
                                   int m)
{
    const int count = __ldcg(pub.moves);
    for (int k = threadIdx.x; k < count; k += T) {
        s.move_to[k] = __ldcg(pub.moves + 1 + 2 * k);
        s.move_from[k] = __ldcg(pub.moves + 2 + 2 * k);
    }
    __syncthreads();
    // each row's slot as a source and as a destination (-1: none), then one copy each way
    int send[RPT], receive[RPT];
#pragma unroll
    for (int r = 0; r < RPT; ++r) send[r] = receive[r] = -1;
    for (int k = 0; k < count; ++k) {
        const int to = s.move_to[k], from = s.move_from[k];
#pragma unroll
        for (int r = 0; r < RPT; ++r) {
            const int i = threadIdx.x + r * T;
            if (i == from) send[r] = k;
            if (i == to) receive[r] = k;
        }
    }
#pragma unroll
    for (int r = 0; r < RPT; ++r)
        if (send[r] >= 0)
#pragma unroll
            for (int c = 0; c < BW; ++c) s.staged[send[r]][c] = a[r][c];
    __syncthreads();
#pragma unroll
    for (int r = 0; r < RPT; ++r)
        if (receive[r] >= 0)
#pragma unroll
            for (int c = 0; c < BW; ++c) a[r][c] = s.staged[receive[r]][c];
}

// U(j, b) := L(j, j)^-1 A(j, b) by the warp holding rows 32 j.. 32 j + 31, then
// A(i, b) -= L(i, j) U(j, b) for the rows i below, each U(j, b) value read from shared memory
// once for all the thread's rows.
__device__ inline void update(float (&a)[RPT][BW], const Publication& pub, Shared& s, int j,
                              int m)
{
    const int lane = threadIdx.x % 32, first = j * BW, slot = first / T;
    if (threadIdx.x / 32 == first % T / 32) {
        for (int e = lane; e < BW * BW; e += 32)
            s.diagonal[e / BW][e % BW] = __ldcg(pub.rows + (size_t)first * BW + e);
#pragma unroll
        for (int r = 0; r < RPT; ++r)
            if (r == slot)
#pragma unroll
                for (int c = 0; c < BW; ++c) s.solved[lane][c] = a[r][c];
        __syncwarp();
        // lane c solves column c: U(r, c) = A(r, c) - sum_{k<r} L(r, k) U(k, c)
#pragma unroll 1
        for (int r = 1; r < BW; ++r) {
            float t = s.solved[r][lane];
#pragma unroll 4
            for (int k = 0; k < r; ++k) t = fmaf(-s.diagonal[r][k], s.solved[k][lane], t);
            s.solved[r][lane] = t;
        }
        __syncwarp();
#pragma unroll
        for (int r = 0; r < RPT; ++r)
            if (r == slot)
#pragma unroll
                for (int c = 0; c < BW; ++c) a[r][c] = s.solved[lane][c];
#pragma unroll
        for (int r = 0; r < BW; ++r) reinterpret_cast<float*>(s.u[r])[lane] = s.solved[r][lane];
    }
    __syncthreads();
    bool below[RPT];
#pragma unroll
    for (int r = 0; r < RPT; ++r) {
        const int i = threadIdx.x + r * T;
        below[r] = i >= first + BW && i < m;
    }
#pragma unroll 1
    for (int q = 0; q < BW / 4; ++q) {
        float l[RPT][4];
#pragma unroll
        for (int r = 0; r < RPT; ++r) {
            const float4 l4 = below[r] ? __ldcg(reinterpret_cast<const float4*>(
                pub.rows + (size_t)(threadIdx.x + r * T) * BW) + q) : make_float4(0, 0, 0, 0);
            l[r][0] = l4.x, l[r][1] = l4.y, l[r][2] = l4.z, l[r][3] = l4.w;
        }
#pragma unroll
        for (int e = 0; e < 4; ++e)
#pragma unroll
            for (int c4 = 0; c4 < BW / 4; ++c4) {
                const float4 u = s.u[4 * q + e][c4];
#pragma unroll
                for (int r = 0; r < RPT; ++r)
                    if (below[r]) {
                        a[r][4 * c4] = fmaf(-l[r][e], u.x, a[r][4 * c4]);
                        a[r][4 * c4 + 1] = fmaf(-l[r][e], u.y, a[r][4 * c4 + 1]);
                        a[r][4 * c4 + 2] = fmaf(-l[r][e], u.z, a[r][4 * c4 + 2]);
                        a[r][4 * c4 + 3] = fmaf(-l[r][e], u.w, a[r][4 * c4 + 3]);
                    }
            }
    }
}

// getf2 on the block's `width` columns, rows first..m-1; pivots to ipiv[first + c]. Rows do not
// move while the block factors: each carries the position it holds (position[r], LAPACK's row
// after the interchanges so far), a chosen row is closed, and the rows go to their positions
// afterwards, with the moves published for the other blocks (apply_moves). Per column that
// leaves one row to broadcast (the pivot row, where the update needs it) and two barriers. The
// columns go by groups of GROUP, each group one unrolled body run BW / GROUP times, with the
// row's registers rotated by GROUP after each: column GROUP g + t is always at slot t, and the
// slots from `live` on hold the groups already factored (the code of a whole unrolled column
// loop is fetched from L2 once per column: each SM runs it once per launch).
__device__ inline void factor(float (&a)[RPT][BW], int (&position)[RPT], Shared& s, int first,
                              int width, int m, int* ipiv, int row_offset)
{
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    bool open[RPT];
#pragma unroll
    for (int r = 0; r < RPT; ++r) {
        const int i = threadIdx.x + r * T;
        position[r] = i;
        open[r] = i >= first && i < m;
    }
#pragma unroll 1
    for (int g = 0; g < BW / GROUP; ++g) {
        const int live = BW - GROUP * g;
#pragma unroll
        for (int t = 0; t < GROUP; ++t) {
            const int c = GROUP * g + t, p0 = first + c;
            if (c >= width) continue;
            // the largest |a| among the open rows, the lowest position on a tie (isamax)
            unsigned key = 0;
            int at = INT_MAX;
#pragma unroll
            for (int r = 0; r < RPT; ++r) {
                const unsigned k = magnitude_key(fabsf(a[r][t]), open[r]);
                if (k > key || (k == key && k != 0 && position[r] < at)) key = k, at = position[r];
            }
            unsigned best = __reduce_max_sync(0xffffffffu, key);
            int best_at = (int)__reduce_min_sync(0xffffffffu, key == best ? (unsigned)at : ~0u);
            if (lane == 0) s.slot_key[warp] = best, s.slot_position[warp] = best_at;
            __syncthreads();
            key = lane < WARPS ? s.slot_key[lane] : 0u;
            at = lane < WARPS ? s.slot_position[lane] : INT_MAX;
            best = __reduce_max_sync(0xffffffffu, key);
            const int p = (int)__reduce_min_sync(0xffffffffu, key == best ? (unsigned)at : ~0u);
#pragma unroll
            for (int r = 0; r < RPT; ++r)
                if (open[r] && position[r] == p) {  // the pivot row: to position p0, closed
                    s.pivot = a[r][t];
#pragma unroll
                    for (int e = 0; e < BW; ++e)
                        reinterpret_cast<float*>(s.update_row)[e] = e > t && e < live ? a[r][e] : 0.0f;
                    open[r] = false;
                    position[r] = p0;
                }
#pragma unroll
            for (int r = 0; r < RPT; ++r)
                if (open[r] && position[r] == p0) position[r] = p;  // the row it displaces
            if (threadIdx.x == 0) ipiv[p0] = p + row_offset;
            __syncthreads();
            const float pivot = s.pivot, inverse = 1.0f / pivot;
            const bool reciprocal = fabsf(pivot) >= FLT_MIN;
#pragma unroll
            for (int r = 0; r < RPT; ++r)
                if (open[r]) {
                    float l = a[r][t];
                    if (pivot != 0.0f) l = reciprocal ? l * inverse : l / pivot;
                    a[r][t] = l;
#pragma unroll
                    for (int e = t + 1; e < BW; ++e)
                        a[r][e] = fmaf(-l, reinterpret_cast<const float*>(s.update_row)[e], a[r][e]);
                }
        }
#pragma unroll
        for (int r = 0; r < RPT; ++r) {
            float done[GROUP];
#pragma unroll
            for (int e = 0; e < GROUP; ++e) done[e] = a[r][e];
#pragma unroll
            for (int e = 0; e < BW - GROUP; ++e) a[r][e] = a[r][e + GROUP];
#pragma unroll
            for (int e = 0; e < GROUP; ++e) a[r][BW - GROUP + e] = done[e];
        }
    }
}

// The owner's publication: its rows from `first` down, each at its position, the row moves
// (a row's position from its index), then the flag.
__device__ inline void publish(const float (&a)[RPT][BW], const int (&position)[RPT],
                               const Publication& pub, Shared& s, int first, int m,
                               unsigned* flag, unsigned tag)
{
    if (threadIdx.x == 0) s.move_count = 0;
    __syncthreads();
#pragma unroll
    for (int r = 0; r < RPT; ++r) {
        const int i = threadIdx.x + r * T;
        if (i < first || i >= m) continue;
        if (position[r] != i) {
            const int k = atomicAdd(&s.move_count, 1);
            pub.moves[1 + 2 * k] = position[r];
            pub.moves[2 + 2 * k] = i;
        }
        float4* row = reinterpret_cast<float4*>(pub.rows + (size_t)position[r] * BW);
#pragma unroll
        for (int q = 0; q < BW / 4; ++q)
            row[q] = make_float4(a[r][4 * q], a[r][4 * q + 1], a[r][4 * q + 2], a[r][4 * q + 3]);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        pub.moves[0] = s.move_count;
        // one fence, after the barrier, releases every thread's writes (cumulativity); a fence
        // in every thread cost more than the columns' arithmetic
        __threadfence();
        atomicExch(flag, tag);
    }
    __syncthreads();  // the count, for this block's own apply_moves
}

__device__ void getrf(float* A, long long lda, int m, int w, int* ipiv, int row_offset,
                      float* rows, int* moves, unsigned* flags, unsigned tag)
{
    __shared__ Shared s;
    const int b = blockIdx.x, blocks = gridDim.x, first_column = b * BW;
    const int width = min(BW, w - first_column);
    float a[RPT][BW];
#pragma unroll
    for (int r = 0; r < RPT; ++r) {
        const int i = threadIdx.x + r * T;
#pragma unroll
        for (int c = 0; c < BW; ++c)
            a[r][c] = i < m && c < width ? A[(first_column + c) * lda + i] : 0.0f;
    }
    for (int j = 0; j < blocks; ++j) {
        const Publication pub = published(rows, moves, j);
        if (j == b) {
            int position[RPT];
            factor(a, position, s, j * BW, width, m, ipiv, row_offset);
            publish(a, position, pub, s, j * BW, m, flags + j, tag);
            apply_moves(a, pub, s, m);  // this block's rows to their positions too
        } else {
            wait_for(flags + j, tag);
            apply_moves(a, pub, s, m);
            if (j < b) update(a, pub, s, j, m);
        }
        __syncthreads();  // the shared buffers are free for the next block column
    }
#pragma unroll
    for (int r = 0; r < RPT; ++r) {
        const int i = threadIdx.x + r * T;
        if (i >= m) continue;
#pragma unroll
        for (int c = 0; c < BW; ++c)
            if (c < width) A[(first_column + c) * lda + i] = a[r][c];
    }
}

}  // namespace short_panel

// A: the panel's top-left, lda; m x w (w <= m <= 1024, w <= 512), ceil(w / 32) blocks of 512
// threads, launched cooperatively; ipiv: the panel's w pivots (0-based rows + row_offset);
// rows, moves, flags: the publications' workspace (16 x 1024 x 32 floats, 16 x 129 ints, 16
// flags), tag: nonzero and new for every launch on this workspace.
extern "C" __global__ void __launch_bounds__(SHORT_PANEL_THREADS, 1)
getrf_short_panel_s(float* A, long long lda, int m, int w, int* ipiv, int row_offset,
                    float* rows, int* moves, unsigned* flags, unsigned tag)
{
    short_panel::getrf(A, lda, m, w, ipiv, row_offset, rows, moves, flags, tag);
}
