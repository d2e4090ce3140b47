// The Householder QR of a recursive panel's leaf (m x w, m >= w; w <= 16, or w <= 32 for the
// real types) in one launch on one thread-block cluster of 16 blocks (sm_90): LAPACK's geqr2
// column by column, for the four element types (s, d, c, z), the arithmetic in double.
//
// Why: cuSOLVER's geqrf on a tall panel costs about 30 us a column alone and 110 us beside the
// trailing update's GEMMs (perf/probes/probe_qr_panel.py): several launches a column, each
// waiting for SMs the GEMMs hold. The distributed QR's panel is on its critical path at every
// step. Here a leaf is one launch, and a column one exchange between the cluster's blocks.
// Measured on an H100 (probe_qr_panel; the backend's recursion on these leaves): a 65536 x 512
// panel 17.7 ms alone and 29.1 ms beside DGEMMs (cuSOLVER 15.3 / 55.5); 24576 x 512 9.6 / 17.8
// (11.4 / 45.0). A column of a 65536-row leaf costs about 25 us, the pass moving about 14 bytes
// a cycle per SM: far below L2's bandwidth, and not from too few loads in flight (three rows a
// thread at once took as long as one). Leaves of 32 columns (the real types' second kernel,
// device.qr_panel_leaf 32) cost 1.55x as much a column, and halve the launches between leaves.
//
// Layout: block b holds rows [b S, min((b + 1) S, m)), S = ceil(m / 16); thread t of it rows
// b S + t + r THREADS. Each row is read and written by its one thread, in global memory (a leaf
// of 65536 x 16 doubles, 8 MiB, stays in L2); only sums cross between threads.
//
// Column j, with x = A(j+1:m, j) and the sums the previous pass took for it:
//   1. exchange (one cluster barrier): each block's partial sums in its shared memory; every
//      block adds the 16 in the same order, so all hold the same numbers: max |x_i|,
//      ||x||^2, g_c = x^H A(j+1:m, c) for c > j, and row j (alpha = A(j, j), A(j, c));
//   2. larfg (LAPACK's): beta = -sign(Re alpha) sqrt(|alpha|^2 + ||x||^2),
//      tau = (beta - alpha) / beta, v = (1; x / (alpha - beta)); tau = 0 (H = I) where x = 0
//      and alpha is real;
//   3. w_c = v^H A(j:m, c) = A(j, c) + conj(1 / (alpha - beta)) g_c: no second pass over x;
//   4. the pass: v stored over x, A(j:m, c) -= conj(tau) v w_c (H^H applied, as geqr2), and
//      the same pass takes column j + 1's sums from the updated values.
// A sum of squares that may have lost digits or overflowed (||x||^2 below 1e-250 with x != 0,
// or it or a g_c not finite: entries beyond about 1e154 or a tiny column, in double) is
// recomputed: ||x|| scaled by max |x_i|, then w_c from v itself (two more exchanges, rare), and
// where alpha - beta is below 1e-300 v is x divided by it, not multiplied by its reciprocal
// (which would overflow): what dlarfg's rescaling loop achieves.
//
// Shared memory buffers for the exchange are double-buffered by parity: a block writes buffer
// p again two exchanges later, after the barrier of the exchange in between, which no thread
// reaches before it has read buffer p.

#include <cooperative_groups.h>
#include <cuComplex.h>

#define QR_LEAF_BLOCKS 16
#define QR_LEAF_THREADS 256

// sm_90 and later only (clusters); the backend launches it only there
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900

