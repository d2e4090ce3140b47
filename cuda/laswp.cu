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

}  // extern "C"

// A step's interchanges as the row moves they amount to, for the trailing columns and the ones
// on the left (update/lu.py): replayed one column per thread (laswp_column above), the w = 1536
// interchanges of an LU step are w dependent memory round trips per column, about 4 ms on an
// H100 whatever the number of columns (perf/RESULTS.md). As moves, every element moves once and
// a column's moves all run at once.
//
// pivots_to_moves (one thread): ipiv[k0..k1) (global 0-based rows, each >= its own index), as
// pairs (destination row, source row), the number of pairs first: moves[0] = count, then
// moves[1 + 2 e], moves[2 + 2 e]. Rows k0..k1 are tracked in an array, the rows below them that
// the interchanges touch in an open-addressing table (shared memory: w + 2 x HASH ints, HASH a
// power of two >= 2 w).
extern "C" __global__ void pivots_to_moves(const int* ipiv, int k0, int k1, int hash_size,
                                           int* moves)
{
    extern __shared__ int table[];
    const int w = k1 - k0;
    int* top = table;                  // top[q]: the row now at row k0 + q
    int* key = table + w;              // below k1: a touched row's position ...
    int* held = key + hash_size;       // ... and the row now there
    for (int q = threadIdx.x; q < w; q += blockDim.x) top[q] = k0 + q;
    for (int h = threadIdx.x; h < hash_size; h += blockDim.x) key[h] = -1;
    __syncthreads();
    if (threadIdx.x != 0) return;
    const int mask = hash_size - 1;
    for (int i = k0; i < k1; ++i) {
        const int p = ipiv[i];
        if (p == i) continue;
        const int displaced = top[i - k0];
        if (p < k1) {
            top[i - k0] = top[p - k0];
            top[p - k0] = displaced;
            continue;
        }
        int h = (int)(((unsigned)p * 2654435761u) & (unsigned)mask);
        while (key[h] != -1 && key[h] != p) h = (h + 1) & mask;
        const int there = key[h] == p ? held[h] : p;
        key[h] = p;
        held[h] = displaced;
        top[i - k0] = there;
    }
    int count = 0;
    for (int q = 0; q < w; ++q)
        if (top[q] != k0 + q) { moves[1 + 2 * count] = k0 + q; moves[2 + 2 * count] = top[q]; ++count; }
    for (int h = 0; h < hash_size; ++h)
        if (key[h] != -1 && held[h] != key[h]) {
            moves[1 + 2 * count] = key[h];
            moves[2 + 2 * count] = held[h];
            ++count;
        }
    moves[0] = count;
}

// The moves applied to ncols columns: a block of threads per column (grid-stride over columns),
// each thread reading up to MOVES_PER_THREAD sources into registers, then, after the block's
// barrier, writing them to their destinations (a source may be another move's destination).
#define MOVES_THREADS 256
#define MOVES_PER_THREAD 16

template <typename Word>
__device__ void apply_moves_columns(Word* A, long long lda, int ncols, const int* moves)
{
    const int count = moves[0];
    for (int col = blockIdx.x; col < ncols; col += gridDim.x) {
        Word* c = A + (long long)col * lda;
        Word value[MOVES_PER_THREAD];
#pragma unroll
        for (int r = 0; r < MOVES_PER_THREAD; ++r) {
            const int e = threadIdx.x + r * MOVES_THREADS;
            if (e < count) value[r] = c[moves[2 + 2 * e]];
        }
        __syncthreads();
#pragma unroll
        for (int r = 0; r < MOVES_PER_THREAD; ++r) {
            const int e = threadIdx.x + r * MOVES_THREADS;
            if (e < count) c[moves[1 + 2 * e]] = value[r];
        }
        __syncthreads();
    }
}

extern "C" {

__global__ void apply_moves_4(float* A, long long lda, int ncols, const int* moves)
{ apply_moves_columns<float>(A, lda, ncols, moves); }

__global__ void apply_moves_8(double* A, long long lda, int ncols, const int* moves)
{ apply_moves_columns<double>(A, lda, ncols, moves); }

__global__ void apply_moves_16(double2* A, long long lda, int ncols, const int* moves)
{ apply_moves_columns<double2>(A, lda, ncols, moves); }

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

// A distributed part made of a worker's chunks (lapack/_dist_parts.py): the rows x cols real
// words of column-major A (leading dimension lda, in words) copied into B (ldb) and checked
// in the same pass, *flag set if any is NaN or +-Inf. Bytes moved: A read once, B written
// once, coalesced down each column; memory-bound (a copy and then a check read A twice).
template <typename Real>
__device__ void copy_flag_nonfinite(const Real* A, long long lda, Real* B, long long ldb,
                                    long long rows, long long cols, int* flag)
{
    bool finite = true;
    for (long long j = blockIdx.y; j < cols; j += gridDim.y) {
        const Real* from = A + j * lda;
        Real* to = B + j * ldb;
        for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < rows;
             i += (long long)gridDim.x * blockDim.x) {
            const Real value = from[i];
            finite = finite && isfinite(value);
            to[i] = value;
        }
    }
    if (!finite) *flag = 1;
}

extern "C" {
__global__ void copy_nonfinite_4(const float* A, long long lda, float* B, long long ldb,
                                 long long rows, long long cols, int* flag)
{ copy_flag_nonfinite<float>(A, lda, B, ldb, rows, cols, flag); }
__global__ void copy_nonfinite_8(const double* A, long long lda, double* B, long long ldb,
                                 long long rows, long long cols, int* flag)
{ copy_flag_nonfinite<double>(A, lda, B, ldb, rows, cols, flag); }
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
