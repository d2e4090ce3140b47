"""What the Householder family (QR, QL, LQ, Hessenberg) asks of the cuda backend: the panel's
geqrf (cuSOLVER; QL and LQ through a reversed or conjugate-transposed copy), the explicit
reflectors and larft's T, gehrd's larfg and its copies (lapack_aux.cu), and products with a
matrix for host-driven loops (apply, apply_to_host).

Module-level functions over (lane, blocks, ...) as blas.py's; apply_to_host takes the backend
(its work goes to the critical-path lane, whatever lane calls, and is complete on return).
"""
from __future__ import annotations

import ctypes

import numpy as np
from nvmath.bindings import cublas, cusolverDn

from .. import _driver
from .blas import _AUX_BLOCK, _OP, _SCALARS, _SIDE, _TRIANGLE_CODE, _UPLO, _aux_grid
from .runtime import _PREFIX, _STATS_STRIP, _STATS_THREADS
from .store import DeviceBlock


def explicit_reflectors(lane, src, dst, storage):
    """dst := the block reflector's V in explicit column form from a factored panel, as the
    host backend's (its docstring has the storages): a copy, then the unit diagonal and the
    zeros written over the triangle that holds R (or L)."""
    backend = lane.backend
    rows, kb = dst.rows, dst.cols
    if storage == "LQ":  # the row panel's conjugate transpose is QR's storage
        _conj_transpose(lane, src, dst)
        storage = "QR"
    else:
        backend.lacpy(lane, "A", src, dst)
    if storage == "QR":
        backend.laset(lane, "U", 0, 1, dst)
    elif storage == "QL":
        backend.laset(lane, "L", 0, 1, dst.sub(rows - kb, rows, 0, kb))
    else:
        raise ValueError(f"storage must be 'QR', 'QL' or 'LQ'; got storage={storage!r}")


