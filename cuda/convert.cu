// Precision conversions of the mixed-precision solvers, and the matrix statistics that choose
// their scaling (lapack/_mixed.py):
//
//   row_stats     per row i:    max_j |a_ij| and sum_j |a_ij|      (STRIP-column strips per
//                               thread, merged with atomics: one read of A)
//   col_stats     per column j: max_i r_i |a_ij| and sum_i |a_ij|  (r the row scaling; one read)
//   power_of_two_scales  s_i = 2^-k, k the integer nearest log2 of a row's (column's) maximum:
//                 the exact equilibration scales, made where the maxima are (no trip to the host
//                 between row_stats and col_stats)
//   narrow        out_ij = (low) (r_i c_j a_ij), the working matrix scaled and rounded to the
//                 factorization's storage precision (float or complex float); sets *overflow when
//                 a scaled entry exceeds `limit` (the largest finite value of the precision the
//                 tensor cores will see: 65504 for half), so that the caller can fall back
//                 (one read of A, one write of the copy)
//   narrow_hermitian  narrow of the stored triangle of a Hermitian matrix, with its row and column
//                 sums (the norm) in the same read (below)
//   vector_to_low, vector_from_low   the refinement's vectors into the factors' precision and
//                 back, where the Krylov basis lives (below)
//   round_half    out = (__half) a for a float block, a GEMM operand for the tensor cores;
//   round_bf16    the same to bfloat16; both set *overflow on a result that is not finite
//                 (one read of 4 bytes and one write of 2 per element)
//
// |a| is the modulus for complex entries (as LAPACK's lange). The maxima are merged with
// atomicMax on the bit patterns: for non-negative IEEE doubles, integer order is numeric order.
// All grids are 2-D over (rows, columns); rows vary fastest within a warp, so reads of the
// column-major matrix are coalesced.

#include <cuComplex.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>

__device__ inline double modulus(float x) { return fabs((double)x); }
__device__ inline double modulus(double x) { return fabs(x); }
__device__ inline double modulus(cuFloatComplex x) { return hypot((double)x.x, (double)x.y); }
__device__ inline double modulus(cuDoubleComplex x) { return hypot(x.x, x.y); }

__device__ inline void atomic_max_nonnegative(double* address, double value)
{
    atomicMax((unsigned long long*)address, (unsigned long long)__double_as_longlong(value));
}

#define STRIP 64   // columns per thread in row_stats, rows per thread-block row in col_stats
#define STATS_THREADS 256  // threads per block of col_stats, narrow_hermitian and hemv (backend/
                           // cuda.py's _STATS_THREADS)

__device__ inline float warp_sum(float x)
{
    for (int offset = 16; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffff, x, offset);
    return x;
}
__device__ inline double warp_sum(double x)
{
    for (int offset = 16; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffff, x, offset);
    return x;
}
__device__ inline cuFloatComplex warp_sum(cuFloatComplex x)
{ return make_cuFloatComplex(warp_sum(x.x), warp_sum(x.y)); }
__device__ inline cuDoubleComplex warp_sum(cuDoubleComplex x)
{ return make_cuDoubleComplex(warp_sum(x.x), warp_sum(x.y)); }
__device__ inline double warp_max(double x)
{
    for (int offset = 16; offset > 0; offset /= 2)
        x = fmax(x, __shfl_xor_sync(0xffffffff, x, offset));
    return x;
}

__device__ inline void atomic_add(float* y, float v) { atomicAdd(y, v); }
__device__ inline void atomic_add(double* y, double v) { atomicAdd(y, v); }
__device__ inline void atomic_add(cuFloatComplex* y, cuFloatComplex v)
{ atomicAdd(&y->x, v.x); atomicAdd(&y->y, v.y); }
__device__ inline void atomic_add(cuDoubleComplex* y, cuDoubleComplex v)
{ atomicAdd(&y->x, v.x); atomicAdd(&y->y, v.y); }

