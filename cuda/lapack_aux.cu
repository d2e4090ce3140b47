// Small LAPACK auxiliaries that cuBLAS lacks, for the four element types (s, d, c, z):
//
//   laset           the off-diagonal part (all, strictly upper or strictly lower) := alpha,
//                   the diagonal := beta (LAPACK xLASET)
//   lacpy           copy the upper or lower triangle, with the diagonal (LAPACK xLACPY)
//   larft_prepare   from the Gram matrix G = V^H V of a block of Householder vectors and their
//                   scalars tau, the triangular matrix U with U^-1 = T, LAPACK's larft T:
//                   forward (T upper):  U = diag(1/tau) + strictly-upper(G)
//                   backward (T lower): U = diag(1/tau) + strictly-lower(G)
//                   (H(1)...H(k) = I - V T V^H; for two reflectors T12 = -t1 t2 v1^H v2, the
//                   (1,2) entry of [[1/t1, g12], [0, 1/t2]]^-1.) A zero tau_i means H(i) = I: row
//                   and column i of U become e_i, so that U^-1 keeps the other entries of the
//                   product without H(i); larft_finish then sets T(i,i) = 0, as LAPACK's larft.
//   larft_finish    T(i,i) = 0 where tau_i = 0
//   flip            dst := src with rows and columns reversed (J src J): QL's panel is the QR
//                   panel of the reversed block, and its scalars come out in reverse order
//   first_zero_diagonal  info := the first i (1-based) with A(i, i) exactly zero, else 0: a
//                   recursive LU panel's info (LAPACK getrf's), one block of threads
//   larfg           LAPACK's elementary reflector of a column x (alpha = x[0]) where it lives,
//                   one block of threads: beta = -sign(Re alpha) ||x||_2, tau = (beta - alpha) /
//                   beta, x[1:] /= (alpha - beta), x[0] = beta; tau = 0 and x as it was when
//                   x[1:] = 0 and alpha is real. The norm is a plain sum of squares (LAPACK's
//                   scaled nrm2 and its rescaling of a tiny beta are not reproduced: entries
//                   beyond ~1e150 in double, ~1e18 in single, or a column of norm below the
//                   safe minimum, are outside what this kernel handles). One read and one write
//                   of the column. With beta given (geqp3's panel): beta := x[0] (beta) and
//                   x[0] := 1 after, the reflector's v in place for the products with it.
//   lahr2_reflector larfg, then the copies gehrd's panel loop needs from the reflector, in the
//                   same launch: v := x[1:] (its explicit V below the unit), w := -tau (1; x[1:])
//                   (V^H w is larft's column of T before the product by T) and t_ii := tau
//   invert_leaves   the inverses of a batch of small triangular blocks at a fixed stride (below)
//   add_triangles   a batch of nb x nb blocks at a fixed stride: the upper or lower triangle
//                   (with the diagonal) of D_b += S_b, the diagonal's imaginary part then set to
//                   zero as herk does: the diagonal blocks of a Cholesky update, computed by one
//                   strided-batched gemm into scratch (blockIdx.z is the block)
//
// All are one pass over a small (nb x nb) or block-sized matrix: one thread per element, a 2-D
// grid of 32 x 8 blocks; bytes moved = one read and/or one write per element.

#include <cuComplex.h>

template <typename T> struct Num;
template <> struct Num<float> {
    __device__ static float make(double re, double im) { return (float)re; }
    __device__ static bool zero(float x) { return x == 0.0f; }
    __device__ static float inv(float x) { return 1.0f / x; }
};
template <> struct Num<double> {
    __device__ static double make(double re, double im) { return re; }
    __device__ static bool zero(double x) { return x == 0.0; }
    __device__ static double inv(double x) { return 1.0 / x; }
};
template <> struct Num<cuFloatComplex> {
    __device__ static cuFloatComplex make(double re, double im) { return make_cuFloatComplex((float)re, (float)im); }
    __device__ static bool zero(cuFloatComplex x) { return x.x == 0.0f && x.y == 0.0f; }
    __device__ static cuFloatComplex inv(cuFloatComplex x) { return cuCdivf(make_cuFloatComplex(1.0f, 0.0f), x); }
};
template <> struct Num<cuDoubleComplex> {
    __device__ static cuDoubleComplex make(double re, double im) { return make_cuDoubleComplex(re, im); }
    __device__ static bool zero(cuDoubleComplex x) { return x.x == 0.0 && x.y == 0.0; }
    __device__ static cuDoubleComplex inv(cuDoubleComplex x) { return cuCdiv(make_cuDoubleComplex(1.0, 0.0), x); }
};

