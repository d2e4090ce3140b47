// QR with column pivoting (LAPACK's geqp3 with laqps's panel, lapack/geqp3.py): the column loop's
// steps that cuBLAS lacks, for the four element types (s, d, c, z), on the column norms vn1
// (partial: downdated as rows are factored) and vn2 (as last computed), of the real type R:
//
//   qp3_norms      vn1[j] = vn2[j] = ||A[:, j]||_2 for every column (every != 0) or those with
//                  flags[j] set, whose flag it clears; *stop := 0. One block per column.
//   qp3_pivot      the pivot p = k + argmax(vn1[k:cols]) (the first on a tie, as LAPACK's
//                  i?amax), then columns k and p of A exchanged (every row), rows k and p of F
//                  (its first k columns), jpvt[k] and jpvt[p]; vn1[p], vn2[p] := vn1[k], vn2[k]
//                  (column k's norms are not needed again). One block.
//   qp3_f_column   laqps's column k of F from y = A[rk:m, :]^H v and F[:, 0:k] y[0:k] (in F[:, k]
//                  already when k > 0): F[j, k] = tau (y[j] [j > k] - F[j, k] [k > 0]).
//   qp3_downdate   the norms of columns k+1.. after row rk is final (row = A[rk, :]): LAPACK's
//                  downdate vn1[j] *= sqrt(1 - (|A(rk, j)| / vn1[j])^2), or, where it has lost
//                  too much accuracy ((that) (vn1 / vn2)^2 <= tol3z), flags[j] := 1 and *stop := 1
//                  (laqps ends the panel and the norm is recomputed after its update); then the
//                  diagonal A(rk, k) := beta (the reflector's unit was there for the products).
//   The reflector itself is lapack_aux.cu's larfg (with its beta out and the unit in).
//
// Column norms are plain sums of squares, in double, as lapack_aux.cu's larfg: no scaling by the
// largest entry (entries beyond ~1e150 in double, or norms below the safe minimum, are outside
// what these kernels handle).

#include <climits>

#define QP3_THREADS 512  // backend/cuda/qr.py launches qp3_norms and qp3_pivot so

template <typename T, typename R>
__device__ void qp3_norms(const T* A, long long lda, int rows, int cols, R* vn1, R* vn2,
                          int* flags, int* stop, int every)
{
    __shared__ double partial[QP3_THREADS];
    if (blockIdx.x == 0 && threadIdx.x == 0) *stop = 0;
    for (int j = blockIdx.x; j < cols; j += gridDim.x) {
        if (!every && flags[j] == 0) continue;  // the same for the whole block
        const double norm2 = block_sum_of_squares(A + (long long)j * lda, rows, partial);
        if (threadIdx.x == 0) {
            vn1[j] = vn2[j] = (R)sqrt(norm2);
            flags[j] = 0;
        }
    }
}

template <typename T, typename R>
__device__ void qp3_pivot(T* A, long long lda, int rows, int cols, int k, T* F, long long ldf,
                          R* vn1, R* vn2, int* jpvt)
{
    __shared__ R best_value[QP3_THREADS];
    __shared__ int best_index[QP3_THREADS];
    R value = R(-1);
    int index = INT_MAX;
    for (int j = k + threadIdx.x; j < cols; j += blockDim.x)  // ascending: > keeps the first
        if (vn1[j] > value) { value = vn1[j]; index = j; }
    best_value[threadIdx.x] = value;
    best_index[threadIdx.x] = index;
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) {
            const R other = best_value[threadIdx.x + half];
            const int other_index = best_index[threadIdx.x + half];
            if (other > best_value[threadIdx.x] ||
                (other == best_value[threadIdx.x] && other_index < best_index[threadIdx.x])) {
                best_value[threadIdx.x] = other;
                best_index[threadIdx.x] = other_index;
            }
        }
        __syncthreads();
    }
    const int p = best_index[0] == INT_MAX ? k : best_index[0];
    if (p == k) return;  // the same for the whole block
    T* a = A + (long long)k * lda;
    T* b = A + (long long)p * lda;
    for (int i = threadIdx.x; i < rows; i += blockDim.x) { const T t = a[i]; a[i] = b[i]; b[i] = t; }
    for (int c = threadIdx.x; c < k; c += blockDim.x) {
        const T t = F[k + c * ldf]; F[k + c * ldf] = F[p + c * ldf]; F[p + c * ldf] = t;
    }
    if (threadIdx.x == 0) {
        const int t = jpvt[k]; jpvt[k] = jpvt[p]; jpvt[p] = t;
        vn1[p] = vn1[k];
        vn2[p] = vn2[k];
    }
}

template <typename T>
__device__ void qp3_f_column(T* F, long long ldf, int cols, int k, const T* y, const T* tau)
{
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= cols) return;
    T* f = F + (long long)k * ldf;
    T value = j > k ? y[j] : Num<T>::make(0.0, 0.0);
    if (k > 0) value = Num<T>::make(real_part(value) - real_part(f[j]),
                                    imag_part(value) - imag_part(f[j]));
    f[j] = times(*tau, value);
}

template <typename T, typename R>
__device__ void qp3_downdate(const T* row, long long lda, int cols, int k, R* vn1, R* vn2,
                             int* flags, int* stop, T* diagonal, const T* beta, int downdate,
                             double tol3z)
{
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j == 0) *diagonal = *beta;
    if (!downdate || j <= k || j >= cols || vn1[j] == R(0)) return;
    const double re = real_part(row[(long long)j * lda]), im = imag_part(row[(long long)j * lda]);
    const double norm = vn1[j];
    double t = sqrt(re * re + im * im) / norm;
    t = fmax(0.0, (1.0 + t) * (1.0 - t));
    const double ratio = norm / (double)vn2[j];
    if (t * ratio * ratio <= tol3z) {
        flags[j] = 1;
        *stop = 1;
    } else {
        vn1[j] = (R)(norm * sqrt(t));
    }
}

#define QP3(S, T, R)                                                                           \
extern "C" __global__ void qp3_norms_##S(const T* A, long long lda, int rows, int cols, R* vn1,  \
    R* vn2, int* flags, int* stop, int every)                                                  \
{ qp3_norms<T, R>(A, lda, rows, cols, vn1, vn2, flags, stop, every); }                         \
extern "C" __global__ void qp3_pivot_##S(T* A, long long lda, int rows, int cols, int k, T* F,  \
    long long ldf, R* vn1, R* vn2, int* jpvt)                                                  \
{ qp3_pivot<T, R>(A, lda, rows, cols, k, F, ldf, vn1, vn2, jpvt); }                           \
extern "C" __global__ void qp3_f_column_##S(T* F, long long ldf, int cols, int k, const T* y,   \
    const T* tau)                                                                              \
{ qp3_f_column<T>(F, ldf, cols, k, y, tau); }                                                  \
extern "C" __global__ void qp3_downdate_##S(const T* row, long long lda, int cols, int k,       \
    R* vn1, R* vn2, int* flags, int* stop, T* diagonal, const T* beta, int downdate,           \
    double tol3z)                                                                              \
{ qp3_downdate<T, R>(row, lda, cols, k, vn1, vn2, flags, stop, diagonal, beta, downdate, tol3z); }

QP3(s, float, float)
QP3(d, double, double)
QP3(c, cuFloatComplex, float)
QP3(z, cuDoubleComplex, double)