template <typename T>
__device__ bool nonzero(T v) { return real_part(v) != 0.0 || imag_part(v) != 0.0; }

// Per-column results of a thread block's warps merged into one atomic per column and block:
// each warp's lane 0 leaves its value for column j0 + c in warp_parts[warp][c] (c < STRIP);
// after the block's loop, merge_warp_parts combines them (Merge::combine over the warps) and
// updates out[c] once (Merge::update; out is column j0's result). Thread blocks of
// STATS_THREADS. With one atomic per warp and column, narrow_hermitian took 4.3 ms on the
// triangle of n = 32768 (H100, 2026-11-23), where hemv, which reads the same triangle and
// merged per block, took 1.7 ms.
template <typename T, typename Merge>
__device__ void merge_warp_parts(T (*warp_parts)[STRIP], int columns, T* out)
{
    __syncthreads();
    if (threadIdx.x < columns) {
        T value = warp_parts[0][threadIdx.x];
        for (int w = 1; w < STATS_THREADS / 32; ++w)
            value = Merge::combine(value, warp_parts[w][threadIdx.x]);
        Merge::update(out + threadIdx.x, value);
    }
    __syncthreads();  // warp_parts may be filled again
}
struct MergeSum {
    template <typename T> __device__ static T combine(T a, T b) { return plus(a, b); }
    template <typename T> __device__ static void update(T* out, T v)
    { if (nonzero(v)) atomic_add(out, v); }
};
struct MergeMax {  // of non-negative doubles
    __device__ static double combine(double a, double b) { return fmax(a, b); }
    __device__ static void update(double* out, double v)
    { if (v != 0.0) atomic_max_nonnegative(out, v); }
};

__device__ inline bool in_stored_part(int i, int j, int part)
{
    return part == 0 || (part == 1 && i <= j) || (part == 2 && i >= j);
}

template <typename T>
__device__ void row_stats(const T* A, long long lda, int m, int n, double* rmax,
                          double* rsum)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const int j0 = blockIdx.y * STRIP, j1 = min(j0 + STRIP, n);
    if (i >= m) return;
    double largest = 0.0, total = 0.0;
    for (int j = j0; j < j1; ++j) {
        const double a = modulus(A[i + (long long)j * lda]);
        largest = fmax(largest, a);
        total += a;
    }
    atomic_max_nonnegative(rmax + i, largest);
    atomicAdd(rsum + i, total);
}

// a thread per row of a strip of STRIP columns: shuffles reduce each column over a warp, shared
// memory over the thread block (merge_warp_parts)
template <typename T>
__device__ void col_stats(const T* A, long long lda, int m, int n, const double* r,
                          double* cmax, double* csum)
{
    __shared__ double warp_largest[STATS_THREADS / 32][STRIP], warp_total[STATS_THREADS / 32][STRIP];
    const int i = blockIdx.x * blockDim.x + threadIdx.x, warp = threadIdx.x / 32;
    const int j0 = blockIdx.y * STRIP, j1 = min(j0 + STRIP, n);
    const bool inside = i < m;
    const double scale = inside ? r[i] : 0.0;
    for (int j = j0; j < j1; ++j) {
        const double a = inside ? modulus(A[i + (long long)j * lda]) : 0.0;
        const double largest = warp_max(scale * a), total = warp_sum(a);
        if ((threadIdx.x & 31) == 0) {
            warp_largest[warp][j - j0] = largest;
            warp_total[warp][j - j0] = total;
        }
    }
    merge_warp_parts<double, MergeMax>(warp_largest, j1 - j0, cmax + j0);
    merge_warp_parts<double, MergeSum>(warp_total, j1 - j0, csum + j0);
}

