// Tournament pivoting for the leaves of recursive LU panels: the pivot rows of an m x w leaf
// (w <= 32) chosen by a tree of partial-pivoting LUs (TSLU, the panel of CALU: Grigori, Demmel
// and Xiang, SIAM J. Matrix Anal. Appl. 32, 2011), for the four element types.
//
// Why: partial pivoting needs a device-wide reduction per column, and that is what limits a
// panel on the GPU (cuSOLVER's getrf: 6.7 us per column on an H100 whatever the height; our
// getrf_panel_fused: 5.2). A tournament needs none inside a column: each thread block runs
// LAPACK's getf2 on its own rows and proposes the w rows it pivoted on; the proposals meet in a
// tree whose nodes each run getf2 on the rows their children proposed (the rows as they are in
// the panel, not as a child left them); the root's pivot rows, in its order, are the leaf's.
// The device-wide steps are one per tree level, not one per column. What it costs instead:
// the tree's depth times a block's getf2, about 0.8 us per column per level on the H100
// (perf/RESULTS.md, perf/probe_tslu.py), so it beats partial pivoting only by a little.
//
// tslu_* (one launch): the tree, the pivots and the leaf's first w rows.
//   Level 0 has ceil(m / chunk) nodes, node b the rows [b chunk, (b + 1) chunk); each level
//   above has ceil(nodes / fan) nodes, node q the parent of nodes [q fan, (q + 1) fan). A block
//   of `chunk` threads runs a level-0 node, then climbs: it publishes its proposal (row indices
//   in `candidates`, their number in `counts`, one slot per node, level after level), counts
//   itself in at its parent (`arrivals`), and the last of the parent's children to arrive runs
//   the parent (the threadfence reduction of the CUDA programming guide) and resets the
//   parent's counter for the next launch (the host zeroes the counters once, when it makes
//   them). A node's getf2 keeps one row per thread in shared memory and never moves rows: per
//   column one barrier, for the block-wide argmax (the first largest |a|, |re| + |im| for
//   complex, as LAPACK's i?amax; found by redux instructions on magnitude keys); the pivot row
//   is then read where it lies, and a chosen row is not written again, so the root's chosen
//   rows hold L11 \ U11. The root writes the pivots as LAPACK's sequence of interchanges
//   (0-based rows + row_offset), the leaf's first w rows, the first rows the interchanges send
//   below, and the list of row moves the interchanges amount to (`moves`: a count, then
//   destination and source pairs; at most 2 w).
// tslu_finish_* (one launch, after): A21 := A21 U11^-1 in the leaf's columns, one row per
//   thread (a column whose U(k, k) is exactly zero is left unscaled, as getf2 leaves it: zero
//   where the panel's column is), and the moves applied to the panel's other columns, so the
//   recursion above needs no laswp of its own.
//
// Bytes moved: the leaf read once by level 0, and again (rows by index) by the nodes above; the
// finish reads and writes the leaf's rows below w once and 2 w rows of the other columns.
//
// Requires getrf_panel.cu's LuArith (compiled in the same module, before this file).

#define TSLU_MAX_WIDTH 32

// A candidate's magnitude as an unsigned key that orders as the magnitudes do: 1 + the bits of
// |a| (a nonnegative float or double orders as its bit pattern), 1 for a NaN (the last choice,
// with the zeros), 0 for no candidate. The warp's largest key is one redux instruction (float)
// or two (double: the high word, then the low word among the highest).
__device__ inline unsigned magnitude_key(float v, bool active)
{
    return active ? 1u + (v == v ? __float_as_uint(v) : 0u) : 0u;
}
__device__ inline unsigned long long magnitude_key(double v, bool active)
{
    return active ? 1ull + (v == v ? (unsigned long long)__double_as_longlong(v) : 0ull) : 0ull;
}

// The warp's largest key and the lowest lane holding it.
__device__ inline void warp_best(unsigned key, unsigned& best, int& lane)
{
    best = __reduce_max_sync(0xffffffffu, key);
    lane = __ffs(__ballot_sync(0xffffffffu, key == best)) - 1;
}
__device__ inline void warp_best(unsigned long long key, unsigned long long& best, int& lane)
{
    const unsigned all = 0xffffffffu;
    const unsigned high = unsigned(key >> 32), top = __reduce_max_sync(all, high);
    const unsigned low = high == top ? unsigned(key) : 0u;
    const unsigned low_top = __reduce_max_sync(all, low);
    lane = __ffs(__ballot_sync(all, high == top && low == low_top)) - 1;
    best = (unsigned long long)top << 32 | low_top;
}