namespace qr_leaf {

namespace cg = cooperative_groups;

constexpr int C = QR_LEAF_BLOCKS, T = QR_LEAF_THREADS, WARPS = T / 32;
constexpr double SAFE_SQUARES = 1e-250;  // below: ||x||^2 may have lost digits to underflow
constexpr double TINY_DIVISOR = 1e-300;  // below: 1 / (alpha - beta) may overflow

// -- the arithmetic: double for real elements, cplx for complex ones ------------------------------
struct cplx {
    double re, im;
};
__device__ inline cplx operator+(cplx a, cplx b) { return {a.re + b.re, a.im + b.im}; }
__device__ inline cplx operator-(cplx a, cplx b) { return {a.re - b.re, a.im - b.im}; }
__device__ inline cplx operator*(cplx a, cplx b)
{
    return {a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re};
}
__device__ inline double conjugate(double a) { return a; }
__device__ inline cplx conjugate(cplx a) { return {a.re, -a.im}; }
__device__ inline double real_of(double a) { return a; }
__device__ inline double real_of(cplx a) { return a.re; }
__device__ inline double imag_of(double) { return 0.0; }
__device__ inline double imag_of(cplx a) { return a.im; }
__device__ inline double squared(double a) { return a * a; }
__device__ inline double squared(cplx a) { return a.re * a.re + a.im * a.im; }
__device__ inline double largest_part(double a) { return fabs(a); }
__device__ inline double largest_part(cplx a) { return fmax(fabs(a.re), fabs(a.im)); }
// |a / s|^2 without forming |a|^2 (which may overflow or underflow)
__device__ inline double squared_over(double a, double s) { return (a / s) * (a / s); }
__device__ inline double squared_over(cplx a, double s)
{
    return (a.re / s) * (a.re / s) + (a.im / s) * (a.im / s);
}
// a / b, scaled so that no intermediate over- or underflows (|b| may be tiny)
__device__ inline double divided(double a, double b) { return a / b; }
__device__ inline cplx divided(cplx a, cplx b)
{
    const double s = fmax(fabs(b.re), fabs(b.im));
    const double br = b.re / s, bi = b.im / s, ar = a.re / s, ai = a.im / s;
    const double q = br * br + bi * bi;
    return {(ar * br + ai * bi) / q, (ai * br - ar * bi) / q};
}
template <typename Wd> __device__ inline Wd make(double re, double im);
template <> __device__ inline double make<double>(double re, double) { return re; }
template <> __device__ inline cplx make<cplx>(double re, double im) { return {re, im}; }
// a value as `P` doubles in an exchange buffer, and back
__device__ inline double part(double a, int) { return a; }
__device__ inline double part(cplx a, int p) { return p ? a.im : a.re; }
template <typename Wd> __device__ inline Wd gather(const double* p);
template <> __device__ inline double gather<double>(const double* p) { return p[0]; }
template <> __device__ inline cplx gather<cplx>(const double* p) { return {p[0], p[1]}; }
__device__ inline void scatter(double* p, double a) { p[0] = a; }
__device__ inline void scatter(double* p, cplx a) { p[0] = a.re; p[1] = a.im; }

// an element type's wide type, loads, and stores that return the value as stored (rounded)
template <typename E> struct Elem;
template <> struct Elem<float> {
    using Wide = double;
    static constexpr int PARTS = 1;
    __device__ static Wide load(const float* p) { return *p; }
    __device__ static Wide rounded(Wide a) { return (float)a; }
    __device__ static Wide save(float* p, Wide a) { *p = (float)a; return (float)a; }
};
template <> struct Elem<double> {
    using Wide = double;
    static constexpr int PARTS = 1;
    __device__ static Wide load(const double* p) { return *p; }
    __device__ static Wide rounded(Wide a) { return a; }
    __device__ static Wide save(double* p, Wide a) { *p = a; return a; }
};
template <> struct Elem<cuFloatComplex> {
    using Wide = cplx;
    static constexpr int PARTS = 2;
    __device__ static Wide load(const cuFloatComplex* p) { return {p->x, p->y}; }
    __device__ static Wide rounded(Wide a) { return {(float)a.re, (float)a.im}; }
    __device__ static Wide save(cuFloatComplex* p, Wide a)
    {
        *p = make_cuFloatComplex((float)a.re, (float)a.im);
        return rounded(a);
    }
};
template <> struct Elem<cuDoubleComplex> {
    using Wide = cplx;
    static constexpr int PARTS = 2;
    __device__ static Wide load(const cuDoubleComplex* p) { return {p->x, p->y}; }
    __device__ static Wide rounded(Wide a) { return a; }
    __device__ static Wide save(cuDoubleComplex* p, Wide a)
    {
        *p = make_cuDoubleComplex(a.re, a.im);
        return a;
    }
};

__device__ inline double warp_sum(double x)
{
    for (int offset = 16; offset > 0; offset >>= 1) x += __shfl_xor_sync(0xffffffffu, x, offset);
    return x;
}
__device__ inline double warp_max(double x)
{
    for (int offset = 16; offset > 0; offset >>= 1)
        x = fmax(x, __shfl_xor_sync(0xffffffffu, x, offset));
    return x;
}

// -- the exchange ---------------------------------------------------------------------------------
// A block's shared memory. The sums: [0] max |x_i|, [1] ||x||^2, [2 + c P ...] g_c; then the
// row that holds the next alpha: [0] alpha, [P (1 + c) ...] its column c, from the thread that
// holds it.
template <int P, int W> struct Shared {
    static constexpr int SUMS = 2 + W * P, ROW = P * (1 + W), K = SUMS + ROW;
    double warp_sums[WARPS][SUMS];
    double published[2][K];
    double total[K];
    double own_row[ROW];
    double row_j[ROW];     // row j as exchanged, kept while later exchanges overwrite `total`
    double update[W * P];  // conj(tau) w_c
};

// total := the cluster's sums of each block's threads' (max for [0]); g_c for after < c < w only;
// the row part from block `row_owner`'s own_row (-1: none). Every thread of the cluster calls it.
template <int P, int W, typename Wd>
__device__ __forceinline__ void exchange(Shared<P, W>& s, cg::cluster_group& cluster, int& parity,
                                         double largest, double squares, const Wd (&g)[W],
                                         int after, int w, int row_owner)
{
    constexpr int SUMS = Shared<P, W>::SUMS, K = Shared<P, W>::K;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    largest = warp_max(largest);
    squares = warp_sum(squares);
    if (lane == 0) {
        s.warp_sums[warp][0] = largest;
        s.warp_sums[warp][1] = squares;
    }
#pragma unroll
    for (int c = 0; c < W; ++c) {
        if (c <= after || c >= w) continue;
#pragma unroll
        for (int p = 0; p < P; ++p) {
            const double sum = warp_sum(part(g[c], p));
            if (lane == 0) s.warp_sums[warp][2 + c * P + p] = sum;
        }
    }
    __syncthreads();
    double* out = s.published[parity];
    if (tid < SUMS) {
        double x = s.warp_sums[0][tid];
        for (int k = 1; k < WARPS; ++k)
            x = tid == 0 ? fmax(x, s.warp_sums[k][tid]) : x + s.warp_sums[k][tid];
        out[tid] = x;
    } else if (tid < K) {
        out[tid] = (int)cluster.block_rank() == row_owner ? s.own_row[tid - SUMS] : 0.0;
    }
    cluster.sync();
    if (tid < K) {
        double x = 0.0;
        for (int b = 0; b < C; ++b) {
            const double y = cluster.map_shared_rank(out, b)[tid];
            x = tid == 0 ? fmax(x, y) : x + y;
        }
        s.total[tid] = x;
    }
    parity ^= 1;
    __syncthreads();
}

template <typename E, int W, int R>
__device__ void geqrf_leaf(E* A, long long lda, int m, int w, E* tau_out)
{
    using Wd = typename Elem<E>::Wide;
    constexpr int P = Elem<E>::PARTS, SUMS = Shared<P, W>::SUMS, ROW = Shared<P, W>::ROW;
    __shared__ Shared<P, W> s;
    cg::cluster_group cluster = cg::this_cluster();
    const int rank = cluster.block_rank(), tid = threadIdx.x;
    const int share = (m + C - 1) / C, first = rank * share + tid,
              last = min(rank * share + share, m);
    int parity = 0;
    double largest = 0.0, squares = 0.0;  // this thread's sums for the next column
    Wd g[W];

    // j = -1 takes column 0's sums only
    for (int j = -1; j < w; ++j) {
        bool apply = false, divide = false;
        Wd scale = make<Wd>(0.0, 0.0), d = scale;
        double beta = 0.0;
        if (j >= 0) {
            // 1. the sums for x = A(j+1:m, j), and row j
            exchange(s, cluster, parity, largest, squares, g, j, w, j / share);
            if (tid < ROW) s.row_j[tid] = s.total[SUMS + tid];
            const double x_largest = s.total[0], x_squares = s.total[1];
            bool plain = isfinite(x_squares) && (x_squares >= SAFE_SQUARES || x_largest == 0.0);
            for (int k = 2 + (j + 1) * P; k < 2 + w * P; ++k) plain = plain && isfinite(s.total[k]);
            __syncthreads();  // row_j
            double x_norm;
            if (plain) {
                x_norm = sqrt(x_squares);
            } else {  // ||x|| scaled by its largest entry
                double scaled = 0.0;
                for (int i = first; i < last; i += T)
                    if (i > j) scaled += squared_over(Elem<E>::load(A + i + j * lda), x_largest);
                exchange(s, cluster, parity, 0.0, scaled, g, W, w, -1);
                x_norm = x_largest * sqrt(s.total[1]);
            }
            // 2. larfg
            const Wd alpha = gather<Wd>(s.row_j);
            const double ar = real_of(alpha), ai = imag_of(alpha);
            apply = !(x_norm == 0.0 && ai == 0.0);
            Wd tau = make<Wd>(0.0, 0.0);
            if (apply) {
                const double big = fmax(fmax(fabs(ar), fabs(ai)), x_norm);
                beta = -copysign(big * sqrt((ar / big) * (ar / big) + (ai / big) * (ai / big) +
                                            (x_norm / big) * (x_norm / big)), ar);
                tau = make<Wd>((beta - ar) / beta, -ai / beta);
                d = make<Wd>(ar - beta, ai);
                scale = divided(make<Wd>(1.0, 0.0), d);
                divide = largest_part(d) < TINY_DIVISOR;
                // 3. w_c = v^H A(j:m, c)
                if (plain) {
                    if (tid > j && tid < w)
                        scatter(s.update + tid * P,
                                conjugate(tau) * (gather<Wd>(s.row_j + P * (1 + tid)) +
                                                  conjugate(scale) *
                                                      gather<Wd>(s.total + 2 + tid * P)));
                } else {  // from v itself
#pragma unroll
                    for (int c = 0; c < W; ++c) g[c] = make<Wd>(0.0, 0.0);
                    for (int i = first; i < last; i += T) {
                        if (i <= j) continue;
                        const Wd x = Elem<E>::load(A + i + j * lda);
                        const Wd v = Elem<E>::rounded(divide ? divided(x, d) : x * scale);
#pragma unroll
                        for (int c = 0; c < W; ++c)
                            if (c > j && c < w)
                                g[c] = g[c] + conjugate(v) * Elem<E>::load(A + i + c * lda);
                    }
                    exchange(s, cluster, parity, 0.0, 0.0, g, j, w, -1);
                    if (tid > j && tid < w)
                        scatter(s.update + tid * P,
                                conjugate(tau) * (gather<Wd>(s.row_j + P * (1 + tid)) +
                                                  gather<Wd>(s.total + 2 + tid * P)));
                }
            }
            if (rank == 0 && tid == 0) Elem<E>::save(tau_out + j, tau);
            __syncthreads();  // update
        }
        // 4. the pass: H(j)^H applied to rows j:m, column n = j + 1's sums taken
        const int n = j + 1;
        largest = squares = 0.0;
#pragma unroll
        for (int c = 0; c < W; ++c) g[c] = make<Wd>(0.0, 0.0);
        for (int i0 = first; i0 < last; i0 += R * T) {
            // every load of the thread's R rows before any store: the stores may alias the
            // loads for all the compiler knows, and the pass is bound by how many loads are in
            // flight (L2's latency)
            Wd x[R], a[R][W];
            bool active[R];
#pragma unroll
            for (int r = 0; r < R; ++r) {
                const int i = i0 + r * T;
                active[r] = i < last && i >= j && (i > j || apply);
                x[r] = make<Wd>(0.0, 0.0);
                if (!active[r]) continue;
                if (apply && i > j) x[r] = Elem<E>::load(A + i + j * lda);
#pragma unroll
                for (int c = 0; c < W; ++c)
                    if (c > j && c < w) a[r][c] = Elem<E>::load(A + i + c * lda);
            }
#pragma unroll
            for (int r = 0; r < R; ++r) {
                const int i = i0 + r * T;
                if (!active[r]) continue;
                E* row = A + i;
                if (apply) {
                    const Wd v = i > j ? Elem<E>::save(row + j * lda, divide ? divided(x[r], d)
                                                                             : x[r] * scale)
                                       : make<Wd>(1.0, 0.0);
#pragma unroll
                    for (int c = 0; c < W; ++c)
                        if (c > j && c < w)
                            a[r][c] = Elem<E>::save(row + c * lda,
                                                    a[r][c] - v * gather<Wd>(s.update + c * P));
                    if (i == j) Elem<E>::save(row + j * lda, make<Wd>(beta, 0.0));
                }
                if (n >= w || i < n) continue;
                // column n's sums, from the updated values (a[r][n] picked by constant
                // indices: a variable one would put a[] in local memory)
                Wd next = make<Wd>(0.0, 0.0);
#pragma unroll
                for (int c = 0; c < W; ++c)
                    if (c == n) next = a[r][c];
                if (i > n) {
                    largest = fmax(largest, largest_part(next));
                    squares += squared(next);
                } else {
                    scatter(s.own_row, next);
                }
#pragma unroll
                for (int c = 0; c < W; ++c) {
                    if (c <= n || c >= w) continue;
                    if (i > n) g[c] = g[c] + conjugate(next) * a[r][c];
                    else scatter(s.own_row + P * (1 + c), a[r][c]);
                }
            }
        }
    }
    cluster.sync();  // no block leaves while another may still read its shared memory
}

}  // namespace qr_leaf

