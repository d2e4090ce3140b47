// Kernels for stacks of matrices (hybridla/backend/cuda_batched.py): a stack is `count` members
// of m x n, each column-major with leading dimension ld, member b at A + b * stride (elements).
// cuBLAS and cuSOLVER do the factorizations where they have batched routines; these kernels do
// what they lack:
//
//   stack_copy_<w>      a stack in any strided layout (row- or column-major members, broadcast or
//                       sliced batch axes: per-member offsets) into a dense column-major one, or
//                       one triangle of it, or zeros; through a 32 x 32 tile, so that a row-major
//                       source is read and the column-major result written in whole sectors.
//   fill_pointers       the device array of member pointers cuBLAS' pointer-array routines take.
//   pivots_gather       pivots of any layout into a dense count x k int32 array, plus a constant
//                       (0-based <-> LAPACK's 1-based).
//   getrf_panel_batched_<t>  the LU with partial pivoting of every member's panel
//                       A[k:m, k:k+jb], one block of threads per member, the panel in shared
//                       memory for the whole launch: LAPACK's getf2, column by column.
//   laswp_batched_<w>   a step's row interchanges on every member's columns outside the panel.
//   getrf_warp_<t>_<N>  the whole LU with partial pivoting of members of at most N = 8, 16, 32
//                       rows and columns, one warp per member, a row per lane in registers, read
//                       from the user's stack in its own layout (no copy first).
//   potrf_warp_<t>_<N>  the Cholesky factorization of members of order up to N the same way,
//                       the other triangle kept or zeroed on the way out.
//
// Suffixes: <w> the element's size in bytes (4, 8, 16: elements move as raw words, so float,
// double and complex64 (8 B) and complex128 (16 B) share kernels); <t> s, d, c, z.
// Batch loops: members run along gridDim.y (stack_copy, laswp) or gridDim.x (the panel) and loop
// when there are more members than the grid has blocks.

#include <cuComplex.h>
#include <climits>

// -- arithmetic of the four element types --------------------------------------------------------
template <typename T> struct BatchedArith;
template <> struct BatchedArith<float> {
    typedef float Real;
    __device__ static Real abs1(float x) { return fabsf(x); }
    __device__ static bool is_zero(float x) { return x == 0.0f; }
    __device__ static float div(float a, float b) { return a / b; }
    __device__ static float minus_product(float c, float a, float b) { return fmaf(-a, b, c); }
    __device__ static Real real(float x) { return x; }
    __device__ static float from_real(Real x) { return x; }
    __device__ static float conj(float x) { return x; }
};
template <> struct BatchedArith<double> {
    typedef double Real;
    __device__ static Real abs1(double x) { return fabs(x); }
    __device__ static bool is_zero(double x) { return x == 0.0; }
    __device__ static double div(double a, double b) { return a / b; }
    __device__ static double minus_product(double c, double a, double b) { return fma(-a, b, c); }
    __device__ static Real real(double x) { return x; }
    __device__ static double from_real(Real x) { return x; }
    __device__ static double conj(double x) { return x; }
};
// complex: |re| + |im| for the pivot search, as LAPACK's i?amax (scabs1 / dcabs1)
template <> struct BatchedArith<cuFloatComplex> {
    typedef float Real;
    __device__ static Real abs1(cuFloatComplex x) { return fabsf(x.x) + fabsf(x.y); }
    __device__ static bool is_zero(cuFloatComplex x) { return x.x == 0.0f && x.y == 0.0f; }
    __device__ static cuFloatComplex div(cuFloatComplex a, cuFloatComplex b) { return cuCdivf(a, b); }
    __device__ static cuFloatComplex minus_product(cuFloatComplex c, cuFloatComplex a,
                                                   cuFloatComplex b)
    { return cuCsubf(c, cuCmulf(a, b)); }
    __device__ static Real real(cuFloatComplex x) { return x.x; }
    __device__ static cuFloatComplex from_real(Real x) { return make_cuFloatComplex(x, 0.0f); }
    __device__ static cuFloatComplex conj(cuFloatComplex x) { return cuConjf(x); }
};
template <> struct BatchedArith<cuDoubleComplex> {
    typedef double Real;
    __device__ static Real abs1(cuDoubleComplex x) { return fabs(x.x) + fabs(x.y); }
    __device__ static bool is_zero(cuDoubleComplex x) { return x.x == 0.0 && x.y == 0.0; }
    __device__ static cuDoubleComplex div(cuDoubleComplex a, cuDoubleComplex b) { return cuCdiv(a, b); }
    __device__ static cuDoubleComplex minus_product(cuDoubleComplex c, cuDoubleComplex a,
                                                    cuDoubleComplex b)
    { return cuCsub(c, cuCmul(a, b)); }
    __device__ static Real real(cuDoubleComplex x) { return x.x; }
    __device__ static cuDoubleComplex from_real(Real x) { return make_cuDoubleComplex(x, 0.0); }
    __device__ static cuDoubleComplex conj(cuDoubleComplex x) { return cuConj(x); }
};

