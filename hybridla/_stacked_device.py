"""Stacks of device arrays (the GPU interface of _stacked.py): one batched computation for the
whole stack, the results left on the device as the same kind of array as the input (CuPy,
PyTorch, PyCUDA), each member column-major.

    lu_factor            up to 32 x 32: a warp per member (our kernel, the member in registers,
                         read where it is); else the blocked batched LU of lapack/batched.py (our
                         panel kernel, laswp, trsmBatched, gemmStridedBatched); cuBLAS
                         getrfBatched for square members up to DEVICE_CUBLAS_LU_UP_TO (0: none)
    lu_solve             cuBLAS getrsBatched
    solve                "gen": getrf as lu_factor, then getrsBatched; "pos": cuSOLVER
                         potrfBatched, then two trsmBatched; no condition estimate
    cholesky, cho_factor up to 32 x 32: a warp per member (our kernel); else cuSOLVER potrfBatched
    cho_solve            two cuBLAS trsmBatched
    qr                   mode "r" and "raw": cuBLAS geqrfBatched; "full" and "economic" (which
                         need Q: no batched orgqr exists) loop over the members on the device
    lstsq, hessenberg    loop over the members on the device (no batched routine: gelsBatched
                         has no rank test, nothing batches gehrd)

A stack is never factored in place: the results are new arrays (overwrite_a and overwrite_b
are checked and ignored). The pivots of lu_factor and the tau of qr(mode="raw") stay on the
device too, int32 and 0-based, of the input's kind (so do a 2-D device matrix's pivots:
`device_pivots`; lu_solve takes them on the device or the host, `host_pivots`).
"""
from __future__ import annotations

import math
import warnings

import numpy as np
from scipy.linalg import LinAlgError, LinAlgWarning

from . import backend as _backends, config as _config
from ._common import _TRANS, _device_backend
from ._stacked import batch_shape, check_square, rhs_core
from ._stacked_qr import qr_shapes, stacked_residues
from .lapack import batched
from .scheduler.plan import make_plan

# The batched LU by member size (lu_method): members up to 32 x 32 by a warp each (the member in
# registers), other square ones up to DEVICE_CUBLAS_LU_UP_TO by cuBLAS' getrfBatched, the rest
# by the blocked batched LU. Measured (perf/RESULTS.md, issue 29, H100 2026-11-26): the warp LU
# 1.35x PyTorch at 32 (cuBLAS 0.66x), the blocked LU 1.22x at 128 and 1.11x at 512 (cuBLAS
# 0.86x and 0.56x): cuBLAS' is kept as a method (perf/batched.py --method cublas), not chosen.
DEVICE_WARP_LU = True
DEVICE_CUBLAS_LU_UP_TO = 0
# Cholesky up to 32 x 32 by a warp per member (our kernel: the member read where it is, the
# other triangle written on the way out), larger members by cuSOLVER's potrfBatched
DEVICE_WARP_CHOLESKY = True
_DTYPES = tuple(np.dtype(t) for t in (np.float32, np.float64, np.complex64, np.complex128))
_ASSUME_NAME = {"upper": "upper triangular", "lower": "lower triangular"}  # solve's own names


def _cb():
    return _backends.get_backend("cuda").batched  # the cuda backend's stacks family


# -- validation --------------------------------------------------------------------------------
def _shape(name, x, core):
    """(shape, dtype) of the device array x, with at least `core` axes, of a cuda dtype."""
    cai = x.__cuda_array_interface__
    shape = tuple(int(s) for s in cai["shape"])
    if len(shape) < core:
        raise ValueError(f"expected an array of {core} or more dimensions for {name}; got shape "
                         f"{shape}")
    dtype = np.dtype(cai["typestr"])
    if dtype not in _DTYPES:
        raise TypeError(f"a device array {name} must be float32, float64, complex64 or "
                        f"complex128; got dtype {dtype}")
    return shape, dtype


def _same_dtype(name, dtype, other, other_dtype):
    if other_dtype != dtype:
        raise TypeError(f"{other} must have the dtype of {name} ({dtype}) on the device; got "
                        f"{other_dtype}")


def _check_memory(ops, nbytes):
    """Refuse before any work a stack whose results and workspaces do not fit the
    device-memory budget (configuration "device.memory_budget", else 90% of what is free)."""
    budget = batched.memory_budget(ops, _config.get("device.memory_budget"))
    if nbytes > budget:
        raise MemoryError(f"the stack needs {nbytes} bytes of device memory, over the budget of "
                          f"{budget} bytes (config device.memory_budget)")