// frexp: x = m 2^e, m in [1/2, 1); log2 x rounds to e where m >= sqrt(1/2), else to e - 1 (the
// host's backend/reduced.inverse_power_of_two decides with the same double). 1 where the maximum
// is 0 or not finite, or where `enabled` is 0 (no equilibration of these lines).
extern "C" __global__ void power_of_two_scales(const double* largest, int n, int enabled,
                                               double* scale)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const double x = largest[i];
    double s = 1.0;
    if (enabled && x > 0.0 && isfinite(x)) {
        int e;
        const double m = frexp(x, &e);
        s = ldexp(1.0, m >= 0.70710678118654752440 ? -e : 1 - e);
    }
    scale[i] = s;
}

__device__ inline float scaled_to_low(double a, double s) { return (float)(a * s); }
__device__ inline float scaled_to_low(float a, double s) { return (float)((double)a * s); }
__device__ inline cuFloatComplex scaled_to_low(cuDoubleComplex a, double s)
{ return make_cuFloatComplex((float)(a.x * s), (float)(a.y * s)); }
__device__ inline cuFloatComplex scaled_to_low(cuFloatComplex a, double s)
{ return make_cuFloatComplex((float)((double)a.x * s), (float)((double)a.y * s)); }

__device__ inline double largest_part(float x) { return fabs((double)x); }
__device__ inline double largest_part(cuFloatComplex x) { return fmax(fabs((double)x.x), fabs((double)x.y)); }

template <typename T, typename L>
__device__ void narrow(const T* A, long long lda, int m, int n, const double* r, const double* c,
                       L* out, long long ldo, double limit, int* overflow)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x, j = blockIdx.y * blockDim.y + threadIdx.y;
    if (i >= m || j >= n) return;
    const L low = scaled_to_low(A[i + (long long)j * lda], r[i] * c[j]);
    out[i + (long long)j * ldo] = low;
    const double size = largest_part(low);
    if (!(size <= limit)) atomicOr(overflow, 1);  // beyond the limit, infinite or NaN
}

// narrow_hermitian: narrow of a Hermitian matrix stored in one triangle (part 1 upper, 2 lower),
// out_ij = (low) (d_i d_j a_ij) on that triangle only, with the row and column sums of |a_ij|
// over it (||A||_inf = max_i rsum_i + csum_i - |a_ii|) in the same pass: half the reads of
// row_stats + col_stats + narrow over the square. Launched as row_stats (a thread per row, a
// strip of STRIP columns); thread blocks wholly outside the triangle return at once.
template <typename T, typename L>
__device__ void narrow_hermitian(const T* A, long long lda, int n, int part, const double* d,
                                 L* out, long long ldo, double limit, int* overflow,
                                 double* rsum, double* csum)
{
    __shared__ double warp_total[STATS_THREADS / 32][STRIP];
    const int first_row = blockIdx.x * blockDim.x, last_row = first_row + blockDim.x - 1;
    const int j0 = blockIdx.y * STRIP, j1 = min(j0 + STRIP, n);
    if ((part == 2 && last_row < j0) || (part == 1 && first_row >= j1)) return;
    const int i = first_row + threadIdx.x, warp = threadIdx.x / 32;
    const bool row_inside = i < n;
    const double di = row_inside ? d[i] : 0.0;
    double total = 0.0;
    bool too_large = false;
    for (int j = j0; j < j1; ++j) {
        double a = 0.0;
        if (row_inside && in_stored_part(i, j, part)) {
            const long long at = i + (long long)j * lda;
            const L low = scaled_to_low(A[at], di * d[j]);
            a = modulus(A[at]);
            out[i + (long long)j * ldo] = low;
            too_large |= !(largest_part(low) <= limit);
            total += a;
        }
        a = warp_sum(a);
        if ((threadIdx.x & 31) == 0) warp_total[warp][j - j0] = a;
    }
    merge_warp_parts<double, MergeSum>(warp_total, j1 - j0, csum + j0);
    if (row_inside && total != 0.0) atomicAdd(rsum + i, total);
    if (too_large) atomicOr(overflow, 1);
}

