// Random butterfly transforms of depth 2 (hybridla/butterfly.py): the n rows fall into groups
// {i, i + q, i + 2q, i + 3q}, q = n / 4, each mixed by its own 4 x 4 matrix G_i (G_i[c][a] at
// groups[(4 c + a) q + i]: a warp's threads, on consecutive groups, read each entry of their
// G_i in one coalesced load); rows from 4q on form groups of one, left as they are.
//
//   narrow_butterfly      out := L^T (r A c) R rounded to the low precision (float or complex
//                         float; out may be A), the mixed LU's randomized copy: a thread per pair
//                         of groups reads its 16 entries once and writes them once (the
//                         transform costs one pass over the copy); *overflow when a part of an
//                         entry exceeds `limit`
//   butterfly_rows        Y := diag(after) op(G) diag(before) X for n x k blocks (the
//                         preconditioner's vectors; X == Y allowed), op(G) = G or G^T, a null
//                         `before` or `after` is the identity
//
// Threads of a warp take consecutive groups i, so each of the 16 (or 4) reads and writes of a
// warp is a run of consecutive rows of the column-major matrix. The arithmetic is in double.

// The rows of group g (4, or 1 past the last full group); returns how many. Every loop over a
// group below runs to 4, unrolled, with the count as a guard: constant indices keep the
// entries in registers (a loop bounded by the count put them in local memory).
__device__ inline int group_rows(int g, int q, int* rows)
{
    if (g < q) {
#pragma unroll
        for (int a = 0; a < 4; ++a) rows[a] = g + a * q;
        return 4;
    }
#pragma unroll
    for (int a = 0; a < 4; ++a) rows[a] = 4 * q + (g - q);
    return 1;
}

// x := op(G) x for the 4 numbers of a group, given as real and imaginary parts; G[k q] is
// entry k of the group's matrix (row-major)
__device__ inline void mix4(const double* G, long long q, bool transpose, double* re, double* im)
{
    double out_re[4], out_im[4];
#pragma unroll
    for (int c = 0; c < 4; ++c) {
        out_re[c] = out_im[c] = 0.0;
#pragma unroll
        for (int a = 0; a < 4; ++a) {
            const double g = transpose ? G[(4 * a + c) * q] : G[(4 * c + a) * q];
            out_re[c] += g * re[a];
            out_im[c] += g * im[a];
        }
    }
#pragma unroll
    for (int c = 0; c < 4; ++c) { re[c] = out_re[c]; im[c] = out_im[c]; }
}

template <typename T, typename L>
__device__ void narrow_butterfly(const T* A, long long lda, L* out, long long ldo, int n,
                                 const double* r, const double* c, const double* left,
                                 const double* right, double limit, int* overflow)
{
    const int q = n / 4, groups = q + n % 4;
    const int gi = blockIdx.x * blockDim.x + threadIdx.x, gj = blockIdx.y * blockDim.y + threadIdx.y;
    if (gi >= groups || gj >= groups) return;
    int rows[4], cols[4];
    const int mi = group_rows(gi, q, rows), mj = group_rows(gj, q, cols);
    double re[4][4], im[4][4];  // [column b][row a] of the block
#pragma unroll
    for (int b = 0; b < 4; ++b)
#pragma unroll
        for (int a = 0; a < 4; ++a) {
            const bool inside = a < mi && b < mj;
            const T x = inside ? A[rows[a] + (long long)cols[b] * lda] : Num<T>::make(0.0, 0.0);
            const double s = inside ? r[rows[a]] * c[cols[b]] : 0.0;
            re[b][a] = s * real_part(x);
            im[b][a] = s * imag_part(x);
        }
    if (mi == 4)  // each column of the block := G_i^T column
#pragma unroll
        for (int b = 0; b < 4; ++b) mix4(left + gi, q, true, re[b], im[b]);
    if (mj == 4)  // each row of the block := row G_j, that is G_j^T applied to it as a column
#pragma unroll
        for (int a = 0; a < 4; ++a) {
            double row_re[4], row_im[4];
#pragma unroll
            for (int b = 0; b < 4; ++b) { row_re[b] = re[b][a]; row_im[b] = im[b][a]; }
            mix4(right + gj, q, true, row_re, row_im);
#pragma unroll
            for (int b = 0; b < 4; ++b) { re[b][a] = row_re[b]; im[b][a] = row_im[b]; }
        }
    bool too_large = false;
#pragma unroll
    for (int b = 0; b < 4; ++b)
#pragma unroll
        for (int a = 0; a < 4; ++a)
            if (a < mi && b < mj) {
                const L x = Num<L>::make(re[b][a], im[b][a]);
                out[rows[a] + (long long)cols[b] * ldo] = x;
                too_large |= !(fmax(fabs(real_part(x)), fabs(imag_part(x))) <= limit);
            }
    if (too_large) atomicOr(overflow, 1);
}

template <typename T>
__device__ void butterfly_rows(const T* X, long long ldx, T* Y, long long ldy, int n, int k,
                               const double* groups, int transpose, const double* before,
                               const double* after)
{
    const int q = n / 4;
    const int g = blockIdx.x * blockDim.x + threadIdx.x, j = blockIdx.y;
    if (g >= q + n % 4 || j >= k) return;
    int rows[4];
    const int count = group_rows(g, q, rows);
    double re[4], im[4];
#pragma unroll
    for (int a = 0; a < 4; ++a) {
        const T x = a < count ? X[rows[a] + (long long)j * ldx] : Num<T>::make(0.0, 0.0);
        const double s = before ? before[rows[a]] : 1.0;
        re[a] = s * real_part(x);
        im[a] = s * imag_part(x);
    }
    if (count == 4) mix4(groups + g, q, transpose != 0, re, im);
#pragma unroll
    for (int a = 0; a < 4; ++a)
        if (a < count) {
            const double s = after ? after[rows[a]] : 1.0;
            Y[rows[a] + (long long)j * ldy] = Num<T>::make(s * re[a], s * im[a]);
        }
}

#define BUTTERFLY(S, T)                                                                        \
extern "C" __global__ void butterfly_rows_##S(const T* X, long long ldx, T* Y, long long ldy,   \
    int n, int k, const double* groups, int transpose, const double* before,                  \
    const double* after)                                                                       \
{ butterfly_rows<T>(X, ldx, Y, ldy, n, k, groups, transpose, before, after); }

BUTTERFLY(s, float)
BUTTERFLY(d, double)
BUTTERFLY(c, cuFloatComplex)
BUTTERFLY(z, cuDoubleComplex)

#define NARROW_BUTTERFLY(S, T, L)                                                              \
extern "C" __global__ void narrow_butterfly_##S(const T* A, long long lda, L* out,             \
    long long ldo, int n, const double* r, const double* c, const double* left,                \
    const double* right, double limit, int* overflow)                                          \
{ narrow_butterfly<T, L>(A, lda, out, ldo, n, r, c, left, right, limit, overflow); }

NARROW_BUTTERFLY(s, float, float)
NARROW_BUTTERFLY(d, double, float)
NARROW_BUTTERFLY(c, cuFloatComplex, cuFloatComplex)
NARROW_BUTTERFLY(z, cuDoubleComplex, cuFloatComplex)