def _nb(options):
    nb = options.get("nb")
    return nb if isinstance(nb, int) and not isinstance(nb, bool) else None


def _copy_in(call, obj, batch, core_ndim, out, check_finite, name):
    """out := the user's obj broadcast to the batch, then check_finite on the copy (before any
    factorization)."""
    if call.lacpy_in(obj, batch, core_ndim, out, check_finite):
        raise ValueError(f"{name} must not contain infs or NaNs (check_finite=True)")


# -- LU ------------------------------------------------------------------------------------------
def lu_method(ops, m, n, itemsize, nb=None):
    """"warp", "cublas", "blocked" or "loop" (members too tall for the batched LU's panels)."""
    if DEVICE_WARP_LU and max(m, n) <= _cb().WARP_LU_LARGEST:
        return "warp"
    if m == n and n <= DEVICE_CUBLAS_LU_UP_TO:
        return "cublas"
    return "blocked" if batched.panel_width(ops, m, itemsize, nb) else "loop"


def lu_factor(a, check_finite, backend, options, method=None):
    """lu_factor of a device stack: (lu, piv) of a's kind, piv int32 0-based on the device.
    `method` ("warp", "cublas", "blocked", "loop"; default lu_method's choice): for
    perf/batched.py."""
    ops = _device_backend("a", backend)
    shape, dtype = _shape("a", a, 2)
    batch, (m, n) = shape[:-2], shape[-2:]
    make_plan(ops, m, n, dtype, routine="lu", **options)
    k, count, cb = min(m, n), math.prod(batch), _cb()
    if count == 0 or k == 0:
        return (cb.as_kind(a, cb.StackArray(ops, batch, (m, n), dtype, like=a)),
                cb.as_kind(a, cb.StackArray(ops, batch, (k,), np.int32, like=a)))
    method = method or lu_method(ops, m, n, dtype.itemsize, _nb(options))
    if method == "loop":
        return _lu_factor_loop(ops, a, batch, m, n, dtype, check_finite, options)
    _check_memory(ops, count * (m * n * dtype.itemsize + 4 * k + 4 + 3 * 8))
    with batched.Batched(ops, a) as call:
        lu, piv = call.stack(batch, (m, n), dtype), call.stack(batch, (k,), np.int32)
        if check_finite:  # the check reads the copy, before any factorization
            _copy_in(call, a, batch, 2, lu, check_finite, "a")
        infos = call.getrf(lu, piv, method, _nb(options), source=None if check_finite else a)
    for info in infos[infos > 0]:
        warnings.warn(f"Diagonal number {info} is exactly zero. Singular matrix.",
                      LinAlgWarning, stacklevel=4)
    return cb.as_kind(a, lu), cb.as_kind(a, piv)


def _lu_factor_loop(ops, a, batch, m, n, dtype, check_finite, options):
    """Members too tall for the batched panels: the 2-D device lu_factor of each, a loop on the
    device (its pivots, host arrays there, gathered into one device stack)."""
    from ._decomp_lu import lu_factor_2d
    results = _loop(ops, batch, [(a, 2)], lambda member: lu_factor_2d(
        member, False, check_finite, "cuda", options))
    lu, pivots = results
    host = np.stack(pivots).reshape(tuple(batch) + (min(m, n),))
    return _cb().as_kind(a, lu), device_pivots(ops, a, host)


def device_pivots(ops, template, host):
    """The host pivots (batch + (k,), 0-based) as a new int32 device array of the kind of the
    user's `template` (from its library's allocator where it has one)."""
    batch, k = host.shape[:-1], host.shape[-1]
    cb = _cb()
    piv = cb.StackArray(ops, batch, (k,), np.int32, like=template)
    if piv.count and k:
        with batched.Batched(ops, template) as call:
            call.pivots_from_host(np.ascontiguousarray(host.reshape(-1, k), dtype=np.int32), piv,
                                  k)
    return cb.as_kind(template, piv)


def host_pivots(ops, piv):
    """A device array of 0-based int32 pivots (..., k), in any layout, as a host array."""
    cai = piv.__cuda_array_interface__
    shape, dtype = tuple(int(s) for s in cai["shape"]), np.dtype(cai["typestr"])
    if dtype != np.int32:
        raise TypeError(f"piv on the device must be int32; got dtype {dtype}")
    if len(shape) < 1:
        raise ValueError(f"piv must have at least one dimension; got shape {shape}")
    if math.prod(shape) == 0:
        return np.empty(shape, np.int32)
    with batched.Batched(ops, piv) as call:
        return call.pivots_to_host(piv, shape[:-1], shape[-1])