// A: the leaf's top-left, lda; m x w (w <= the kernel's width, w <= m); tau: its w scalars. Each
// width W comes with the rows R a thread works on at once: as many as its 255 registers hold
// (a[R][W] and g[W], without spilling).
#define GEQRF_LEAF(NAME, E, W, R)                                                               \
extern "C" __global__ void __cluster_dims__(QR_LEAF_BLOCKS, 1, 1)                               \
__launch_bounds__(QR_LEAF_THREADS, 1) NAME(E* A, long long lda, int m, int w, E* tau)           \
{                                                                                               \
    qr_leaf::geqrf_leaf<E, W, R>(A, lda, m, w, tau);                                            \
}
#else
#define GEQRF_LEAF(NAME, E, W, R)                                                               \
extern "C" __global__ void NAME(E*, long long, int, int, E*) { __trap(); }
#endif

GEQRF_LEAF(geqrf_leaf_cluster_s, float, 16, 3)
GEQRF_LEAF(geqrf_leaf_cluster_d, double, 16, 3)
GEQRF_LEAF(geqrf_leaf_cluster_c, cuFloatComplex, 16, 1)
GEQRF_LEAF(geqrf_leaf_cluster_z, cuDoubleComplex, 16, 1)
GEQRF_LEAF(geqrf_leaf_cluster_32_s, float, 32, 1)
GEQRF_LEAF(geqrf_leaf_cluster_32_d, double, 32, 1)