// -- copies ------------------------------------------------------------------------------------
// Which elements (r, c) of an m x n member a copy writes ("part"): 0 all, 1 on and above the
// diagonal, 2 on and below it, 3 strictly above, 4 strictly below. With rest != 0 the others are
// set to zero; with src == NULL the part itself is set to zero.
__device__ inline bool in_part(int r, int c, int part)
{
    switch (part) {
        case 1: return r <= c;
        case 2: return r >= c;
        case 3: return r < c;
        case 4: return r > c;
        default: return true;
    }
}

// dst member b (column-major, dst_ld, dst_stride) := src member b, whose element (r, c) is at
// src[offset_b + r * rs + c * cs], offset_b = offsets[b] (or b * src_stride without offsets).
// Block 32 x 8 threads, one 32 x 32 tile of a member per block; grid.x the tiles of a member
// (row tiles fastest), grid.y the members. A source with unit row stride (column-major members)
// is read down the columns, any other across the rows (a row-major one: whole sectors), and the
// tile is written down the columns of dst.
template <typename W>
__device__ void stack_copy(const W* src, const long long* offsets, long long src_stride,
                           long long rs, long long cs, W* dst, long long dst_ld,
                           long long dst_stride, int m, int n, long long count, int part,
                           int rest)
{
    __shared__ W tile[32][33];
    const int tiles_m = (m + 31) / 32;
    const int r0 = (int)(blockIdx.x % tiles_m) * 32, c0 = (int)(blockIdx.x / tiles_m) * 32;
    const int tx = threadIdx.x, ty = threadIdx.y;
    const W zero = W();
    for (long long b = blockIdx.y; b < count; b += gridDim.y) {
        if (src != 0) {
            const W* s = src + (offsets != 0 ? offsets[b] : b * src_stride);
            if (rs == 1) {
                for (int cc = ty; cc < 32; cc += 8) {
                    const int r = r0 + tx, c = c0 + cc;
                    if (r < m && c < n) tile[tx][cc] = s[r + (long long)c * cs];
                }
            } else {
                for (int rr = ty; rr < 32; rr += 8) {
                    const int r = r0 + rr, c = c0 + tx;
                    if (r < m && c < n) tile[rr][tx] = s[(long long)r * rs + (long long)c * cs];
                }
            }
        }
        __syncthreads();
        W* d = dst + b * dst_stride;
        for (int cc = ty; cc < 32; cc += 8) {
            const int r = r0 + tx, c = c0 + cc;
            if (r < m && c < n) {
                if (in_part(r, c, part)) d[r + (long long)c * dst_ld] = src != 0 ? tile[tx][cc] : zero;
                else if (rest) d[r + (long long)c * dst_ld] = zero;
            }
        }
        __syncthreads();  // the tile is refilled for the next member
    }
}