def lu_solve(lu, piv, b, trans, check_finite, backend):
    ops = _device_backend("lu", backend)
    lu_shape, dtype = _shape("lu", lu, 2)
    b_shape, b_dtype = _shape("b", b, 1)
    n = check_square("lu", lu_shape)
    if hasattr(piv, "__cuda_array_interface__"):
        cai = piv.__cuda_array_interface__
        piv_shape, piv_dtype = tuple(cai["shape"]), np.dtype(cai["typestr"])
        if piv_dtype != np.int32:
            raise TypeError(f"piv on the device must be int32; got dtype {piv_dtype}")
    else:
        piv_shape = np.shape(piv)
    if len(piv_shape) < 1 or piv_shape[-1] != n:
        raise ValueError(f"piv must have shape (..., {n}) to match lu; got shape {piv_shape}")
    core = rhs_core("b", b_shape, n, "lu", lu_shape)
    batch = batch_shape(("lu", lu_shape[:-2]), ("piv", tuple(piv_shape[:-1])),
                        ("b", b_shape[:len(b_shape) - len(core)]))
    _same_dtype("lu", dtype, "b", b_dtype)
    cb, count = _cb(), math.prod(batch)
    x = cb.StackArray(ops, batch, core, dtype, like=b)
    if count == 0 or x.m * x.n == 0:
        return cb.as_kind(b, x)
    _check_memory(ops, count * (x.m * x.n * dtype.itemsize + 4 * n + 3 * 8))
    with batched.Batched(ops, b) as call:
        _copy_in(call, b, batch, len(core), x, check_finite, "b")
        factors = call.column_major(lu, lu_shape[:-2], batch)
        call.getrs(_TRANS[trans], factors, piv, batch, n, x)
    return cb.as_kind(b, x)


# -- solve ---------------------------------------------------------------------------------------
def solve(a, b, lower, check_finite, form, transposed, backend, options):
    """solve of device stacks. "gen" and "pos": a factored once per member of its own batch,
    then solved for the broadcast batch; singular members: one LinAlgError naming them all
    (flat indices into the broadcast batch), as the host stacks'; no condition estimate, so no
    ill-conditioning warning. The other forms: the 2-D device solve of each member in turn (a
    loop on the device), its errors and warnings as the 2-D function's."""
    ops = _device_backend("a", backend)
    a_shape, dtype = _shape("a", a, 2)
    b_shape, b_dtype = _shape("b", b, 1)
    _same_dtype("a", dtype, "b", b_dtype)
    n = check_square("a", a_shape)
    core = rhs_core("b", b_shape, n, "a", a_shape)
    own = a_shape[:-2]
    batch = batch_shape(("a", own), ("b", b_shape[:len(b_shape) - len(core)]))
    if form not in ("gen", "pos"):
        if math.prod(batch) == 0:
            return _cb().as_kind(b, _cb().StackArray(ops, batch, core, dtype, like=b))
        from ._basic import solve as solve_2d
        (x,) = _loop(ops, batch, [(a, 2), (b, len(core))], lambda am, bm: solve_2d(
            am, bm, lower, False, False, check_finite, _ASSUME_NAME.get(form, form), transposed,
            backend="cuda", **options))
        return x
    make_plan(ops, n, n, dtype, routine="lu" if form == "gen" else "cho", **options)
    conjugate = form == "pos" and transposed and dtype.kind == "c"
    if conjugate:
        raise NotImplementedError("solve(assume_a='pos', transposed=True) of a complex device "
                                  "array: solve a x = conj(b) and conjugate x instead")
    cb, count, own_count = _cb(), math.prod(batch), math.prod(own)
    x = cb.StackArray(ops, batch, core, dtype, like=b)
    if count == 0 or x.m * x.n == 0:
        return cb.as_kind(b, x)
    method = lu_method(ops, n, n, dtype.itemsize, _nb(options)) if form == "gen" else None
    if method == "loop":  # members too tall for the batched LU: the 2-D solve of each in turn
        from ._basic import solve as solve_2d
        (x,) = _loop(ops, batch, [(a, 2), (b, len(core))], lambda am, bm: solve_2d(
            am, bm, lower, False, False, check_finite, "gen", transposed, backend="cuda",
            **options))
        return x
    _check_memory(ops, own_count * (n * n * dtype.itemsize + 4 * n + 4) +
                  count * (x.m * x.n * dtype.itemsize + 4 * n + 3 * 8))
    with batched.Batched(ops, b) as call:
        factors = call.stack(own, (n, n), dtype)
        _copy_in(call, a, own, 2, factors, check_finite, "a")
        _copy_in(call, b, batch, len(core), x, check_finite, "b")
        if form == "gen":
            piv = call.stack(own, (n,), np.int32)
            own_infos = call.getrf(factors, piv, method, _nb(options))
        else:
            uplo = "L" if lower else "U"
            own_infos = call.potrf(uplo, factors)
        infos = np.broadcast_to(own_infos.reshape(own), batch).ravel()
        singular = np.flatnonzero(infos > 0).tolist()
        if singular:
            raise LinAlgError(f"A singular matrix detected: slice(s) {singular} are singular.")
        operand = call.operand(factors, batch, 2)
        if form == "gen":
            call.getrs("T" if transposed else "N", operand, piv, batch, n, x)
        else:  # real symmetric: A^T = A
            call.potrs(uplo, operand, x)
    return cb.as_kind(b, x)