template <typename L, typename F>
__device__ void round_to(const float* A, long long lda, int rows, int cols, L* out, long long ldo,
                         int* overflow, F convert)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x, j = blockIdx.y * blockDim.y + threadIdx.y;
    if (i >= rows || j >= cols) return;
    const float a = A[i + (long long)j * lda];
    const L low = convert(a);
    out[i + (long long)j * ldo] = low;
    if (isfinite(a) && !isfinite((float)low)) atomicOr(overflow, 1);
}

#define STATS(S, T)                                                                            \
extern "C" __global__ void row_stats_##S(const T* A, long long lda, int m, int n,               \
    double* rmax, double* rsum) { row_stats<T>(A, lda, m, n, rmax, rsum); }                    \
extern "C" __global__ void col_stats_##S(const T* A, long long lda, int m, int n,               \
    const double* r, double* cmax, double* csum)                                               \
{ col_stats<T>(A, lda, m, n, r, cmax, csum); }

STATS(s, float)
STATS(d, double)
STATS(c, cuFloatComplex)
STATS(z, cuDoubleComplex)

#define NARROW(S, T, L)                                                                        \
extern "C" __global__ void narrow_##S(const T* A, long long lda, int m, int n, const double* r, \
    const double* c, L* out, long long ldo, double limit, int* overflow)                       \
{ narrow<T, L>(A, lda, m, n, r, c, out, ldo, limit, overflow); }                            \
extern "C" __global__ void narrow_hermitian_##S(const T* A, long long lda, int n, int part,      \
    const double* d, L* out, long long ldo, double limit, int* overflow, double* rsum,          \
    double* csum)                                                                              \
{ narrow_hermitian<T, L>(A, lda, n, part, d, out, ldo, limit, overflow, rsum, csum); }

NARROW(s, float, float)
NARROW(d, double, float)
NARROW(c, cuFloatComplex, cuFloatComplex)
NARROW(z, cuDoubleComplex, cuFloatComplex)

// vector_to_low: out_ij = (low) (s_{p_i} x_{p_i j}), p the LU's row permutation (null: none), s
// the scale of the low-precision copy's rows (null: ones); vector_from_low: y_ij = s_i (working)
// low_ij. The preconditioner's way in and out of the factors (lapack/_mixed.
// TriangularPreconditioner), a thread per entry (grid: row blocks x columns). The working precision is the low one for
// float32 and complex64 matrices (scaled_to_low, above), double for the others.
__device__ inline double scaled_to_double(float a, double s) { return (double)a * s; }
__device__ inline cuDoubleComplex scaled_to_double(cuFloatComplex a, double s)
{ return make_cuDoubleComplex((double)a.x * s, (double)a.y * s); }

template <typename T, typename L>
__device__ void vector_to_low(const T* x, long long ldx, int n, int k, const int* perm,
                              const double* s, L* out, long long ldo)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x, j = blockIdx.y;
    if (i >= n || j >= k) return;
    const int source = perm ? perm[i] : i;
    out[i + (long long)j * ldo] = scaled_to_low(x[source + (long long)j * ldx],
                                                s ? s[source] : 1.0);
}

#define VECTORS(S, T, L, WIDEN)                                                                \
extern "C" __global__ void vector_to_low_##S(const T* x, long long ldx, int n, int k,          \
    const int* perm, const double* s, L* out, long long ldo)                                   \
{ vector_to_low<T, L>(x, ldx, n, k, perm, s, out, ldo); }                                   \
extern "C" __global__ void vector_from_low_##S(const L* low, long long ldl, int n, int k,      \
    const double* s, T* y, long long ldy)                                                      \
{                                                                                              \
    const int i = blockIdx.x * blockDim.x + threadIdx.x, j = blockIdx.y;                       \
    if (i < n && j < k)                                                                        \
        y[i + (long long)j * ldy] = WIDEN(low[i + (long long)j * ldl], s ? s[i] : 1.0);        \
}

VECTORS(s, float, float, scaled_to_low)
VECTORS(d, double, float, scaled_to_double)
VECTORS(c, cuFloatComplex, cuFloatComplex, scaled_to_low)
VECTORS(z, cuDoubleComplex, cuFloatComplex, scaled_to_double)