// row[k stride] -= l pivot_row[k pivot_stride] for k in [first, w), eight at a time with their
// loads issued before their stores (the compiler cannot tell that the rows never overlap, and
// would otherwise wait for each store before the next load).
template <typename T>
__device__ inline void subtract_multiple(T* row, int stride, const T* pivot_row,
                                         int pivot_stride, T l, int first, int w)
{
    for (int k0 = first; k0 < w; k0 += 8) {
        T a[8], p[8];
#pragma unroll
        for (int k = 0; k < 8; ++k)
            if (k0 + k < w) { a[k] = row[(k0 + k) * stride]; p[k] = pivot_row[(k0 + k) * pivot_stride]; }
#pragma unroll
        for (int k = 0; k < 8; ++k)
            if (k0 + k < w) row[(k0 + k) * stride] = LuArith<T>::minus_product(a[k], l, p[k]);
    }
}

// getf2 on the node's rows, thread t holding row t of the tile (column-major, leading dimension
// R = blockDim.x, w columns; active while t < rows and not yet chosen; `index` its leaf row).
// Per column one barrier: the block's argmax (warp bests through `slots`, double-buffered by
// the column's parity); the pivot row is then read where it is (a chosen row is never written
// again), so it stays in the tile with L(j, 0:j) and U(j, j:w). On return chosen[j] holds the
// leaf row of pivot j and chosen_tile[j] its tile row. Returns min(rows, w).
template <typename T>
__device__ int getf2_node(T* tile, int index, int rows, int w, int* chosen, int* chosen_tile,
                          unsigned long long (*slot_key)[32], int (*slot_lane)[32])
{
    typedef LuArith<T> Ar;
    typedef typename Ar::Real Real;
    typedef decltype(magnitude_key(Real(0), true)) Key;
    const int tid = threadIdx.x, R = blockDim.x, warps = blockDim.x >> 5;
    const int steps = min(rows, w);
    bool active = tid < rows;
    int my_column = -1;
    T* mine = tile + tid;
    for (int j = 0; j < steps; ++j) {
        Key best;
        int lane;
        warp_best(magnitude_key(Ar::abs1(mine[(size_t)j * R]), active), best, lane);
        if ((tid & 31) == 0) { slot_key[j & 1][tid >> 5] = best; slot_lane[j & 1][tid >> 5] = lane; }
        __syncthreads();
        // every warp takes the best of the warps' bests (the first warp on a tie) the same way
        Key block_best;
        int winner;
        warp_best(Key((tid & 31) < warps ? slot_key[j & 1][tid & 31] : 0), block_best, winner);
        winner = winner * 32 + slot_lane[j & 1][winner];
        if (tid == winner) { active = false; my_column = j; }
        if (active && block_best > 1) {  // a nonzero pivot: L's column and the update
            const T* pivot_row = tile + winner;
            const T pivot = pivot_row[(size_t)j * R];
            // getf2 multiplies by the reciprocal unless that would overflow
            const T l = Ar::modulus(pivot) >= Ar::safe_min()
                            ? Ar::mul(mine[(size_t)j * R], Ar::inv(pivot))
                            : Ar::div(mine[(size_t)j * R], pivot);
            mine[(size_t)j * R] = l;
            subtract_multiple(mine, R, pivot_row, R, l, j + 1, w);
        }
    }
    if (my_column >= 0) { chosen[my_column] = index; chosen_tile[my_column] = tid; }
    __syncthreads();
    return steps;
}

// Thread t's row of the leaf into the tile (its row t): the loads first, so they are in flight
// together.
template <typename T>
__device__ void load_row(T* tile, const T* __restrict__ A, long long lda, int row, int w)
{
    const int R = blockDim.x;
    for (int k0 = 0; k0 < w; k0 += 8) {
        T v[8];
#pragma unroll
        for (int k = 0; k < 8; ++k)
            if (k0 + k < w) v[k] = A[row + (k0 + k) * lda];
#pragma unroll
        for (int k = 0; k < 8; ++k)
            if (k0 + k < w) tile[threadIdx.x + (size_t)(k0 + k) * R] = v[k];
    }
}