// uplo: 0 = all, 1 = upper (j > i), 2 = lower (i > j) for the off-diagonal part
__device__ inline bool in_part(int i, int j, int uplo)
{
    return uplo == 0 || (uplo == 1 && j > i) || (uplo == 2 && i > j);
}

template <typename T>
__device__ void laset(T* A, long long lda, int rows, int cols, int uplo, double are, double aim,
                      double bre, double bim)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x, j = blockIdx.y * blockDim.y + threadIdx.y;
    if (i >= rows || j >= cols) return;
    if (i == j) A[i + j * lda] = Num<T>::make(bre, bim);
    else if (in_part(i, j, uplo)) A[i + j * lda] = Num<T>::make(are, aim);
}

// uplo for lacpy: 0 = all, 1 = upper with the diagonal, 2 = lower with the diagonal
template <typename T>
__device__ void lacpy(const T* S, long long lds, T* D, long long ldd, int rows, int cols, int uplo)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x, j = blockIdx.y * blockDim.y + threadIdx.y;
    if (i >= rows || j >= cols) return;
    if (i == j || in_part(i, j, uplo)) D[i + j * ldd] = S[i + j * lds];
}

template <typename T>
__device__ void larft_prepare(T* G, long long ldg, const T* tau, int kb, int forward)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x, j = blockIdx.y * blockDim.y + threadIdx.y;
    if (i >= kb || j >= kb) return;
    T* g = G + i + j * ldg;
    const bool keep = forward ? (j > i) : (i > j);
    if (i == j) *g = Num<T>::zero(tau[i]) ? Num<T>::make(1.0, 0.0) : Num<T>::inv(tau[i]);
    else if (!keep || Num<T>::zero(tau[i]) || Num<T>::zero(tau[j])) *g = Num<T>::make(0.0, 0.0);
}

template <typename T>
__device__ void larft_finish(T* Tm, long long ldt, const T* tau, int kb)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < kb && Num<T>::zero(tau[i])) Tm[i + i * ldt] = Num<T>::make(0.0, 0.0);
}

template <typename T>
__device__ void flip(const T* S, long long lds, T* D, long long ldd, int rows, int cols)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x, j = blockIdx.y * blockDim.y + threadIdx.y;
    if (i >= rows || j >= cols) return;
    D[i + j * ldd] = S[(rows - 1 - i) + (long long)(cols - 1 - j) * lds];
}

template <typename T>
__device__ void first_zero_diagonal(const T* A, long long lda, int count, int* info)
{
    __shared__ int first;
    if (threadIdx.x == 0) first = count + 1;
    __syncthreads();
    for (int i = threadIdx.x; i < count; i += blockDim.x)
        if (Num<T>::zero(A[i + (long long)i * lda])) atomicMin(&first, i + 1);
    __syncthreads();
    if (threadIdx.x == 0) *info = first <= count ? first : 0;
}

__device__ inline double real_part(float x) { return x; }
__device__ inline double real_part(double x) { return x; }
__device__ inline double real_part(cuFloatComplex x) { return x.x; }
__device__ inline double real_part(cuDoubleComplex x) { return x.x; }
__device__ inline double imag_part(float) { return 0.0; }
__device__ inline double imag_part(double) { return 0.0; }
__device__ inline double imag_part(cuFloatComplex x) { return x.y; }
__device__ inline double imag_part(cuDoubleComplex x) { return x.y; }
__device__ inline float times(float a, float b) { return a * b; }
__device__ inline double times(double a, double b) { return a * b; }
__device__ inline cuFloatComplex times(cuFloatComplex a, cuFloatComplex b) { return cuCmulf(a, b); }
__device__ inline cuDoubleComplex times(cuDoubleComplex a, cuDoubleComplex b) { return cuCmul(a, b); }

