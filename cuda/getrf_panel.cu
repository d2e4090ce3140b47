// The LU factorization with partial pivoting of a tall, narrow panel (m x w, m >= w, w up to a few
// hundred) in one launch: LAPACK's getf2, column by column, for the leaves of the recursive panel
// (panel/lu.py), in the four element types.
//
// Why a kernel of our own: cuSOLVER's getrf on a 32768 x 1024 panel is latency-bound (about 10 us
// per column on the H100, perf/RESULTS.md), and the panels were 3/4 of a mixed-precision LU's
// time. Partial pivoting needs one device-wide reduction per column; this kernel makes that the
// only cost that scales with the columns: the panel stays in shared memory for the whole launch
// and each column costs one exchange through global memory.
//
// Layout: one block of threads per SM (a cooperative launch, so all blocks are resident at once),
// block b owning rows [b R, (b + 1) R) of the panel, R >= w so that block 0 holds the first w rows
// (the rows that become U). Column j:
//   1. each block finds its largest |A(i, j)| (|re| + |im| for complex, as LAPACK's i?amax) over
//      its rows i >= j, and publishes that candidate's row, with block 0 also publishing row j;
//      a tag written last says the slot is complete;
//   2. every block waits for all tags of column j and takes the same winner: the largest, the
//      lowest row on a tie (LAPACK's first maximum);
//   3. block 0 puts the pivot row at row j, the pivot's owner puts the old row j at row p, and
//      every block scales its column j below the diagonal and does its part of the rank-1 update.
// Slots are double-buffered by the parity of j: a block overwrites column j's slots at column
// j + 2, which it reaches only after every block has published column j + 1, which each does
// only after it has finished reading column j's slots. The host zeroes the tags before each
// launch, on the launch's stream, and tags are tag0 + j with tag0 > 0.
//
// Bytes moved: the panel read once and written once; per column, G + 1 rows of w elements written
// and each block reading 2 of them. The rank-1 updates run from shared memory.

#include <cuComplex.h>
#include <cfloat>
#include <climits>

template <typename T> struct LuArith;
// float and double: one template (the CUDA math functions are overloaded for both)
template <typename R> struct RealLuArith {
    typedef R Real;
    __device__ static Real abs1(R x) { return fabs(x); }
    __device__ static Real modulus(R x) { return fabs(x); }
    __device__ static R mul(R a, R b) { return a * b; }
    __device__ static R div(R a, R b) { return a / b; }
    __device__ static R inv(R a) { return R(1) / a; }
    __device__ static R minus_product(R c, R a, R b) { return fma(-a, b, c); }
    __device__ static Real safe_min() { return sizeof(R) == 4 ? R(FLT_MIN) : R(DBL_MIN); }
};
template <> struct LuArith<float> : RealLuArith<float> {};
template <> struct LuArith<double> : RealLuArith<double> {};
// complex float and double: one template over the cuComplex functions, overloaded here by type
__device__ inline float real_abs(float x) { return fabsf(x); }
__device__ inline double real_abs(double x) { return fabs(x); }
__device__ inline float cmodulus(cuFloatComplex x) { return cuCabsf(x); }
__device__ inline double cmodulus(cuDoubleComplex x) { return cuCabs(x); }
__device__ inline cuFloatComplex cmul(cuFloatComplex a, cuFloatComplex b) { return cuCmulf(a, b); }
__device__ inline cuDoubleComplex cmul(cuDoubleComplex a, cuDoubleComplex b) { return cuCmul(a, b); }
__device__ inline cuFloatComplex cdiv(cuFloatComplex a, cuFloatComplex b) { return cuCdivf(a, b); }
__device__ inline cuDoubleComplex cdiv(cuDoubleComplex a, cuDoubleComplex b) { return cuCdiv(a, b); }
__device__ inline cuFloatComplex csub(cuFloatComplex a, cuFloatComplex b) { return cuCsubf(a, b); }
__device__ inline cuDoubleComplex csub(cuDoubleComplex a, cuDoubleComplex b) { return cuCsub(a, b); }
template <typename T, typename R> struct ComplexLuArith {
    typedef R Real;
    __device__ static Real abs1(T x) { return real_abs(x.x) + real_abs(x.y); }
    __device__ static Real modulus(T x) { return cmodulus(x); }
    __device__ static T mul(T a, T b) { return cmul(a, b); }
    __device__ static T div(T a, T b) { return cdiv(a, b); }
    __device__ static T inv(T a) { T one; one.x = R(1); one.y = R(0); return cdiv(one, a); }
    __device__ static T minus_product(T c, T a, T b) { return csub(c, cmul(a, b)); }
    __device__ static Real safe_min() { return RealLuArith<R>::safe_min(); }
};
template <> struct LuArith<cuFloatComplex> : ComplexLuArith<cuFloatComplex, float> {};
template <> struct LuArith<cuDoubleComplex> : ComplexLuArith<cuDoubleComplex, double> {};