# -- Cholesky ------------------------------------------------------------------------------------
def potrf(a, lower, check_finite, backend, options, clean):
    """cholesky (clean: the other triangle zero) or cho_factor (the other triangle a's, as the
    2-D device cho_factor keeps it) of a device stack; the first member in C order that is not
    positive definite raises LinAlgError naming its failing leading minor."""
    ops = _device_backend("a", backend)
    shape, dtype = _shape("a", a, 2)
    n = check_square("a", shape)
    batch = shape[:-2]
    make_plan(ops, n, n, dtype, routine="cho", **options)
    cb, count = _cb(), math.prod(batch)
    c = cb.StackArray(ops, batch, (n, n), dtype, like=a)
    if count == 0 or n == 0:
        return cb.as_kind(a, c)
    _check_memory(ops, count * (n * n * dtype.itemsize + 4 + 8))
    uplo = "L" if lower else "U"
    other = "strict_upper" if lower else "strict_lower"
    warp = DEVICE_WARP_CHOLESKY and n <= _cb().WARP_LU_LARGEST
    with batched.Batched(ops, a) as call:
        if check_finite:  # the check reads the copy, before any factorization
            _copy_in(call, a, batch, 2, c, check_finite, "a")
        infos = call.potrf(uplo, c, method="warp" if warp else "cusolver",
                           source=None if check_finite else a, keep=not clean)
        failing = np.flatnonzero(infos > 0)
        if failing.size:
            raise LinAlgError(f"{infos[failing[0]]}-th leading minor of the array is not "
                              f"positive definite")
        if not warp:  # the other triangle was cuSOLVER's workspace: zero (cholesky) or a's
            call.laset_other(other, c, None if clean else a, batch)
    return cb.as_kind(a, c)


def cho_solve(c, lower, b, check_finite, backend):
    ops = _device_backend("c", backend)
    c_shape, dtype = _shape("c", c, 2)
    b_shape, b_dtype = _shape("b", b, 1)
    n = check_square("c", c_shape)
    core = rhs_core("b", b_shape, n, "c", c_shape)
    batch = batch_shape(("c", c_shape[:-2]), ("b", b_shape[:len(b_shape) - len(core)]))
    _same_dtype("c", dtype, "b", b_dtype)
    cb, count = _cb(), math.prod(batch)
    x = cb.StackArray(ops, batch, core, dtype, like=b)
    if count == 0 or x.m * x.n == 0:
        return cb.as_kind(b, x)
    _check_memory(ops, count * (x.m * x.n * dtype.itemsize + 2 * 8))
    with batched.Batched(ops, b) as call:
        _copy_in(call, b, batch, len(core), x, check_finite, "b")
        factor = call.column_major(c, c_shape[:-2], batch)
        call.potrs("L" if lower else "U", factor, x)
    return cb.as_kind(b, x)