// The root's interchanges, by warp 0: `chosen[j]` the leaf row chosen j-th. Lane j tracks where
// chosen[j] is as the interchanges go (`where`) and which of the first w rows sits at position
// j (`holds`); an interchange j <-> p with p >= w sends that row to p, a move the lane records
// unless a later interchange takes position p again. Writes ipiv, the rows' moves (each lane
// its own: row j <- chosen[j], and the row it sent below) to move_to / move_from, and the
// list of all moves for the panel's other columns to `moves` (count, then pairs).
__device__ void interchanges_and_moves(const int* chosen, int w, int* ipiv, int row_offset,
                                       int* move_to, int* move_from, int* moves)
{
    const unsigned all = 0xffffffffu;
    const int lane = threadIdx.x;
    int where = lane < w ? chosen[lane] : -1, holds = lane, to = -1, from = -1;
    for (int j = 0; j < w; ++j) {
        const int p = __shfl_sync(all, where, j);
        const int at_j = __shfl_sync(all, holds, j);
        const int at_p = __shfl_sync(all, holds, p < w ? p : 0);
        if (p < w) {
            if (lane == p) holds = at_j;
        } else {
            if (to == p) to = -1;
            if (lane == j) { to = p; from = at_j; }
        }
        if (lane == j) holds = at_p;  // (for p >= w, the chosen row: never read again)
        if (lane > j && where == j) where = p;
        if (lane == 0) ipiv[j] = p + row_offset;
    }
    move_to[lane] = to;
    move_from[lane] = from;
    const bool up = lane < w && chosen[lane] != lane, down = to >= 0;
    const unsigned ups = __ballot_sync(all, up), downs = __ballot_sync(all, down);
    const unsigned before = (1u << lane) - 1;
    if (up) {
        const int e = __popc(ups & before);
        moves[1 + 2 * e] = lane;
        moves[2 + 2 * e] = chosen[lane];
    }
    if (down) {
        const int e = __popc(ups) + __popc(downs & before);
        moves[1 + 2 * e] = to;
        moves[2 + 2 * e] = from;
    }
    if (lane == 0) moves[0] = __popc(ups) + __popc(downs);
}

template <typename T>
__device__ void tslu(T* A, long long lda, int m, int w, int fan, int* candidates, int* counts,
                     unsigned* arrivals, int* ipiv, int row_offset, int* moves)
{
    extern __shared__ double2 shared_words[];
    const int chunk = blockDim.x;                      // rows of a level-0 node; >= fan w
    T* tile = reinterpret_cast<T*>(shared_words);     // chunk x w, leading dimension chunk
    __shared__ unsigned long long slot_key[2][32];
    __shared__ int slot_lane[2][32];
    __shared__ int chosen[TSLU_MAX_WIDTH], chosen_tile[TSLU_MAX_WIDTH], move_to[32], move_from[32];
    __shared__ bool is_last;
    const int tid = threadIdx.x;

    // level 0: this block's own rows
    int node = blockIdx.x, nodes = (m + chunk - 1) / chunk, level_base = 0;
    int rows = min(m, (node + 1) * chunk) - node * chunk;
    int index = node * chunk + tid;
    if (tid < rows) load_row(tile, A, lda, index, w);
    __syncthreads();
    int count = getf2_node(tile, index, rows, w, chosen, chosen_tile, slot_key, slot_lane);

    while (nodes > 1) {
        // publish, then count in at the parent; the last child to arrive runs it
        const int slot = level_base + node;
        if (tid < count) candidates[(size_t)slot * w + tid] = chosen[tid];
        if (tid == 0) counts[slot] = count;
        __threadfence();
        __syncthreads();
        const int parent = node / fan, first_child = parent * fan;
        const int children = min(fan, nodes - first_child);
        const int parent_slot = level_base + nodes + parent;
        if (tid == 0) {
            is_last = atomicAdd(arrivals + parent_slot, 1u) == unsigned(children - 1);
            if (is_last) arrivals[parent_slot] = 0;
        }
        __syncthreads();
        if (!is_last) return;
        __threadfence();
        // thread t takes proposal t of the children's, in the children's order
        rows = 0;
        for (int c = 0; c < children; ++c) {
            const int child_slot = level_base + first_child + c;
            const int proposed = __ldcg(counts + child_slot);
            if (tid >= rows && tid < rows + proposed)
                index = __ldcg(candidates + (size_t)child_slot * w + tid - rows);
            rows += proposed;
        }
        if (tid < rows) load_row(tile, A, lda, index, w);
        __syncthreads();
        count = getf2_node(tile, index, rows, w, chosen, chosen_tile, slot_key, slot_lane);
        level_base += nodes;
        nodes = (nodes + fan - 1) / fan;
        node = parent;
    }

    // the root (m >= w, so count == w): its pivot rows are tile rows chosen_tile[0:w]
    if (tid < 32) interchanges_and_moves(chosen, w, ipiv, row_offset, move_to, move_from, moves);
    T* first_rows = tile + (size_t)chunk * w;  // rows 0:w of the leaf, before they move
    for (int e = tid; e < w * w; e += blockDim.x)
        first_rows[e] = A[e % w + (long long)(e / w) * lda];
    __syncthreads();
    for (int e = tid; e < w * w; e += blockDim.x) {
        const int i = e % w, k = e / w;
        if (move_to[i] >= 0)
            A[move_to[i] + (long long)k * lda] = first_rows[move_from[i] + k * w];
        A[i + (long long)k * lda] = tile[chosen_tile[i] + (size_t)k * chunk];
    }
}