extern "C" {
__global__ void stack_copy_4(const float* src, const long long* offsets, long long src_stride,
                             long long rs, long long cs, float* dst, long long dst_ld,
                             long long dst_stride, int m, int n, long long count, int part,
                             int rest)
{ stack_copy<float>(src, offsets, src_stride, rs, cs, dst, dst_ld, dst_stride, m, n, count, part, rest); }
__global__ void stack_copy_8(const double* src, const long long* offsets, long long src_stride,
                             long long rs, long long cs, double* dst, long long dst_ld,
                             long long dst_stride, int m, int n, long long count, int part,
                             int rest)
{ stack_copy<double>(src, offsets, src_stride, rs, cs, dst, dst_ld, dst_stride, m, n, count, part, rest); }
__global__ void stack_copy_16(const double2* src, const long long* offsets, long long src_stride,
                              long long rs, long long cs, double2* dst, long long dst_ld,
                              long long dst_stride, int m, int n, long long count, int part,
                              int rest)
{ stack_copy<double2>(src, offsets, src_stride, rs, cs, dst, dst_ld, dst_stride, m, n, count, part, rest); }

// out[b] := base + index_b * stride + offset (bytes), index_b = index[b] (or b without index):
// the pointer arrays of cuBLAS' and cuSOLVER's batched routines, a broadcast member repeated.
__global__ void fill_pointers(unsigned long long* out, unsigned long long base, long long stride,
                              long long offset, const long long* index, long long count)
{
    for (long long b = blockIdx.x * (long long)blockDim.x + threadIdx.x; b < count;
         b += (long long)gridDim.x * blockDim.x)
        out[b] = base + (unsigned long long)((index != 0 ? index[b] : b) * stride + offset);
}

// dst[b * k + i] := src[offset_b + i * step] + delta for i < k, b < count, offset_b = offsets[b]
// (or b * src_stride). In place (src == dst, src_stride == k, step == 1) each element is read and
// written by the same thread.
__global__ void pivots_gather(const int* src, const long long* offsets, long long src_stride,
                              long long step, int* dst, int k, long long count, int delta)
{
    const long long total = count * (long long)k;
    for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < total;
         e += (long long)gridDim.x * blockDim.x) {
        const long long b = e / k, i = e % k;
        const long long offset = offsets != 0 ? offsets[b] : b * src_stride;
        dst[e] = src[offset + i * step] + delta;
    }
}
}  // extern "C"

// -- LU panels -----------------------------------------------------------------------------------
// (value, row) := the better candidate: the larger magnitude, the lower row on a tie; an empty
// candidate has row INT_MAX. A NaN never displaces a candidate (i?amax's comparisons).
template <typename Real>
__device__ inline void better(Real& value, int& row, Real other_value, int other_row)
{
    if (other_row == INT_MAX) return;
    if (row == INT_MAX || other_value > value || (other_value == value && other_row < row)) {
        value = other_value;
        row = other_row;
    }
}

// The LU with partial pivoting of the panel P = A_b[k:k+rows, k:k+jb] of every member b:
// LAPACK's getf2 on the panel held in shared memory (column-major, leading dimension rows), one
// block per member. For each column j: the pivot p is the first row of largest |P(i, j)|
// (|re| + |im|), i >= j; rows j and p of the panel are swapped (not when the column is exactly
// zero: then p == j and info records it), P(j+1:, j) /= P(j, j) and the rank-1 update
// P(j+1:, j+1:) -= P(j+1:, j) P(j, j+1:). Pivots go to ipiv_b[k + j] as global 0-based rows
// (k + p); the first exactly zero pivot of a member to info[b] (global, 1-based) unless info[b]
// already holds an earlier one. The interchanges outside the panel are laswp_batched's.
// Shared memory: rows * jb elements (dynamic), set by the launch.
template <typename T>
__device__ void getrf_panel_batched(T* A, long long stride, int lda, int rows, int jb, int k,
                                    int* ipiv, long long ipiv_stride, int* info, long long count)
{
    typedef BatchedArith<T> Ar;
    typedef typename Ar::Real Real;
    extern __shared__ double2 panel_words[];
    T* tile = reinterpret_cast<T*>(panel_words);
    __shared__ Real warp_value[32];
    __shared__ int warp_row[32];
    __shared__ int pivot;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
    for (long long b = blockIdx.x; b < count; b += gridDim.x) {
        T* P = A + b * stride + k + (long long)k * lda;
        for (int e = threadIdx.x; e < rows * jb; e += blockDim.x)
            tile[e] = P[e % rows + (long long)(e / rows) * lda];
        __syncthreads();
        for (int j = 0; j < jb; ++j) {
            T* column = tile + (long long)j * rows;
            // the pivot: each thread's best of its rows, then the warps', then the block's
            Real value = Real(0);
            int row = INT_MAX;
            for (int r = j + threadIdx.x; r < rows; r += blockDim.x)
                better(value, row, Ar::abs1(column[r]), r);
            for (int offset = 16; offset > 0; offset >>= 1)
                better(value, row, __shfl_down_sync(0xffffffffu, value, offset),
                       __shfl_down_sync(0xffffffffu, row, offset));
            if (lane == 0) { warp_value[warp] = value; warp_row[warp] = row; }
            __syncthreads();
            if (warp == 0) {
                value = lane < warps ? warp_value[lane] : Real(0);
                row = lane < warps ? warp_row[lane] : INT_MAX;
                for (int offset = 16; offset > 0; offset >>= 1)
                    better(value, row, __shfl_down_sync(0xffffffffu, value, offset),
                           __shfl_down_sync(0xffffffffu, row, offset));
                if (lane == 0) {
                    const int p = row == INT_MAX ? j : row;  // (rows > j: never empty)
                    pivot = p;
                    ipiv[b * ipiv_stride + k + j] = k + p;
                    if (Ar::is_zero(column[p]) && info[b] == 0) info[b] = k + j + 1;
                }
            }
            __syncthreads();
            const int p = pivot;
            if (p != j)
                for (int c = threadIdx.x; c < jb; c += blockDim.x) {
                    const T t = tile[j + (long long)c * rows];
                    tile[j + (long long)c * rows] = tile[p + (long long)c * rows];
                    tile[p + (long long)c * rows] = t;
                }
            __syncthreads();
            const T diagonal = column[j];
            if (!Ar::is_zero(diagonal))  // a zero column: nothing to eliminate (getf2)
                for (int r = j + 1 + threadIdx.x; r < rows; r += blockDim.x) {
                    const T l = Ar::div(column[r], diagonal);
                    column[r] = l;
                    for (int c = j + 1; c < jb; ++c)
                        tile[r + (long long)c * rows] =
                            Ar::minus_product(tile[r + (long long)c * rows], l,
                                              tile[j + (long long)c * rows]);
                }
            __syncthreads();
        }
        for (int e = threadIdx.x; e < rows * jb; e += blockDim.x)
            P[e % rows + (long long)(e / rows) * lda] = tile[e];
        __syncthreads();  // the tile is refilled for the next member
    }
}