# -- QR ------------------------------------------------------------------------------------------
def qr(a, mode, pivoting, check_finite, backend, options):
    """qr of a device stack: "r" and "raw" by cuBLAS geqrfBatched (R copied out of the factors
    by one launch); "full" and "economic" by the 2-D device qr of each member in turn (Q has no
    batched routine: cuBLAS and cuSOLVER have no batched orgqr); with pivoting, every mode by
    the 2-D device qr of each member (no batched geqp3 anywhere), the permutations a host
    stack."""
    ops = _device_backend("a", backend)
    if pivoting:
        return _pivoted_qr_loop(ops, a, mode, check_finite, options)
    shape, dtype = _shape("a", a, 2)
    batch, (m, n) = shape[:-2], shape[-2:]
    make_plan(ops, m, n, dtype, routine="qr", **options)
    cb, count, k = _cb(), math.prod(batch), min(m, n)
    shapes = qr_shapes(m, n, mode, False)
    if count == 0 or k == 0:
        # (every member empty: the 2-D results' shapes, with Q the identity's where it has one)
        if count and mode in ("full", "economic"):
            return _qr_loop(ops, a, batch, mode, check_finite, options)
        return _empty_device(ops, a, batch, shapes, dtype, mode)
    if mode in ("full", "economic"):
        return _qr_loop(ops, a, batch, mode, check_finite, options)
    r_rows = shapes[-1][0]
    _check_memory(ops, count * ((m * n + k + r_rows * n) * dtype.itemsize + 3 * 8))
    with batched.Batched(ops, a) as call:
        factors, tau = call.stack(batch, (m, n), dtype), call.stack(batch, (k,), dtype)
        _copy_in(call, a, batch, 2, factors, check_finite, "a")
        call.geqrf(factors, tau)
        r = call.stack(batch, (r_rows, n), dtype)
        call.lacpy_r(factors, r)  # R: the factors' upper triangle (trapezoid), zeros below
    r = cb.as_kind(a, r)
    if mode == "r":
        return r  # a stack's R itself, as scipy's (a 2-D matrix gives the tuple (R,))
    return (cb.as_kind(a, factors), cb.as_kind(a, tau)), r


def _qr_loop(ops, a, batch, mode, check_finite, options):
    from ._decomp_qr import qr as qr_2d
    q, r = _loop(ops, batch, [(a, 2)], lambda member: qr_2d(
        member, False, None, mode, False, check_finite, backend="cuda", **options))
    return q, r


def _pivoted_qr_loop(ops, a, mode, check_finite, options):
    from ._decomp_qr import qr as qr_2d
    shape, dtype = _shape("a", a, 2)
    batch, (m, n) = shape[:-2], shape[-2:]
    make_plan(ops, m, n, dtype, routine="qr", **options)
    if math.prod(batch) == 0:
        return _empty_device(ops, a, batch, qr_shapes(m, n, mode, True), dtype, mode,
                             pivoting=True)

    def member(x):  # flat: the loop stacks device results and gathers host ones
        result = qr_2d(x, False, None, mode, True, check_finite, backend="cuda", **options)
        return (*result[0], *result[1:]) if mode == "raw" else result
    results = _loop(ops, batch, [(a, 2)], member)
    jpvt = np.stack(results[-1]).reshape(batch + (n,))
    if mode == "raw":
        factors, tau, r = results[0], np.stack(results[1]).reshape(batch + (min(m, n),)), \
            results[2]
        return (factors, tau), r, jpvt
    return (*results[:-1], jpvt)


def _empty_device(ops, template, batch, shapes, dtype, mode, pivoting=False):
    """Empty stacks of qr's core shapes; with pivoting, the last (P) a host int32 stack, as
    the pivoted loop returns it."""
    cb = _cb()

    def make(shape):
        if isinstance(shape[0], tuple):
            return tuple(make(s) for s in shape)
        return cb.as_kind(template, cb.StackArray(ops, batch, shape, dtype, like=template))
    if pivoting:
        results = (*(make(s) for s in shapes[:-1]), np.empty(tuple(batch) + shapes[-1], np.int32))
        return results
    results = tuple(make(s) for s in shapes)
    return results[0] if mode == "r" else results


# -- the loops: functions without a batched routine ----------------------------------------------
def _member(obj, core_ndim, index, batch):
    """obj's member for the broadcast batch index: obj[own index] (the user's kind of array,
    a view), own index 0 along obj's axes of size 1 and without its missing leading axes; a
    copy (C-ordered, by the array's own library) where the view has no unit stride along
    either axis, as the 2-D functions need (a stack whose batch axis varies fastest)."""
    shape = tuple(obj.__cuda_array_interface__["shape"])
    own = shape[:len(shape) - core_ndim]
    lead = len(batch) - len(own)
    own_index = tuple(0 if size == 1 else index[lead + i] for i, size in enumerate(own))
    member = obj[own_index] if own_index else obj
    _, core, dtype, strides = _cb().layout(member, core_ndim)
    if core_ndim == 2 and min(core) > 1 and dtype.itemsize not in strides[-2:]:
        # C-ordered copies: PyTorch's contiguous(), CuPy's copy()
        member = member.contiguous() if hasattr(member, "contiguous") else member.copy()
    return member


