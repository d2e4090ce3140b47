// Row interchanges for LU on a column-major matrix, and the pivot bookkeeping around them.
//
// One thread per column applies the panel's swaps in order (LAPACK's laswp semantics: the swaps
// are a sequence, not a permutation, so each column replays them). Elements are moved as raw
// words of the element's size, so one kernel serves float (4 B), double and complex64 (8 B) and
// complex128 (16 B). Bytes moved per step: 2 reads + 2 writes of one element per swap per column;
// adjacent threads touch addresses lda apart, so each access is its own 32-byte sector. That is
// the price of column-major storage (MAGMA keeps the matrix transposed to make swaps contiguous).

template <typename Word>
__device__ void laswp_column(Word* A, long long lda, int ncols, const int* ipiv,
                             int k0, int k1, int forward)
{
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (col >= ncols) return;
    Word* c = A + (long long)col * lda;
    if (forward) {
        for (int i = k0; i < k1; ++i) {
            const int p = ipiv[i];
            if (p != i) { Word t = c[i]; c[i] = c[p]; c[p] = t; }
        }
    } else {
        for (int i = k1 - 1; i >= k0; --i) {
            const int p = ipiv[i];
            if (p != i) { Word t = c[i]; c[i] = c[p]; c[p] = t; }
        }
    }
}

extern "C" {

__global__ void laswp_4(float* A, long long lda, int ncols, const int* ipiv, int k0, int k1, int fwd)
{ laswp_column<float>(A, lda, ncols, ipiv, k0, k1, fwd); }

__global__ void laswp_8(double* A, long long lda, int ncols, const int* ipiv, int k0, int k1, int fwd)
{ laswp_column<double>(A, lda, ncols, ipiv, k0, k1, fwd); }

__global__ void laswp_16(double2* A, long long lda, int ncols, const int* ipiv, int k0, int k1, int fwd)
{ laswp_column<double2>(A, lda, ncols, ipiv, k0, k1, fwd); }

// cuSOLVER's getrf on a panel whose first row is row `offset` of the matrix leaves 1-based pivots
// relative to the panel; the trailing swaps and the user want 0-based global row indices.
__global__ void pivots_to_global(int* ipiv, int count, int offset)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < count) ipiv[i] += offset - 1;
}

}  // extern "C"

// check_finite for a device-resident matrix: rows x cols real words (a complex element is two),
// column-major with leading dimension ld (in words); sets *flag if any word is NaN or +-Inf.
// Bytes moved: the matrix once, read coalesced down each column; memory-bound.
template <typename Real>
__device__ void flag_nonfinite(const Real* A, long long ld, long long rows, long long cols, int* flag)
{
    for (long long j = blockIdx.y; j < cols; j += gridDim.y) {
        const Real* column = A + j * ld;
        for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < rows;
             i += (long long)gridDim.x * blockDim.x)
            if (!isfinite(column[i])) *flag = 1;
    }
}

extern "C" {
__global__ void nonfinite_4(const float* A, long long ld, long long rows, long long cols, int* flag)
{ flag_nonfinite<float>(A, ld, rows, cols, flag); }
__global__ void nonfinite_8(const double* A, long long ld, long long rows, long long cols, int* flag)
{ flag_nonfinite<double>(A, ld, rows, cols, flag); }
}

// cholesky(): the triangle opposite the factor is set to zero (all-zero bytes are 0 in every
// precision, so the kernel moves words of the element's size). One thread per element of an
// n x n column-major matrix; bytes moved: the n^2/2 elements written once.
template <typename Word>
__device__ void zero_triangle(Word* A, long long ld, int n, int upper)
{
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    const int col = blockIdx.y;
    if (row < n && (upper ? row < col : row > col)) A[row + (long long)col * ld] = Word();
}

extern "C" {
__global__ void zero_triangle_4(float* A, long long ld, int n, int upper)
{ zero_triangle<float>(A, ld, n, upper); }
__global__ void zero_triangle_8(double* A, long long ld, int n, int upper)
{ zero_triangle<double>(A, ld, n, upper); }
__global__ void zero_triangle_16(double2* A, long long ld, int n, int upper)
{ zero_triangle<double2>(A, ld, n, upper); }
}