def triangular_factor(lane, V, tau, T, direction, work=None):
    """LAPACK larft for explicit V and tau (see lapack_aux.cu): T = U^-1 with
    U = diag(1/tau) + the strictly upper (forward) or lower (backward) part of V^H V: one
    gemm for the Gram matrix, a kernel, a kb x kb trsm on the identity (in `work`, kb x kb
    scratch), a copy and a kernel, instead of LAPACK's kb dependent matrix-vector steps."""
    kb = T.rows
    if kb == 0:
        return
    backend = lane.backend
    uplo = "U" if direction == "forward" else "L"
    prefix = _PREFIX[T.dtype]
    backend.gemm(lane, 1, V, V, 0, T, trans_a="C")
    backend.kernels.launch(f"larft_prepare_{prefix}", _aux_grid(kb, kb), _AUX_BLOCK,
                           lane.handle, ctypes.c_void_p(T.ptr), ctypes.c_longlong(T.ld),
                           ctypes.c_void_p(tau.ptr), ctypes.c_int(kb),
                           ctypes.c_int(int(direction == "forward")))
    backend.laset(lane, "A", 0, 1, work)
    backend.trsm(lane, "L", uplo, "N", "N", 1, T, work)
    backend.lacpy(lane, "A", work, T)
    backend.kernels.launch(f"larft_finish_{prefix}", (-(-kb // 256),), (256,), lane.handle,
                           ctypes.c_void_p(T.ptr), ctypes.c_longlong(T.ld),
                           ctypes.c_void_p(tau.ptr), ctypes.c_int(kb))


def householder_panel(lane, A, step, storage, rows, cols, taus):
    """The panel rows r0:r1 x columns c0:c1 of A factored on the GPU as `storage` says, its
    scalars into tau[t0:t1] on the device. cuSOLVER has geqrf only; QL's panel is the QR
    panel of the reversed block, LQ's that of the conjugate transpose (panel/qr.py proves
    both): those go to a workspace copy in QR's orientation and back, one pass each way."""
    (r0, r1), (c0, c1), (t0, t1) = rows, cols, taus
    panel = A.block(r0, r1, c0, c1)
    tau_ptr = int(A.tau_dev) + t0 * A.itemsize
    if storage == "QR":
        _geqrf(lane, A, step, panel, tau_ptr)
        return
    qr_rows, qr_cols = (panel.cols, panel.rows) if storage == "LQ" else panel.shape
    problem = A.workspace("panel as QR", qr_rows, qr_cols)
    if storage == "LQ":
        _conj_transpose(lane, panel, problem)
        _geqrf(lane, A, step, problem, tau_ptr)
        _conj_transpose(lane, problem, panel)
        return
    _flip(lane, panel, problem)
    reversed_tau = A.workspace("panel tau", t1 - t0, 1)
    _geqrf(lane, A, step, problem, reversed_tau.ptr)
    _flip(lane, problem, panel)
    _flip(lane, reversed_tau, A.tau_block(t0, t1))


# geqrf_leaf_cluster.cu's shape: one cluster of 16 blocks of 256 threads; its leaves up to 16
# columns wide for every type, up to 32 for the real types (their registers hold a row of 32)
_QR_LEAF = {"blocks": 16, "threads": 256, "widest": {"s": 32, "d": 32, "c": 16, "z": 16}}


def _geqrf(lane, A, step, block, tau_ptr):
    """geqrf of `block` in place, its scalars at tau_ptr: by recursive halves on thread-block
    cluster leaves of at most A.settings.qr_panel_leaf columns (`_geqrf_recursive`) where the
    block is tall and the lane can launch a cluster of 16 (an sm_90 device, not a green
    context of fewer SMs than a GPU processing cluster); else, or with qr_panel_leaf 0,
    cuSOLVER's geqrf on the whole block."""
    leaf = min(A.settings.qr_panel_leaf, _QR_LEAF["widest"][_PREFIX[A.dtype]])
    if leaf > 0 and getattr(lane, "cluster_blocks", 1) >= _QR_LEAF["blocks"] and \
            block.rows >= block.cols:
        _geqrf_recursive(lane, A, block, tau_ptr, leaf)
        return
    prefix = _PREFIX[A.dtype]
    need = getattr(cusolverDn, prefix + "geqrf_buffer_size")(lane.solver, block.rows,
                                                              block.cols, block.ptr, block.ld)
    work = A.extra_workspace("geqrf", need * A.itemsize)
    getattr(cusolverDn, prefix + "geqrf")(lane.solver, block.rows, block.cols, block.ptr,
                                         block.ld, tau_ptr, work, need,
                                         int(A.info_dev) + step * 4)


def _geqrf_recursive(lane, A, block, tau_ptr, width):
    """The QR of a tall block by recursive halving (Elmroth and Gustavson 2000), on one lane:

        [A1 A2] with A1 the left h columns, A2 the rest
        A1 = Q1 [R1; 0]                  the left half, recursively
        A2 := Q1^H A2 = A2 - V1 T1^H V1^H A2     T1 = larft(V1, tau1): two GEMMs and a TRMM
        A2[h:, :] = Q2 [R2; 0]           the right half's rows below R1, recursively

    and a leaf of at most `width` columns in one launch on a thread-block cluster
    (cuda/geqrf_leaf_cluster.cu). cuSOLVER's geqrf costs about 30 us a column alone and 110 us
    beside the trailing update's GEMMs (perf/probes/probe_qr_panel.py), several launches a
    column each waiting for SMs; here a column is one exchange inside the leaf's launch, and
    the launches between leaves carry the flops as GEMMs. (The update is LAPACK's larfb, as
    update/qr.apply_block_reflector, which the backend cannot import.)"""
    backend, rows, cols, prefix = lane.backend, block.rows, block.cols, _PREFIX[block.dtype]
    if cols <= width:
        kernel = f"geqrf_leaf_cluster_{prefix}" if cols <= 16 else f"geqrf_leaf_cluster_32_{prefix}"
        backend.kernels.launch(kernel, (_QR_LEAF["blocks"],), (_QR_LEAF["threads"],),
                               lane.handle, ctypes.c_void_p(block.ptr),
                               ctypes.c_longlong(block.ld), ctypes.c_int(rows),
                               ctypes.c_int(cols), ctypes.c_void_p(tau_ptr))
        return
    h = -(-(cols // 2) // width) * width  # the left half, whole leaves
    # the largest V and T first: the workspaces are kept for the store's lifetime
    V = A.workspace(f"panel V {lane.name}", rows, h)
    T = A.workspace(f"panel T {lane.name}", h, h)
    _geqrf_recursive(lane, A, block.sub(0, rows, 0, h), tau_ptr, width)
    explicit_reflectors(lane, block.sub(0, rows, 0, h), V, "QR")
    triangular_factor(lane, V, DeviceBlock(tau_ptr, h, 1, h, block.dtype), T, "forward",
                      work=A.scratch(lane, h, h))
    right = block.sub(0, rows, h, cols)
    W = A.scratch(lane, h, cols - h)
    backend.gemm(lane, 1, V, right, 0, W, trans_a="C")  # W = V1^H A2
    backend.trmm(lane, "L", "U", "C", "N", 1, T, W)      # W = T1^H W
    backend.gemm(lane, -1, V, W, 1, right)                # A2 -= V1 W
    _geqrf_recursive(lane, A, block.sub(h, rows, h, cols), tau_ptr + h * block.dtype.itemsize,
                     width)


def _conj_transpose(lane, src, dst):
    """dst (rows x cols) := src^H (cols x rows)."""
    geam = getattr(cublas, _PREFIX[dst.dtype] + "geam")
    one, _, zero = (s.ctypes.data for s in _SCALARS[dst.dtype])
    geam(lane.blas, _OP["C"], _OP["N"], dst.rows, dst.cols, one, src.ptr, src.ld, zero,
         dst.ptr, dst.ld, dst.ptr, dst.ld)


def _flip(lane, src, dst):
    """dst := src with rows and columns reversed (same shape)."""
    lane.backend.kernels.launch(f"flip_{_PREFIX[dst.dtype]}", _aux_grid(dst.rows, dst.cols),
                                _AUX_BLOCK, lane.handle, ctypes.c_void_p(src.ptr),
                                ctypes.c_longlong(src.ld), ctypes.c_void_p(dst.ptr),
                                ctypes.c_longlong(dst.ld), ctypes.c_int(dst.rows),
                                ctypes.c_int(dst.cols))


# -- gehrd's panel loop: a reflector at a time ---------------------------------------------------
def larfg(lane, x, tau, beta=None):
    """LAPACK larfg on the column block x (alpha = x[0], the rest below), in place where it
    lives (lapack_aux.cu, one block of threads: no host wait); tau := the scalar, a 1 x 1
    block. With `beta` (a 1 x 1 block): beta := beta and x[0] := 1, the reflector's v in place
    (geqp3's panel). One read and one write of the column."""
    lane.backend.kernels.launch(f"larfg_{_PREFIX[x.dtype]}", (1,), (256,), lane.handle,
                                ctypes.c_void_p(x.ptr), ctypes.c_int(x.rows),
                                ctypes.c_void_p(tau.ptr),
                                ctypes.c_void_p(0 if beta is None else beta.ptr))


def lahr2_reflector(lane, x, tau, v, w, t_diagonal):
    """larfg on x as above, and in the same launch the copies gehrd's panel loop needs from
    the reflector: v := x[1:] (its explicit V below the unit), w := -tau (1; x[1:]) and
    t_diagonal := tau (1 x 1 blocks). One block of threads."""
    lane.backend.kernels.launch(f"lahr2_reflector_{_PREFIX[x.dtype]}", (1,), (256,),
                                lane.handle, ctypes.c_void_p(x.ptr), ctypes.c_int(x.rows),
                                ctypes.c_void_p(tau.ptr), ctypes.c_void_p(v.ptr),
                                ctypes.c_void_p(w.ptr), ctypes.c_void_p(t_diagonal.ptr))


def apply_to_host(backend, lane, A, X, trans="N", uplo=None, work=None):
    """op(A) X for a host array X (op "N" or "C"; with `uplo` "L" or "U", A is Hermitian
    and only that triangle is read), as a new host array: X up, `apply`, the product down
    and a wait, on the critical-path stream whatever lane calls (a host loop needs the
    product next). `work` holds X and the product on the device: at least (rows + cols) x k
    elements of A's dtype. One pass over A."""
    X = np.asfortranarray(X, dtype=A.dtype)
    rows, cols = (A.rows, A.cols) if trans == "N" else (A.cols, A.rows)
    k = X.shape[1]
    Y = np.empty((rows, k), dtype=A.dtype, order="F")
    if Y.size == 0:
        return Y
    if cols == 0:
        Y[...] = 0
        return Y
    x_ptr, y_ptr = work.ptr, work.ptr + cols * k * A.dtype.itemsize
    on_device = DeviceBlock(x_ptr, cols, k, cols, A.dtype)
    product = DeviceBlock(y_ptr, rows, k, rows, A.dtype)
    gpu = backend.lane("gpu:panel")
    with gpu:
        cublas.set_matrix_async(cols, k, A.dtype.itemsize, X.ctypes.data, cols, x_ptr, cols,
                                gpu.handle)
        backend.apply(gpu, A, on_device, product, trans, uplo)
        cublas.get_matrix_async(rows, k, A.dtype.itemsize, y_ptr, rows, Y.ctypes.data, rows,
                                gpu.handle)
        _driver.stream_synchronize(gpu.handle)
    return Y


def apply(lane, A, X, Y, trans="N", uplo=None):
    """Y := op(A) X on the device, no wait (op "N" or "C"; with `uplo` "L" or "U", A is
    Hermitian and only that triangle is read: hemm, symm when real). One pass over A."""
    rows, cols = (A.rows, A.cols) if trans == "N" else (A.cols, A.rows)
    k = X.cols
    if rows == 0 or k == 0:
        return
    backend = lane.backend
    if cols == 0:
        backend.laset(lane, "A", 0, 0, Y)
        return
    one, _, zero = (s.ctypes.data for s in _SCALARS[A.dtype])
    prefix = _PREFIX[A.dtype]
    if uplo is not None and k == 1:  # one pass over the triangle (hemm's is slower)
        # hemv.cu, where cuBLAS's symv reads the triangle at half the copy bandwidth
        backend.laset(lane, "A", 0, 0, Y)
        backend.kernels.launch(f"hemv_{prefix}", (-(-rows // _STATS_THREADS),
                                                  -(-rows // _STATS_STRIP)),
                               (_STATS_THREADS,), lane.handle, ctypes.c_void_p(A.ptr),
                               ctypes.c_longlong(A.ld), ctypes.c_int(rows),
                               ctypes.c_int(_TRIANGLE_CODE[uplo]), ctypes.c_void_p(X.ptr),
                               ctypes.c_void_p(Y.ptr))
    elif uplo is not None:
        hemm = getattr(cublas, prefix + ("hemm" if A.dtype.kind == "c" else "symm"))
        hemm(lane.blas, _SIDE["L"], _UPLO[uplo], rows, k, one, A.ptr, A.ld, X.ptr, X.ld,
             zero, Y.ptr, Y.ld)
    elif k == 1:
        getattr(cublas, prefix + "gemv")(lane.blas, _OP[trans], A.rows, A.cols, one, A.ptr,
                                         A.ld, X.ptr, 1, zero, Y.ptr, 1)
    else:
        getattr(cublas, prefix + "gemm")(lane.blas, _OP[trans], _OP["N"], rows, k, cols, one,
                                         A.ptr, A.ld, X.ptr, X.ld, zero, Y.ptr, Y.ld)
