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
{ first_zero_diagonal<T>(A, lda, count, info); }

AUX(s, float)
AUX(d, double)
AUX(c, cuFloatComplex)
AUX(z, cuDoubleComplex)