extern "C" {
__global__ void getrf_panel_batched_s(float* A, long long stride, int lda, int rows, int jb,
                                      int k, int* ipiv, long long ipiv_stride, int* info,
                                      long long count)
{ getrf_panel_batched<float>(A, stride, lda, rows, jb, k, ipiv, ipiv_stride, info, count); }
__global__ void getrf_panel_batched_d(double* A, long long stride, int lda, int rows, int jb,
                                      int k, int* ipiv, long long ipiv_stride, int* info,
                                      long long count)
{ getrf_panel_batched<double>(A, stride, lda, rows, jb, k, ipiv, ipiv_stride, info, count); }
__global__ void getrf_panel_batched_c(cuFloatComplex* A, long long stride, int lda, int rows,
                                      int jb, int k, int* ipiv, long long ipiv_stride, int* info,
                                      long long count)
{ getrf_panel_batched<cuFloatComplex>(A, stride, lda, rows, jb, k, ipiv, ipiv_stride, info, count); }
__global__ void getrf_panel_batched_z(cuDoubleComplex* A, long long stride, int lda, int rows,
                                      int jb, int k, int* ipiv, long long ipiv_stride, int* info,
                                      long long count)
{ getrf_panel_batched<cuDoubleComplex>(A, stride, lda, rows, jb, k, ipiv, ipiv_stride, info, count); }
}  // extern "C"

// Pivots k0..k1-1 (global 0-based rows) applied in order to every column of each member outside
// the panel's columns c0..c1-1. The interchanges compose into one permutation of rows k0..m-1
// (row r of the result is row from[r] of the member), made in shared memory by one thread
// (k1 - k0 exchanges of indices); only the rows it moves are copied: rows k0..k1-1, in order,
// and the rows below k1 it takes them from, at most k1 - k0 more. Grid: x the column chunks
// (`cols` columns outside the panel per block), y the members (looped). Each block stages its
// chunk's moved rows in shared memory (read all, then write all), so a row may move anywhere.
// Dynamic shared memory: (m - k0) + 2 (k1 - k0) ints, then 2 (k1 - k0) cols elements.
template <typename W>
__device__ void laswp_batched(W* A, long long stride, int lda, int m, int n, int c0, int c1,
                              const int* ipiv, long long ipiv_stride, int k0, int k1,
                              long long count, int cols)
{
    extern __shared__ double2 laswp_words[];
    const int rows = m - k0, jb = k1 - k0;
    int* from = reinterpret_cast<int*>(laswp_words);          // rows entries
    int* moved = from + rows;                                 // 2 jb entries
    W* staged = reinterpret_cast<W*>(laswp_words + (((rows + 2 * jb) * 4 + 15) / 16));
    __shared__ int moved_count;
    const int first = blockIdx.x * cols, outside = n - (c1 - c0);
    const int width = min(cols, outside - first);
    if (width <= 0) return;
    for (long long b = blockIdx.y; b < count; b += gridDim.y) {
        const int* piv = ipiv + b * ipiv_stride;
        for (int r = threadIdx.x; r < rows; r += blockDim.x) from[r] = r;
        for (int i = threadIdx.x; i < jb; i += blockDim.x) moved[i] = i;  // rows k0..k1-1
        if (threadIdx.x == 0) moved_count = jb;
        __syncthreads();
        if (threadIdx.x == 0)
            for (int i = 0; i < jb; ++i) {
                const int p = piv[k0 + i] - k0;
                const int t = from[i]; from[i] = from[p]; from[p] = t;
            }
        __syncthreads();
        for (int r = jb + threadIdx.x; r < rows; r += blockDim.x)
            if (from[r] != r) moved[atomicAdd(&moved_count, 1)] = r;
        __syncthreads();
        const int count_moved = moved_count, items = count_moved * width;
        W* member = A + b * stride + k0;
        for (int t = threadIdx.x; t < items; t += blockDim.x) {
            int col = first + t / count_moved;
            if (col >= c0) col += c1 - c0;
            staged[t] = member[from[moved[t % count_moved]] + (long long)col * lda];
        }
        __syncthreads();
        for (int t = threadIdx.x; t < items; t += blockDim.x) {
            int col = first + t / count_moved;
            if (col >= c0) col += c1 - c0;
            member[moved[t % count_moved] + (long long)col * lda] = staged[t];
        }
        __syncthreads();
    }
}

