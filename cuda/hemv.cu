// hemv: y := A x for a Hermitian (symmetric, when real) A stored in one triangle (part 1 upper,
// 2 lower, as convert.cu's in_stored_part), the refinement's product with the matrix of
// posv_mixed: one read of the triangle. cuBLAS dsymv took 2.8 ms at n = 32768 on the H100
// (2026-11-23), as long as dgemv over the whole square: half the copy bandwidth.
//
// Thread blocks of STATS_THREADS rows x STRIP columns, thread blocks wholly outside the triangle
// return at once. Each thread sums a_ij x_j along its row; the transposed part, conj(a_ij) x_i
// for each column j (off the diagonal), is summed over the thread block (warp shuffles, then the
// warps' sums in shared memory). Both go to y with atomics: y must be zero before, and the order
// of the additions (not their precision) varies from run to run.
// (One module with lapack_aux.cu and convert.cu: plus, times, real_part, imag_part, STRIP,
// STATS_THREADS, in_stored_part, warp_sum, atomic_add, nonzero and merge_warp_parts come from
// there.)

__device__ inline float conjugate(float x) { return x; }
__device__ inline double conjugate(double x) { return x; }
__device__ inline cuFloatComplex conjugate(cuFloatComplex x) { return cuConjf(x); }
__device__ inline cuDoubleComplex conjugate(cuDoubleComplex x) { return cuConj(x); }

template <typename T>
__device__ void hemv(const T* A, long long lda, int n, int part, const T* x, T* y)
{
    __shared__ T warp_sums[STATS_THREADS / 32][STRIP];
    const int first_row = blockIdx.x * blockDim.x, last_row = first_row + blockDim.x - 1;
    const int j0 = blockIdx.y * STRIP, j1 = min(j0 + STRIP, n);
    if ((part == 2 && last_row < j0) || (part == 1 && first_row >= j1)) return;
    const int i = first_row + threadIdx.x, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const bool row_inside = i < n;
    const T zero = Num<T>::make(0.0, 0.0);
    const T xi = row_inside ? x[i] : zero;
    T row = zero;
    for (int j = j0; j < j1; ++j) {
        T transposed = zero;
        if (row_inside && in_stored_part(i, j, part)) {
            const T a = A[i + (long long)j * lda];
            row = plus(row, times(a, x[j]));
            if (i != j) transposed = times(conjugate(a), xi);
        }
        transposed = warp_sum(transposed);
        if (lane == 0) warp_sums[warp][j - j0] = transposed;
    }
    merge_warp_parts<T, MergeSum>(warp_sums, j1 - j0, y + j0);
    if (row_inside && nonzero(row)) atomic_add(y + i, row);
}

#define HEMV(S, T)                                                                             \
extern "C" __global__ void hemv_##S(const T* A, long long lda, int n, int part, const T* x,     \
    T* y) { hemv<T>(A, lda, n, part, x, y); }

HEMV(s, float)
HEMV(d, double)
HEMV(c, cuFloatComplex)
HEMV(z, cuDoubleComplex)