def _loop(ops, batch, inputs, member_fn):
    """The 2-D device function member_fn(*members) for each member of the broadcast batch, in
    turn (a loop on the device): its device results copied into stacks (StackArrays of the
    first member's shapes), its host results gathered in lists. Returns a tuple with one entry
    per result: a StackArray of the input's kind, or a list."""
    cb = _cb()
    template = inputs[0][0]
    out = None
    for i, index in enumerate(np.ndindex(*batch)):
        results = member_fn(*(_member(obj, core, index, batch) for obj, core in inputs))
        results = results if isinstance(results, tuple) else (results,)
        if out is None:
            out = [cb.StackArray(ops, batch, tuple(r.__cuda_array_interface__["shape"]),
                                 np.dtype(r.__cuda_array_interface__["typestr"]),
                                 like=template)
                   if hasattr(r, "__cuda_array_interface__") else [] for r in results]
        # the member's results are copied before they are freed: a named wait, per member
        with batched.Batched(ops, template) as call:
            for o, r in zip(out, results):
                if isinstance(o, list):
                    o.append(r)
                else:
                    call.lacpy_member(r, o, i)
    return tuple(o if isinstance(o, list) else cb.as_kind(template, o) for o in out)


def lstsq(a, b, cond, check_finite, lapack_driver, backend, options):
    """lstsq of device stacks: the 2-D device lstsq of each member in turn (a loop on the
    device): x stacked on the device, residues and rank on the host as the 2-D function gives
    them (a rank-deficient member by the device's pivoted QR, gelsy's answer)."""
    ops = _device_backend("a", backend)
    a_shape, dtype = _shape("a", a, 2)
    b_shape, b_dtype = _shape("b", b, 1)
    _same_dtype("a", dtype, "b", b_dtype)
    m, n = a_shape[-2:]
    core = rhs_core("b", b_shape, m, "a", a_shape)
    batch = batch_shape(("a", a_shape[:-2]), ("b", b_shape[:len(b_shape) - len(core)]))
    make_plan(ops, m, n, dtype, routine="qr", **options)
    cb = _cb()
    if math.prod(batch) == 0:
        x = cb.as_kind(b, cb.StackArray(ops, batch, (n,) + core[1:], dtype, like=b))
        return x, np.empty(tuple(batch) + (0,), dtype), np.empty(batch, np.int64), None
    from ._lstsq import lstsq as lstsq_2d
    x, residues, ranks, _ = _loop(ops, batch, [(a, 2), (b, len(core))],
                                  lambda am, bm: lstsq_2d(am, bm, cond, False, False,
                                                          check_finite, lapack_driver,
                                                          backend="cuda", **options))
    return (x, stacked_residues(batch, residues, dtype),
            np.asarray(ranks, np.int64).reshape(batch), None)


def hessenberg(a, calc_q, check_finite, backend, nb, trace, stats):
    """hessenberg of a device stack: the 2-D device hessenberg of each member in turn (a loop
    on the device: nothing batches gehrd)."""
    ops = _device_backend("a", backend)
    shape, dtype = _shape("a", a, 2)
    n = check_square("a", shape)
    batch = shape[:-2]
    make_plan(ops, n, n, dtype, routine="hrd", nb=nb, lookahead=0, panel="cpu", trace=trace)
    make_plan(ops, n, n, dtype, routine="qr", nb=nb, lookahead=0, panel="cpu")
    cb = _cb()
    if math.prod(batch) == 0:  # (the 2-D device hessenberg keeps a's dtype at every order)
        h = cb.as_kind(a, cb.StackArray(ops, batch, (n, n), dtype, like=a))
        return (h, cb.as_kind(a, cb.StackArray(ops, batch, (n, n), dtype, like=a))) \
            if calc_q else h
    from ._decomp_hessenberg import hessenberg as hessenberg_2d
    results = _loop(ops, batch, [(a, 2)], lambda member: hessenberg_2d(
        member, calc_q, False, check_finite, backend="cuda", nb=nb, trace=trace, stats=stats))
    return results if calc_q else results[0]