extern "C" {
__global__ void laswp_batched_4(float* A, long long stride, int lda, int m, int n, int c0,
                                 int c1, const int* ipiv, long long ipiv_stride, int k0, int k1,
                                 long long count, int cols)
{ laswp_batched<float>(A, stride, lda, m, n, c0, c1, ipiv, ipiv_stride, k0, k1, count, cols); }
__global__ void laswp_batched_8(double* A, long long stride, int lda, int m, int n, int c0,
                                 int c1, const int* ipiv, long long ipiv_stride, int k0, int k1,
                                 long long count, int cols)
{ laswp_batched<double>(A, stride, lda, m, n, c0, c1, ipiv, ipiv_stride, k0, k1, count, cols); }
__global__ void laswp_batched_16(double2* A, long long stride, int lda, int m, int n, int c0,
                                 int c1, const int* ipiv, long long ipiv_stride, int k0, int k1,
                                 long long count, int cols)
{ laswp_batched<double2>(A, stride, lda, m, n, c0, c1, ipiv, ipiv_stride, k0, k1, count, cols); }
}  // extern "C"

// -- small members: one warp each ----------------------------------------------------------------
// A value of lane `src`, every lane asking (a warp-wide exchange; complex: both halves).
__device__ inline float warp_get(float v, int src) { return __shfl_sync(0xffffffffu, v, src); }
__device__ inline double warp_get(double v, int src) { return __shfl_sync(0xffffffffu, v, src); }
__device__ inline cuFloatComplex warp_get(cuFloatComplex v, int src)
{ return make_cuFloatComplex(__shfl_sync(0xffffffffu, v.x, src), __shfl_sync(0xffffffffu, v.y, src)); }
__device__ inline cuDoubleComplex warp_get(cuDoubleComplex v, int src)
{ return make_cuDoubleComplex(__shfl_sync(0xffffffffu, v.x, src), __shfl_sync(0xffffffffu, v.y, src)); }

// The pivot of a column across a warp: among the candidate lanes, the largest value (values are
// >= 0, so their IEEE bits order as the numbers do), on a tie the lowest position; returns the
// winner's position * 32 + lane (every lane gets it). Three warp reductions where the device
// has them (sm_80 on), a butterfly of shuffles before.
template <typename Real>
__device__ inline int warp_pivot(Real value, int position, bool candidate, int lane)
{
    const unsigned all = 0xffffffffu;
    int key = candidate ? position * 32 + lane : INT_MAX;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    unsigned high, low;
    if (sizeof(Real) == 8) {
        high = candidate ? (unsigned)__double2hiint((double)value) : 0u;
        low = candidate ? (unsigned)__double2loint((double)value) : 0u;
    } else {
        high = candidate ? __float_as_uint((float)value) : 0u;
        low = 0u;
    }
    const unsigned top = __reduce_max_sync(all, high);
    const unsigned bottom = __reduce_max_sync(all, high == top ? low : 0u);
    return __reduce_min_sync(all, (high == top && low == bottom) ? key : INT_MAX);
#else
    Real best = candidate ? value : Real(0);
    for (int offset = 16; offset > 0; offset >>= 1) {
        const Real other = __shfl_xor_sync(all, best, offset);
        const int other_key = __shfl_xor_sync(all, key, offset);
        if (other_key != INT_MAX &&
            (key == INT_MAX || other > best || (other == best && other_key < key))) {
            best = other;
            key = other_key;
        }
    }
    return key;
#endif
}