// After tslu: blocks [0, row_blocks) solve A21 U11^-1 for the leaf's rows w..m-1 (thread per
// row, its row in shared memory); the others apply the moves to the panel's other columns
// (thread per column). `A` is
// the panel's top-left at the leaf's first row; the leaf is its columns [leaf, leaf + w).
template <typename T>
__device__ void tslu_finish(T* A, long long lda, int m, int w, int panel_cols, int leaf,
                            int row_blocks, const int* moves)
{
    typedef LuArith<T> Ar;
    __shared__ T upper[TSLU_MAX_WIDTH * TSLU_MAX_WIDTH];
    __shared__ int move[2 * 2 * TSLU_MAX_WIDTH + 1];
    const int tid = threadIdx.x;
    if (blockIdx.x < row_blocks) {
        extern __shared__ double2 shared_words[];
        T* rows = reinterpret_cast<T*>(shared_words);  // thread t's row at rows[t + k R]
        const int R = blockDim.x;
        T* L = A + (long long)leaf * lda;
        for (int e = tid; e < w * w; e += blockDim.x) upper[e] = L[e % w + (long long)(e / w) * lda];
        const long long i = w + (long long)blockIdx.x * blockDim.x + tid;
        if (i < m) load_row(rows, L, lda, i, w);
        __syncthreads();
        if (i >= m) return;
        T* mine = rows + tid;
        // right-looking, so that each column's division waits only for its own updates
        for (int k = 0; k < w; ++k) {
            const T d = upper[k + k * w];
            const T x = Ar::abs1(d) != 0 ? Ar::div(mine[k * R], d) : mine[k * R];
            mine[k * R] = x;
            subtract_multiple(mine, R, upper + k, w, x, k + 1, w);  // U(k, q) = upper[k + q w]
        }
        for (int k = 0; k < w; ++k) L[i + k * lda] = mine[k * R];
        return;
    }
    const int count = moves[0];
    for (int e = tid; e < 1 + 2 * count; e += blockDim.x) move[e] = moves[e];
    __syncthreads();
    int c = (blockIdx.x - row_blocks) * blockDim.x + tid;
    if (c >= leaf) c += w;
    if (c >= panel_cols) return;
    T* column = A + (long long)c * lda;
    T moved[2 * TSLU_MAX_WIDTH];
    for (int e = 0; e < count; ++e) moved[e] = column[move[2 + 2 * e]];
    for (int e = 0; e < count; ++e) column[move[1 + 2 * e]] = moved[e];
}

#define TSLU(suffix, T)                                                                            \
    extern "C" __global__ void tslu_##suffix(T* A, long long lda, int m, int w, int fan,          \
                                             int* candidates, int* counts, unsigned* arrivals,     \
                                             int* ipiv, int row_offset, int* moves)                \
    {                                                                                              \
        tslu<T>(A, lda, m, w, fan, candidates, counts, arrivals, ipiv, row_offset, moves);        \
    }                                                                                              \
    extern "C" __global__ void tslu_finish_##suffix(T* A, long long lda, int m, int w,            \
                                                    int panel_cols, int leaf, int row_blocks,      \
                                                    const int* moves)                              \
    {                                                                                              \
        tslu_finish<T>(A, lda, m, w, panel_cols, leaf, row_blocks, moves);                         \
    }
TSLU(s, float)
TSLU(d, double)
TSLU(c, cuFloatComplex)
TSLU(z, cuDoubleComplex)