#define LARFG_THREADS 256

// sum |x[i]|^2 over i < n in double, by the whole block (blockDim.x a power of two, `partial`
// blockDim.x doubles of shared memory); every thread returns it. A plain sum: no scaling.
template <typename T>
__device__ double block_sum_of_squares(const T* x, int n, double* partial)
{
    double sum = 0.0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const double re = real_part(x[i]), im = imag_part(x[i]);
        sum += re * re + im * im;
    }
    partial[threadIdx.x] = sum;
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
        __syncthreads();
    }
    const double total = partial[0];
    __syncthreads();  // partial may be used again at once
    return total;
}

template <typename T>
__device__ void larfg(T* x, int n, T* tau)
{
    __shared__ double partial[LARFG_THREADS];
    __shared__ T scale;
    __shared__ int identity;
    const double xnorm2 = block_sum_of_squares(x + 1, n - 1, partial);
    if (threadIdx.x == 0) {
        const double ar = real_part(x[0]), ai = imag_part(x[0]);
        identity = xnorm2 == 0.0 && ai == 0.0;
        if (identity) {
            *tau = Num<T>::make(0.0, 0.0);
        } else {
            const double beta = -copysign(sqrt(ar * ar + ai * ai + xnorm2), ar);
            *tau = Num<T>::make((beta - ar) / beta, -ai / beta);
            // 1 / (alpha - beta)
            const double dr = ar - beta, di = ai, d2 = dr * dr + di * di;
            scale = Num<T>::make(dr / d2, -di / d2);
            x[0] = Num<T>::make(beta, 0.0);
        }
    }
    __syncthreads();
    if (identity) return;
    for (int i = 1 + threadIdx.x; i < n; i += blockDim.x) x[i] = times(x[i], scale);
}

template <typename T>
__device__ void lahr2_reflector(T* x, int n, T* tau, T* v, T* w, T* t_diagonal)
{
    larfg<T>(x, n, tau);
    __syncthreads();  // x and tau, written by other threads of the block
    const T t = *tau;
    const T minus_tau = Num<T>::make(-real_part(t), -imag_part(t));
    if (threadIdx.x == 0) { w[0] = minus_tau; *t_diagonal = t; }
    for (int j = 1 + threadIdx.x; j < n; j += blockDim.x) {
        v[j - 1] = x[j];
        w[j] = times(x[j], minus_tau);
    }
}

template <typename T>
__device__ void add_triangles(const T* S, long long lds, long long stride_s, T* D, long long ldd,
                              long long stride_d, int nb, int uplo)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x, j = blockIdx.y * blockDim.y + threadIdx.y;
    if (i >= nb || j >= nb || !(i == j || in_part(i, j, uplo))) return;
    const T s = S[blockIdx.z * stride_s + i + j * lds];
    T* d = D + blockIdx.z * stride_d + i + j * ldd;
    const double im = i == j ? 0.0 : imag_part(*d) + imag_part(s);
    *d = Num<T>::make(real_part(*d) + real_part(s), im);
}

__device__ inline float plus(float a, float b) { return a + b; }
__device__ inline double plus(double a, double b) { return a + b; }
__device__ inline cuFloatComplex plus(cuFloatComplex a, cuFloatComplex b) { return cuCaddf(a, b); }
__device__ inline cuDoubleComplex plus(cuDoubleComplex a, cuDoubleComplex b) { return cuCadd(a, b); }