// A member (element (r, c) at S[r rs + c cs], m x n) into the warp's shared tile, read along its
// unit stride: whole sectors for a row- or column-major member. Unrolled: the N loads are in
// flight at once, not one latency after another (with m and n constants, no bound tests).
template <typename T, int N>
__device__ inline void load_member(const T* S, long long rs, long long cs, int m, int n,
                                   T (*tile)[N + 1], int lane)
{
    if (cs == 1 && rs != 1) {  // row-major: the lanes read along a row
#pragma unroll
        for (int r = 0; r < N; ++r)
            if (r < m && lane < n) tile[r][lane] = S[r * rs + lane];
    } else {                   // column-major (or other): the lanes read down a column
#pragma unroll
        for (int c = 0; c < N; ++c)
            if (c < n && lane < m) tile[lane][c] = S[lane * rs + c * cs];
    }
    __syncwarp();
}

// warps per block of getrf_warp: 4, or 2 for 16-byte elements (the members' shared tiles stay
// under the 48 KiB a block may take without opting in); backend/cuda/batched.py launches so
template <typename T> struct WarpLuWarps { static const int value = sizeof(T) > 8 ? 2 : 4; };

// P A_b = L U for members of m x n, m, n <= N: LAPACK's getf2 with the member in registers, lane
// r holding row r of the source. A row interchange moves no data: each lane keeps `position`,
// where its row is in LAPACK's order so far, and a row that has been a pivot row is done (it
// holds a row of L to its left and of U from the diagonal on). Per column j: the pivot among the
// rows not done (warp_pivot: the largest |re| + |im|, the lowest position on a tie, as LAPACK's
// i?amax), LAPACK's interchange of positions j and the pivot's, the pivot row broadcast through
// shared memory from its lane, the multipliers and the rank-1 update. The member comes in through
// a shared tile (read along its unit stride: whole sectors for a row- or column-major member),
// and at the end each lane writes its row where its position says (a column's rows at once). Pivots 0-based to ipiv_b[0:min(m, n)], the first exactly zero
// pivot (1-based) to info[b], 0 if none.
// The source member b's element (r, c) is src[offset_b + r rs + c cs] (offset_b = offsets[b], or
// b * src_stride without offsets): the user's stack in its own layout, or A itself (each warp
// reads its whole member before it writes). The factors go to A, column-major (lda, stride).
// Warps per block: WarpLuWarps<T>; members looped by the grid.
// FULL: members of exactly N x N (m and n compile-time constants: no per-element bound tests
// in the unrolled loops, about a third fewer instructions than the general form)
template <typename T, int N, bool FULL>
__device__ void getrf_warp_members(const T* src, const long long* offsets, long long src_stride,
                                   long long rs, long long cs, T* A, long long stride, int lda,
                                   int m_given, int n_given, int* ipiv, long long ipiv_stride,
                                   int* info, long long count, T (*pivot_rows)[N],
                                   T (*tiles)[N][N + 1])
{
    const int m = FULL ? N : m_given, n = FULL ? N : n_given;
    typedef BatchedArith<T> Ar;
    const int lane = threadIdx.x & 31;
    const long long warps = blockDim.x >> 5;
    T* pivot_row = pivot_rows[threadIdx.x >> 5];
    T (*tile)[N + 1] = tiles[threadIdx.x >> 5];
    const int k = m < n ? m : n;
    const T zero = T();
    for (long long b = blockIdx.x * warps + (threadIdx.x >> 5); b < count;
         b += (long long)gridDim.x * warps) {
        const T* S = src + (offsets ? offsets[b] : b * src_stride);
        load_member<T, N>(S, rs, cs, m, n, tile, lane);
        T row[N];
#pragma unroll
        for (int c = 0; c < N; ++c)
            row[c] = (lane < m && c < n) ? tile[lane][c] : zero;
        int position = lane, first_zero = 0;
        bool done = false;
#pragma unroll
        for (int j = 0; j < N; ++j) {
            if (j < k) {  // the same for every lane of the warp
                const bool candidate = lane < m && !done;
                const int key = warp_pivot(Ar::abs1(row[j]), position, candidate, lane);
                const int pivot_lane = key & 31, pivot_position = key >> 5;
                if (lane == 0) ipiv[b * ipiv_stride + j] = pivot_position;
                if (position == j) position = pivot_position;
                if (lane == pivot_lane) { position = j; done = true; }
                __syncwarp();  // every lane has read the last pivot row
                if (lane == pivot_lane) {
#pragma unroll
                    for (int c = j; c < N; ++c) pivot_row[c] = row[c];
                }
                __syncwarp();
                const T pivot = pivot_row[j];
                const bool singular = Ar::is_zero(pivot);
                if (singular && first_zero == 0) first_zero = j + 1;
                if (!singular && candidate && lane != pivot_lane) {  // a zero column: nothing to do
                    const T l = Ar::div(row[j], pivot);
                    row[j] = l;
#pragma unroll
                    for (int c = j + 1; c < N; ++c)
                        if (c < n) row[c] = Ar::minus_product(row[c], l, pivot_row[c]);
                }
            }
        }
        T* M = A + b * stride;
#pragma unroll
        for (int c = 0; c < N; ++c)
            if (lane < m && c < n) M[position + (long long)c * lda] = row[c];
        if (lane == 0) info[b] = first_zero;
    }
}