// (value, row) := the better of the two candidates: the larger magnitude, the lower row on a tie;
// an empty candidate has row INT_MAX. A NaN never displaces a candidate (i?amax's comparisons).
template <typename Real>
__device__ inline void take_better(Real& value, int& row, Real other_value, int other_row)
{
    if (other_row == INT_MAX) return;
    if (row == INT_MAX || other_value > value || (other_value == value && other_row < row)) {
        value = other_value;
        row = other_row;
    }
}

// The block's best (value, row), left in *best_value / *best_row for every thread to read after
// the closing __syncthreads.
template <typename Real>
__device__ void block_best(Real value, int row, Real* warp_value, int* warp_row,
                           Real* best_value, int* best_row)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
    for (int offset = 16; offset > 0; offset >>= 1)
        take_better(value, row, __shfl_down_sync(0xffffffffu, value, offset),
                    __shfl_down_sync(0xffffffffu, row, offset));
    if (lane == 0) { warp_value[warp] = value; warp_row[warp] = row; }
    __syncthreads();
    if (warp == 0) {
        value = lane < warps ? warp_value[lane] : Real(0);
        row = lane < warps ? warp_row[lane] : INT_MAX;
        for (int offset = 16; offset > 0; offset >>= 1)
            take_better(value, row, __shfl_down_sync(0xffffffffu, value, offset),
                        __shfl_down_sync(0xffffffffu, row, offset));
        if (lane == 0) { *best_value = value; *best_row = row; }
    }
    __syncthreads();
}