// invert_leaves: W_b := T_b^-1 for a batch of small triangular blocks of one order (blockIdx.x
// is the block, at strides stride_t and stride_w): each thread makes columns of the inverse by
// substitution against the identity, reading the entries it wrote before; the other triangle
// of W_b := 0. The leaves of backend/cuda.py's recursive inversion (a few dozen rows: O(order^2)
// steps per thread, from L1).
template <typename T>
__device__ void invert_leaves(const T* A, long long lda, long long stride_a, T* W, long long ldw,
                              long long stride_w, int order, int lower, int unit)
{
    const T* a = A + blockIdx.x * stride_a;
    T* w = W + blockIdx.x * stride_w;
    const T zero = Num<T>::make(0.0, 0.0), one = Num<T>::make(1.0, 0.0);
    for (int j = threadIdx.x; j < order; j += blockDim.x) {
        T* x = w + (long long)j * ldw;
        const int first = lower ? j + 1 : 0, last = lower ? order : j;  // rows below (above) j
        for (int i = lower ? 0 : j + 1; i < (lower ? j : order); ++i) x[i] = zero;
        x[j] = unit ? one : Num<T>::inv(a[j + (long long)j * lda]);
        for (int step = 0; step < last - first; ++step) {
            const int i = lower ? first + step : last - 1 - step;
            T sum = zero;
            const int k0 = lower ? j : i + 1, k1 = lower ? i : j + 1;  // x_k known, k in [k0, k1)
            for (int k = k0; k < k1; ++k) sum = plus(sum, times(a[i + (long long)k * lda], x[k]));
            const T minus_sum = Num<T>::make(-real_part(sum), -imag_part(sum));
            x[i] = unit ? minus_sum : times(minus_sum, Num<T>::inv(a[i + (long long)i * lda]));
        }
    }
}

#define AUX(S, T)                                                                              \
extern "C" __global__ void laset_##S(T* A, long long lda, int rows, int cols, int uplo,         \
    double are, double aim, double bre, double bim)                                            \
{ laset<T>(A, lda, rows, cols, uplo, are, aim, bre, bim); }                                    \
extern "C" __global__ void lacpy_##S(const T* S_, long long lds, T* D, long long ldd, int rows, \
    int cols, int uplo)                                                                        \
{ lacpy<T>(S_, lds, D, ldd, rows, cols, uplo); }                                               \
extern "C" __global__ void larft_prepare_##S(T* G, long long ldg, const T* tau, int kb,         \
    int forward)                                                                               \
{ larft_prepare<T>(G, ldg, tau, kb, forward); }                                                \
extern "C" __global__ void larft_finish_##S(T* Tm, long long ldt, const T* tau, int kb)         \
{ larft_finish<T>(Tm, ldt, tau, kb); }                                                          \
extern "C" __global__ void flip_##S(const T* S_, long long lds, T* D, long long ldd, int rows,  \
    int cols)                                                                                  \
{ flip<T>(S_, lds, D, ldd, rows, cols); }                                                     \
extern "C" __global__ void first_zero_diagonal_##S(const T* A, long long lda, int count,       \
    int* info)                                                                                 \
{ first_zero_diagonal<T>(A, lda, count, info); }                                              \
extern "C" __global__ void larfg_##S(T* x, int n, T* tau, T* beta)                          \
{                                                                                          \
    larfg<T>(x, n, tau);                                                                   \
    __syncthreads();                                                                       \
    if (beta != 0 && threadIdx.x == 0) { *beta = x[0]; x[0] = Num<T>::make(1.0, 0.0); }    \
}                                                                                          \
extern "C" __global__ void lahr2_reflector_##S(T* x, int n, T* tau, T* v, T* w, T* t_ii)  \
{ lahr2_reflector<T>(x, n, tau, v, w, t_ii); }                                             \
extern "C" __global__ void add_triangles_##S(const T* S_, long long lds, long long stride_s,    \
    T* D, long long ldd, long long stride_d, int nb, int uplo)                                 \
{ add_triangles<T>(S_, lds, stride_s, D, ldd, stride_d, nb, uplo); }                            \
extern "C" __global__ void invert_leaves_##S(const T* A, long long lda, long long stride_a,     \
    T* W, long long ldw, long long stride_w, int order, int lower, int unit)                   \
{ invert_leaves<T>(A, lda, stride_a, W, ldw, stride_w, order, lower, unit); }

AUX(s, float)
AUX(d, double)
AUX(c, cuFloatComplex)
AUX(z, cuDoubleComplex)