template <typename T, int N>
__device__ void getrf_warp(const T* src, const long long* offsets, long long src_stride,
                           long long rs, long long cs, T* A, long long stride, int lda, int m,
                           int n, int* ipiv, long long ipiv_stride, int* info, long long count)
{
    // the shared memory here, once for both forms (a __shared__ array of each instantiation
    // would be a block's share each)
    const int W = WarpLuWarps<T>::value;
    __shared__ T pivot_rows[W][N];
    __shared__ T tiles[W][N][N + 1];  // + 1: a lane's row and a row of lanes both spread on banks
    if (m == N && n == N)
        getrf_warp_members<T, N, true>(src, offsets, src_stride, rs, cs, A, stride, lda, m, n,
                                       ipiv, ipiv_stride, info, count, pivot_rows, tiles);
    else
        getrf_warp_members<T, N, false>(src, offsets, src_stride, rs, cs, A, stride, lda, m, n,
                                        ipiv, ipiv_stride, info, count, pivot_rows, tiles);
}

#define GETRF_WARP(prefix, T, N)                                                                \
    __global__ void getrf_warp_##prefix##_##N(const T* src, const long long* offsets,          \
                                             long long src_stride, long long rs, long long cs,  \
                                             T* A, long long stride, int lda, int m, int n,     \
                                             int* ipiv, long long ipiv_stride, int* info,       \
                                             long long count)                                   \
    { getrf_warp<T, N>(src, offsets, src_stride, rs, cs, A, stride, lda, m, n, ipiv, ipiv_stride, \
                       info, count); }

extern "C" {
GETRF_WARP(s, float, 8)
GETRF_WARP(s, float, 16)
GETRF_WARP(s, float, 32)
GETRF_WARP(d, double, 8)
GETRF_WARP(d, double, 16)
GETRF_WARP(d, double, 32)
GETRF_WARP(c, cuFloatComplex, 8)
GETRF_WARP(c, cuFloatComplex, 16)
GETRF_WARP(c, cuFloatComplex, 32)
GETRF_WARP(z, cuDoubleComplex, 8)
GETRF_WARP(z, cuDoubleComplex, 16)
GETRF_WARP(z, cuDoubleComplex, 32)
}  // extern "C"