template <typename T>
__device__ void getrf_panel_fused(T* A, long long lda, int m, int w, int R, int* ipiv,
                                  int row_offset, int* info, T* slot_rows, T* slot_row_j,
                                  typename LuArith<T>::Real* slot_values, int* slot_rows_index,
                                  unsigned* slot_tags, unsigned tag0)
{
    typedef LuArith<T> Ar;
    typedef typename Ar::Real Real;
    extern __shared__ double2 shared_words[];
    T* tile = reinterpret_cast<T*>(shared_words);  // rows x w, column-major, leading dimension R
    T* pivot_row = tile + (size_t)R * w;
    T* old_row_j = pivot_row + w;
    __shared__ Real warp_value[32], best_value;
    __shared__ int warp_row[32], best_row;

    const int G = gridDim.x, b = blockIdx.x, tid = threadIdx.x, threads = blockDim.x;
    const int r0 = b * R, rows = min(m, r0 + R) - r0;

    for (int k = 0; k < w; ++k)
        for (int i = tid; i < rows; i += threads)
            tile[i + (size_t)k * R] = A[r0 + i + k * lda];
    __syncthreads();

    int first_zero = 0;
    for (int j = 0; j < w; ++j) {
        const int slot = (j & 1) * G;
        const unsigned tag = tag0 + j;

        // 1. this block's candidate, published
        Real value = Real(0);
        int row = INT_MAX;
        for (int i = tid; i < rows; i += threads)
            if (r0 + i >= j) take_better(value, row, Ar::abs1(tile[i + (size_t)j * R]), r0 + i);
        block_best(value, row, warp_value, warp_row, &best_value, &best_row);
        const int candidate = best_row - r0;
        for (int k = tid; k < w; k += threads) {
            slot_rows[(size_t)(slot + b) * w + k] = tile[candidate + (size_t)k * R];
            if (b == 0) slot_row_j[(j & 1) * w + k] = tile[j + (size_t)k * R];
        }
        if (tid == 0) { slot_values[slot + b] = best_value; slot_rows_index[slot + b] = best_row; }
        __threadfence();
        __syncthreads();
        if (tid == 0) reinterpret_cast<volatile unsigned*>(slot_tags)[slot + b] = tag;

        // 2. every block's candidate: thread c waits for block c's
        value = Real(0);
        row = INT_MAX;
        for (int c = tid; c < G; c += threads) {
            while (reinterpret_cast<volatile unsigned*>(slot_tags)[slot + c] != tag) { }
            __threadfence();
            take_better(value, row, __ldcg(slot_values + slot + c), __ldcg(slot_rows_index + slot + c));
        }
        block_best(value, row, warp_value, warp_row, &best_value, &best_row);
        const int p = best_row;
        const Real pivot_size = best_value;
        const bool holds_p = p >= r0 && p < r0 + rows;
        for (int k = tid; k < w; k += threads) {
            pivot_row[k] = __ldcg(slot_rows + (size_t)(slot + p / R) * w + k);
            if (holds_p && p != j) old_row_j[k] = __ldcg(slot_row_j + (j & 1) * w + k);
        }
        if (b == 0 && tid == 0) ipiv[j] = p + row_offset;
        __syncthreads();

        // 3. the interchange, then column j of L and the rank-1 update of the rows below
        if (p != j) {
            for (int k = tid; k < w; k += threads) {
                if (b == 0) tile[j + (size_t)k * R] = pivot_row[k];
                if (holds_p) tile[(p - r0) + (size_t)k * R] = old_row_j[k];
            }
            __syncthreads();
        }
        if (pivot_size != Real(0)) {
            const T pivot = pivot_row[j];
            // LAPACK's getf2: multiply by the reciprocal unless it would overflow
            const bool reciprocal = Ar::modulus(pivot) >= Ar::safe_min();
            const T pivot_inverse = Ar::inv(pivot);
            for (int i = tid; i < rows; i += threads) {
                if (r0 + i <= j) continue;
                T* row_i = tile + i;
                const T l = reciprocal ? Ar::mul(row_i[(size_t)j * R], pivot_inverse)
                                       : Ar::div(row_i[(size_t)j * R], pivot);
                row_i[(size_t)j * R] = l;
                for (int k = j + 1; k < w; ++k)
                    row_i[(size_t)k * R] = Ar::minus_product(row_i[(size_t)k * R], l, pivot_row[k]);
            }
        } else if (first_zero == 0) {
            first_zero = j + 1;
        }
        __syncthreads();
    }

    for (int k = 0; k < w; ++k)
        for (int i = tid; i < rows; i += threads)
            A[r0 + i + k * lda] = tile[i + (size_t)k * R];
    if (b == 0 && tid == 0) *info = first_zero;
}

#define GETRF_PANEL_FUSED(suffix, T)                                                               \
    extern "C" __global__ void getrf_panel_fused_##suffix(                                         \
        T* A, long long lda, int m, int w, int R, int* ipiv, int row_offset, int* info,            \
        T* slot_rows, T* slot_row_j, LuArith<T>::Real* slot_values, int* slot_rows_index,          \
        unsigned* slot_tags, unsigned tag0)                                                        \
    {                                                                                              \
        getrf_panel_fused<T>(A, lda, m, w, R, ipiv, row_offset, info, slot_rows, slot_row_j,       \
                             slot_values, slot_rows_index, slot_tags, tag0);                       \
    }
GETRF_PANEL_FUSED(s, float)
GETRF_PANEL_FUSED(d, double)
GETRF_PANEL_FUSED(c, cuFloatComplex)
GETRF_PANEL_FUSED(z, cuDoubleComplex)