struct ToHalf { __device__ __half operator()(float a) const { return __float2half_rn(a); } };
struct ToBf16 { __device__ __nv_bfloat16 operator()(float a) const { return __float2bfloat16_rn(a); } };

extern "C" __global__ void round_half(const float* A, long long lda, int rows, int cols,
                                      __half* out, long long ldo, int* overflow)
{ round_to<__half>(A, lda, rows, cols, out, ldo, overflow, ToHalf()); }

extern "C" __global__ void round_bf16(const float* A, long long lda, int rows, int cols,
                                      __nv_bfloat16* out, long long ldo, int* overflow)
{ round_to<__nv_bfloat16>(A, lda, rows, cols, out, ldo, overflow, ToBf16()); }

// The error-corrected GEMMs' operands a = hi + scale lo (backend/cuda.py's _SPLITS): one read
// of a, hi and lo written wherever the caller's concatenated operands want them (their own
// leading dimensions). A second copy of hi (hi_again, unless null) makes [hi lo hi] of a panel
// that serves as both operands of a HERK's GEMMs: [hi lo] one side, [lo hi] the other.
template <typename T, typename Parts>
__device__ void split_to(const float* A, long long lda, int rows, int cols, T* hi, long long ldh,
                         T* lo, long long ldl, T* hi_again, int* overflow, Parts parts)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x, j = blockIdx.y * blockDim.y + threadIdx.y;
    if (i >= rows || j >= cols) return;
    const float a = A[i + (long long)j * lda];
    const T high = parts.high(a);
    hi[i + (long long)j * ldh] = high;
    lo[i + (long long)j * ldl] = parts.low(a, high);
    if (hi_again) hi_again[i + (long long)j * ldh] = high;
    if (isfinite(a) && !isfinite((float)high)) atomicOr(overflow, 1);
}

// half-x3: hi = half(a), lo = half((a - hi) 2^11), scale 2^-11 (Ootomo and Yokota, IJHPCA
// 2022): A B ~ hi_A hi_B + 2^-11 (hi_A lo_B + lo_A hi_B), about float32's accuracy at a third
// of half's rate. The factor 2^11 lifts lo (|a - hi| <= 2^-11 |a|) back to a's magnitude, so
// that it keeps its bits as long as a is a normal half number. Two writes of 2 bytes.
struct HalfParts {
    __device__ __half high(float a) const { return __float2half_rn(a); }
    __device__ __half low(float a, __half high) const
    { return __float2half_rn((a - __half2float(high)) * 2048.0f); }
};

// tf32-x3: hi = a rounded to TF32's 10 stored mantissa bits (to nearest, ties to even), lo =
// a - hi (exact in float), scale 1: float32's accuracy with float32's range, so never an
// overflow. The tensor cores read lo's leading 10 mantissa bits, an error of 2^-22 |a| at most.
struct Tf32Parts {
    __device__ float high(float a) const
    {
        unsigned int bits = __float_as_uint(a);
        if (isfinite(a)) bits = (bits + 0xFFFu + ((bits >> 13) & 1u)) & 0xFFFFE000u;
        return __uint_as_float(bits);
    }
    __device__ float low(float a, float high) const { return isfinite(high) ? a - high : 0.0f; }
};

extern "C" __global__ void split_half(const float* A, long long lda, int rows, int cols,
                                      __half* hi, long long ldh, __half* lo, long long ldl,
                                      __half* hi_again, int* overflow)
{ split_to<__half>(A, lda, rows, cols, hi, ldh, lo, ldl, hi_again, overflow, HalfParts()); }

extern "C" __global__ void split_tf32(const float* A, long long lda, int rows, int cols,
                                      float* hi, long long ldh, float* lo, long long ldl,
                                      float* hi_again, int* overflow)
{ split_to<float>(A, lda, rows, cols, hi, ldh, lo, ldl, hi_again, overflow, Tf32Parts()); }