// A_b = L L^H (upper == 0) or U^H U (upper != 0) for members of order n <= N, a warp per member
// (potrf_warp_<t>_<N>): lane i holds row i of the lower triangle in registers (for "U" the
// conjugate of column i of the upper triangle: the same numbers). Per column j: d = sqrt(A(j, j))
// from lane j (not > 0, or NaN: info[b] := j + 1 and the member stops, as LAPACK's potrf), the
// column l(i, j) = A(i, j) / d below it, shared through shared memory, and the update
// A(i, c) -= l(i, j) conj(l(c, j)) for j < c <= i. The member is read through a shared tile as
// getrf_warp's (src, offsets, src_stride, rs, cs: the user's stack in its own layout, or A);
// the factor goes back into the tile's triangle (L, or U = L^H) and A (column-major) gets the
// whole tile: the other triangle the source's (keep != 0, cho_factor's) or zeros (cholesky's).
template <typename T, int N, bool FULL>  // FULL: members of exactly N x N, as getrf_warp's
__device__ void potrf_warp_members(const T* src, const long long* offsets, long long src_stride,
                                   long long rs, long long cs, T* A, long long stride, int lda,
                                   int n_given, int upper, int keep, int* info, long long count,
                                   T (*shared_columns)[N], T (*tiles)[N][N + 1])
{
    const int n = FULL ? N : n_given;
    typedef BatchedArith<T> Ar;
    typedef typename Ar::Real Real;
    const int lane = threadIdx.x & 31;
    const long long warps = blockDim.x >> 5;
    T* column = shared_columns[threadIdx.x >> 5];
    T (*tile)[N + 1] = tiles[threadIdx.x >> 5];
    const T zero = T();
    for (long long b = blockIdx.x * warps + (threadIdx.x >> 5); b < count;
         b += (long long)gridDim.x * warps) {
        const T* S = src + (offsets ? offsets[b] : b * src_stride);
        load_member<T, N>(S, rs, cs, n, n, tile, lane);
        T row[N];
#pragma unroll
        for (int c = 0; c < N; ++c)
            row[c] = (lane < n && c <= lane) ? (upper ? Ar::conj(tile[c][lane]) : tile[lane][c])
                                             : zero;
        int failed = 0;
#pragma unroll
        for (int j = 0; j < N; ++j) {
            if (j < n && !failed) {  // the same for every lane of the warp
                const Real d2 = __shfl_sync(0xffffffffu, Ar::real(row[j]), j);
                if (!(d2 > Real(0))) {
                    failed = j + 1;
                } else {
                    const Real d = sqrt(d2);
                    if (lane == j) row[j] = Ar::from_real(d);
                    if (lane > j) row[j] = Ar::div(row[j], Ar::from_real(d));
                    __syncwarp();  // every lane has read the last column
                    if (lane < n) column[lane] = row[j];  // (N entries: lanes past n write none)
                    __syncwarp();
#pragma unroll
                    for (int c = j + 1; c < N; ++c)
                        if (c <= lane && lane < n)
                            row[c] = Ar::minus_product(row[c], row[j], Ar::conj(column[c]));
                }
            }
        }
#pragma unroll
        for (int c = 0; c < N; ++c)  // the factor into the tile's triangle
            if (lane < n && c <= lane) {
                if (upper) tile[c][lane] = Ar::conj(row[c]);
                else tile[lane][c] = row[c];
            }
        __syncwarp();
        T* M = A + b * stride;
#pragma unroll
        for (int c = 0; c < N; ++c)
            if (c < n && lane < n) {
                const bool factor = upper ? lane <= c : lane >= c;
                M[lane + (long long)c * lda] = (factor || keep) ? tile[lane][c] : zero;
            }
        if (lane == 0) info[b] = failed;
        __syncwarp();  // the tile is read before the next member's comes in
    }
}

template <typename T, int N>
__device__ void potrf_warp(const T* src, const long long* offsets, long long src_stride,
                           long long rs, long long cs, T* A, long long stride, int lda, int n,
                           int upper, int keep, int* info, long long count)
{
    const int W = WarpLuWarps<T>::value;  // (shared memory: as getrf_warp's)
    __shared__ T shared_columns[W][N];
    __shared__ T tiles[W][N][N + 1];
    if (n == N)
        potrf_warp_members<T, N, true>(src, offsets, src_stride, rs, cs, A, stride, lda, n, upper,
                                       keep, info, count, shared_columns, tiles);
    else
        potrf_warp_members<T, N, false>(src, offsets, src_stride, rs, cs, A, stride, lda, n,
                                        upper, keep, info, count, shared_columns, tiles);
}

#define POTRF_WARP(prefix, T, N)                                                                \
    __global__ void potrf_warp_##prefix##_##N(const T* src, const long long* offsets,          \
                                             long long src_stride, long long rs, long long cs,  \
                                             T* A, long long stride, int lda, int n, int upper, \
                                             int keep, int* info, long long count)              \
    { potrf_warp<T, N>(src, offsets, src_stride, rs, cs, A, stride, lda, n, upper, keep, info, \
                       count); }

extern "C" {
POTRF_WARP(s, float, 8)
POTRF_WARP(s, float, 16)
POTRF_WARP(s, float, 32)
POTRF_WARP(d, double, 8)
POTRF_WARP(d, double, 16)
POTRF_WARP(d, double, 32)
POTRF_WARP(c, cuFloatComplex, 8)
POTRF_WARP(c, cuFloatComplex, 16)
POTRF_WARP(c, cuFloatComplex, 32)
POTRF_WARP(z, cuDoubleComplex, 8)
POTRF_WARP(z, cuDoubleComplex, 16)
POTRF_WARP(z, cuDoubleComplex, 32)
}  // extern "C"
