"""What the user-layer families share: validation (once, here), backend choice, and the common
path of the factorizations (`_factor`) and of the solves. The memory budget is _memory.py's."""
from __future__ import annotations

import dataclasses
import functools
import inspect
import operator
import os
import warnings
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Optional

import numpy as np
import scipy.sparse
from scipy.linalg import LinAlgWarning
from scipy.linalg.blas import find_best_blas_type

from . import backend as _backends
from . import config as _config
from ._memory import _DEVICE_COPY_WHY, _DEVICE_WHY, _check_memory
from .backend import device_arrays as _device_arrays
from .backend.host.transfers import copy_by_columns
from .lapack._host_rhs import lacpy_from_host
from .scheduler.plan import make_plan
from .scheduler.trace import Phases, run_metadata

_TRANS = {0: "N", 1: "T", 2: "C", "N": "N", "T": "T", "C": "C"}


def is_device_array(x) -> bool:
    """__cuda_array_interface__, or DLPack on a CUDA device (backend/device_arrays.py)."""
    return _device_arrays.is_device_array(x)


def _admit(ops, name, value):
    """A device argument (or those in a tuple argument, such as lu_and_piv) as the function
    reads it: on the backend's device, its producer's work finished, a DLPack-only array seen
    through __cuda_array_interface__ (backend/device_arrays.admit)."""
    if isinstance(value, tuple):
        return tuple(_admit(ops, f"{name}[{i}]", v) for i, v in enumerate(value))
    return _device_arrays.admit(ops, name, value) if is_device_array(value) else value


def public(func):
    """A user-level function: a call that will touch the GPU (a device array among its arguments,
    or the cuda backend chosen) runs inside the cuda backend's `call()`, which makes the primary
    context current in the calling thread and pops it however the call ends, serializes calls
    on the device, and trims the memory pool when the call is done. Host calls run as they are,
    concurrently. Its device arguments are admitted first (`_admit`: the right device, ordered
    after the work that produced them, DLPack-only arrays seen through the CUDA array
    interface) and a DLPack-only array handed back comes back as the user's own. Other
    arguments are not judged here: a bad one reaches the function, which names it."""
    signature = inspect.signature(func)

    @functools.wraps(func)
    def call(*args, **kwargs):
        try:
            bound = signature.bind(*args, **kwargs)
            arguments = bound.arguments
            device = any(is_device_array(value) or (isinstance(value, tuple) and
                                                    any(is_device_array(v) for v in value))
                         for value in arguments.values())
            backend = arguments.get("backend")
            device = device or _backends.resolve_name(
                _config.get("backend") if backend is None else backend) == "cuda"
        except (TypeError, ValueError, RuntimeError):
            device = False  # the function itself reports the bad argument
        if not device:
            return func(*args, **kwargs)
        cuda = _cuda_backend_of(arguments)
        with _backends.on_device(cuda.ordinal), \
                cuda.call(_config.get("device.pool_max_bytes")) as ops:
            for name, value in bound.arguments.items():
                bound.arguments[name] = _admit(ops, name, value)
            return _device_arrays.unwrap(func(*bound.args, **bound.kwargs))
    return call


def _cuda_backend_of(arguments):
    """The cuda backend of the device the call's device arrays live on (all on one: else
    ValueError naming two of them), or of the thread's current device where none is given
    (backend.get_backend)."""
    default = _backends.get_backend("cuda")
    where = {}
    for name, value in arguments.items():
        for index, item in enumerate(value if isinstance(value, tuple) else (value,)):
            if is_device_array(item):
                ordinal = _device_arrays.array_device(default, item)
                if ordinal is not None:
                    label = f"{name}[{index}]" if isinstance(value, tuple) else name
                    where.setdefault(ordinal, label)
    if len(where) > 1:
        (first, a), (second, b) = list(where.items())[:2]
        raise ValueError(f"{a} is on CUDA device {first} and {b} on device {second}: the "
                         f"arrays of one call must be on one device")
    if not where or next(iter(where)) == default.ordinal:
        return default
    return _backends.get_backend("cuda", next(iter(where)))


# -- validation: once, here ------------------------------------------------------------------------
def _lapack_dtype(name, dtype):
    """The LAPACK precision scipy would use for this dtype (ints -> float64, float16 -> float32)."""
    if dtype.kind not in "biufc":
        raise TypeError(f"{name} must hold numbers; got dtype {dtype} for {name}")
    prefix, lapack_dtype, _ = find_best_blas_type(dtype=dtype)
    return np.dtype(lapack_dtype)


# host arrays from this size on are checked for NaN and infinity by a thread per core: one core
# reads memory at a fraction of the machine's bandwidth (the H100 machine's 16 cores, n = 32768:
# 0.093 s against numpy.asarray_chkfinite's 1.239; perf/RESULTS.md)
PARALLEL_CHECK_BYTES = 64 << 20


def _all_finite(array, threads: Optional[int] = None) -> bool:
    """Whether no entry of `array` is NaN or infinite (numpy.asarray_chkfinite's test), in a pass
    that allocates nothing: a sum with a NaN or an infinity among its terms is not finite, so a
    finite sum settles it, and only a sum that overflowed needs the test entry by entry. A large
    contiguous array is summed in pieces by `threads` threads (default one per core; NumPy's
    sums release the GIL)."""
    if array.dtype.kind not in "fc":
        return True
    with np.errstate(over="ignore", invalid="ignore"):
        threads = threads or os.cpu_count() or 1
        if array.nbytes >= PARALLEL_CHECK_BYTES and threads > 1 and \
                (array.flags.c_contiguous or array.flags.f_contiguous):
            pieces = np.array_split(array.ravel(order="K"), threads)  # views
            with ThreadPoolExecutor(threads) as pool:
                total = sum(pool.map(np.sum, pieces))
        else:
            total = np.sum(array)
        return bool(np.isfinite(total)) or bool(np.isfinite(array).all())


def _nonfinite_message(name) -> str:
    """What check_finite says of argument `name` holding an inf or NaN (ValueError's text)."""
    return f"{name} must not contain infs or NaNs (check_finite=True)"


def _require_finite(name, array):
    """check_finite before any work: ValueError naming `name` where `array` holds an inf or
    NaN."""
    if not _all_finite(array):
        raise ValueError(_nonfinite_message(name))


# Threads of the check beside a run. With a thread per core it took the memory bandwidth the
# staging threads need while the first block columns go up: on the H100 machine at n = 32768
# the first staging copy took 25.9 ms instead of 6.3 ms and the first update started 69 ms
# later (perf/RESULTS.md, issue 34). Two threads still end the check well inside the run.
BESIDE_CHECK_THREADS = 2


def _finite_beside(*arrays, threads=BESIDE_CHECK_THREADS) -> Future:
    """Whether every array of `arrays` is finite (`_all_finite`), computed by a host thread of
    its own (with a pool of `threads`) while the caller goes on: a Future of the answer."""
    checker = ThreadPoolExecutor(1, thread_name_prefix="hybridla-check")
    try:
        return checker.submit(lambda: all(_all_finite(a, threads) for a in arrays))
    finally:
        checker.shutdown(wait=False)  # its thread ends with the check


def _flag(name, value) -> bool:
    """A boolean argument (lower, overwrite_a, transposed, ...) as scipy's LAPACK wrappers take it:
    True, False, or an integer 0 or 1; anything else (a string such as "yes" or "False") raises
    ValueError naming the argument. A 0-d array of one of those is taken as its value: newer
    scipy's cho_factor returns `lower` so."""
    if isinstance(value, np.ndarray) and value.shape == ():
        value = value[()]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    try:
        number = operator.index(value)
    except TypeError:
        number = None
    if number not in (0, 1):
        raise ValueError(f"{name} must be True or False; got {name}={value!r}")
    return bool(number)


def _common_dtype(*dtypes):
    """The LAPACK precision in which operands of these dtypes meet (scipy's: float32 with float64
    is float64, real with complex is complex)."""
    return np.dtype(find_best_blas_type(dtype=np.result_type(*dtypes))[1])


def _host_matrix(name, x, check_finite, ndims=(2,)):
    if scipy.sparse.issparse(x):
        raise TypeError(f"{name} is a scipy.sparse {type(x).__name__}; hybridla factors dense "
                        f"matrices: pass {name}.toarray()")
    _device_arrays.check_dense(name, x)  # cupyx.scipy.sparse, sparse torch tensors
    array = np.asarray(x)
    if array.ndim not in ndims:
        want = " or ".join(f"{d}-D" for d in ndims)
        raise ValueError(f"expected a {want} array for {name}; got shape {array.shape}")
    dtype = _lapack_dtype(name, array.dtype)
    if check_finite:  # last: the one check that reads every entry
        _require_finite(name, array)
    return array, dtype


def _device_matrix_checks(name, x, backend, check_finite, ndims=(2,)):
    shape = tuple(x.__cuda_array_interface__["shape"])
    if len(shape) not in ndims:
        want = " or ".join(f"{d}-D" for d in ndims)
        raise ValueError(f"expected a {want} array for {name}; got shape {shape}")
    dtype = np.dtype(x.__cuda_array_interface__["typestr"])
    if dtype not in (np.float32, np.float64, np.complex64, np.complex128):
        raise TypeError(f"a device array {name} must be float32, float64, complex64 or "
                        f"complex128; got dtype {dtype}")
    if check_finite and backend.has_nonfinite(x):
        raise ValueError(f"{name} must not contain infs or NaNs (check_finite=True)")
    return shape, dtype


def _device_backend(name, backend):
    if backend not in (None, "auto", "cuda"):
        raise ValueError(f"{name} is a device array, which needs backend='cuda'; got "
                         f"backend={backend!r}")
    return _backends.get_backend("cuda")


def _host_backend(backend):
    return _backends.get_backend(_config.get("backend") if backend is None else backend)


def _warn_singular(info):
    if info > 0:
        warnings.warn(f"Diagonal number {info} is exactly zero. Singular matrix.",
                      LinAlgWarning, stacklevel=3)


def _factor(a, overwrite_a, check_finite, backend, options, routine, driver, square=False,
            keep_other_triangle=False, ooc_driver=None):
    """The common path of the factorizations: validate once, pick the backend and the plan,
    wrap the matrix in a tile store (device array in place or copied; host array streamed from
    and to where the result goes), run `driver(A, plan) -> (info, extra, trace)`, free the
    store whatever happens. Returns (result, info, extra); an empty matrix gives extra None.
    A host matrix over the memory budget (or any, with ooc "always") goes instead to
    `ooc_driver(source, result, plan) -> (info, extra, trace)`, which factors the host array
    `source` into `result` out of core, within plan.memory_budget; without one (a call that
    needs the factors in a store afterwards) it raises MemoryError."""
    phases = Phases()  # the call's stretches, for its trace's metadata ("call_phases")
    device = is_device_array(a)
    if device:
        ops = _device_backend("a", backend)
        (m, n), dtype = _device_matrix_checks("a", a, ops, check_finite)
    else:
        # check_finite below: beside the run where its failure would lose nothing
        array, dtype = _host_matrix("a", a, check_finite=False)
        ops = _host_backend(backend)
        m, n = array.shape
    if square and m != n:
        raise ValueError(f"expected a square matrix for a; got shape {(m, n)}")
    plan = make_plan(ops, m, n, dtype, routine=routine, **options)
    if m == 0 or n == 0:
        return (ops.empty((m, n), dtype, like=a) if device
                else np.empty_like(array, dtype=dtype)), 0, None
    in_place = device and _device_arrays.factored_in_place(a, overwrite_a)
    budget = _check_memory(ops, m, n, dtype, plan.nb,
                           ooc=None if device or ooc_driver is None else plan.ooc,
                           in_place=in_place,
                           why=None if not device else _DEVICE_WHY if in_place else
                           _DEVICE_COPY_WHY)
    phases.mark("checks_and_plan_s")
    if budget is not None:
        if check_finite:
            _require_finite("a", array)
        source, result = _host_source_and_result(array, dtype, overwrite_a and array is a,
                                                 copy_needed=keep_other_triangle)
        phases.mark("store_s")
        info, extra, run_trace = ooc_driver(source, result,
                                            dataclasses.replace(plan, memory_budget=budget))
        phases.mark("run_s")
        if plan.trace_path:
            run_trace.to_chrome(plan.trace_path, metadata=_trace_metadata(plan, routine, m, n,
                                                                          dtype, phases))
        return result, info, extra
    write_back = None
    if device:
        A, result, write_back = ops.device_matrix(a, plan.nb, overwrite_a,
                                                  settings=plan.device_settings)
    else:
        source, result = _host_source_and_result(
            array, dtype, overwrite_a and array is a,
            copy_needed=keep_other_triangle or not ops.has_device)
        # how it travels and the device settings of its store: the plan's (the host backend
        # computes in `result` and takes none)
        if check_finite and result is array:  # factored in place: checked before it is
            _require_finite("a", array)         # written
        A = ops.host_matrix(source, result, plan.nb, settings=plan.device_settings) \
            if ops.has_device else ops.host_matrix(source, result, plan.nb)
    # The factors go to a new array: the check runs beside the factorization, on the host's
    # cores while the matrix streams to the GPU, instead of a pass of its own before the
    # first upload (0.14-0.16 s at n = 32768 on the H100's 16 cores); an inf or NaN found
    # raises once the run ends, and the run's results are dropped.
    checking = _finite_beside(array) if check_finite and not device and \
        result is not array else None
    phases.mark("store_s")
    try:
        info, extra, run_trace = driver(A, plan)
        phases.mark("run_s")
    except BaseException:
        if checking is not None and not checking.result():
            raise ValueError(_nonfinite_message("a")) from None  # the input's fault
        raise
    finally:
        A.close()
    phases.mark("close_s")
    if checking is not None and not checking.result():
        raise ValueError(_nonfinite_message("a"))
    phases.mark("finite_check_wait_s")
    if write_back is not None:
        write_back()
        phases.mark("write_back_s")
    if plan.trace_path:
        run_trace.to_chrome(plan.trace_path, metadata=_trace_metadata(plan, routine, m, n, dtype,
                                                                      phases))
    return result, info, extra


# a factorization's configuration routine, by the LAPACK name its trace carries
_TRACE_ROUTINES = {"lu": "getrf", "cho": "potrf", "qr": "QR (Householder)"}


def _trace_metadata(plan, routine, m, n, dtype, phases=None):
    """What a library call's trace says about its run (the CLI's say the same), and where
    the call's time went outside the run (`phases`, a Phases: "call_phases")."""
    metadata = run_metadata(plan, _TRACE_ROUTINES.get(routine, routine), (m, n),
                            np.dtype(dtype))
    if phases is not None:
        metadata["call_phases"] = dict(phases.seconds)
    return metadata


def _host_source_and_result(array, dtype, may_overwrite, copy_needed):
    """Where the factorization reads the matrix from and writes the factors to.

    In place when allowed and the array is F-ordered of the LAPACK dtype. Otherwise the result is
    a new F-ordered array; a device backend streams from the user's array directly (no host copy
    first) when its layout allows, the host backend factors in the new array."""
    usable = array.flags.f_contiguous and array.dtype == dtype and array.flags.writeable
    if may_overwrite and usable:
        return array, array
    result = np.empty(array.shape, dtype=dtype, order="F")
    if usable and not copy_needed:
        return array, result
    copy_by_columns(result, array)
    return result, result


def _check_triangular_solve_shapes(name, factor_shape, b_shape):
    if factor_shape[0] != factor_shape[1]:
        raise ValueError(f"expected a square matrix for {name}; got shape {factor_shape}")
    n = factor_shape[0]
    if b_shape[0] != n:
        raise ValueError(f"b must have {n} rows to match {name} (shape {factor_shape}); "
                         f"got shape {b_shape}")
    return n


def _host_rhs(b_array, n, dtype, overwrite_b):
    """The right-hand side as the F-ordered n x nrhs array the solve overwrites: b itself when
    allowed and already in that form, else a copy."""
    rhs = b_array[:, None] if b_array.ndim == 1 else b_array
    if overwrite_b and rhs.dtype == dtype and rhs.flags.f_contiguous and rhs.flags.writeable:
        return rhs
    return np.array(rhs, dtype=dtype, order="F")


def _check_solve_shapes(lu_shape, piv_shape, b_shape):
    n = _check_triangular_solve_shapes("lu", lu_shape, b_shape)
    if piv_shape != (n,):
        raise ValueError(f"piv must have shape ({n},) to match lu; got shape {piv_shape}")
    return n


def _device_solve(name, factors, b, overwrite_b, check_finite, backend, solve, pivots=None):
    """Triangular solves with factors that live on the device: validate, wrap the factors (in
    place when column-major: they are only read) and b (copied unless overwrite_b), run
    `solve(ops, F, B)`, free both stores; x comes back as the same kind of array as b."""
    ops = _device_backend(name, backend)
    factor_shape, dtype = _device_matrix_checks(name, factors, ops, check_finite=False)
    b_shape, b_dtype = _device_matrix_checks("b", b, ops, check_finite, ndims=(1, 2))
    if pivots is None:
        _check_triangular_solve_shapes(name, factor_shape, b_shape)
    else:
        _check_solve_shapes(factor_shape, pivots.shape, b_shape)
    if b_dtype != dtype:
        raise TypeError(f"b must have the dtype of {name} ({dtype}) on the device; got {b_dtype}")
    F, _, _ = ops.device_matrix(factors, 1, overwrite=_column_major(factors))
    B, x, write_back = ops.device_matrix(b, 1, overwrite_b)
    try:
        if pivots is not None:
            F.set_pivots(pivots)
        solve(ops, F, B)
        ops.synchronize()
    finally:
        F.close()
        B.close()
    if write_back is not None:
        write_back()
    return x.reshape(b_shape) if len(b_shape) == 1 else x


def _column_major(x):
    from .backend.cuda import device_array_layout
    _, (m, n), dtype, strides = device_array_layout(x)
    return strides[0] == dtype.itemsize


def _shape_and_dtype(x):
    if is_device_array(x):
        cai = x.__cuda_array_interface__
        return tuple(cai["shape"]), np.dtype(cai["typestr"])
    return x.shape, x.dtype


def _square_order(a):
    """n for an n x n matrix (host or device), else None."""
    shape = _shape_and_dtype(a)[0] if is_device_array(a) else np.shape(a)
    return shape[0] if len(shape) == 2 and shape[0] == shape[1] else None


def _to_device(ops, x, like):
    """The host array x as a new device array of the kind of `like`."""
    shape = x.shape
    out = ops.empty((shape[0], 1 if x.ndim == 1 else shape[1]), x.dtype, like=like)
    X = ops.wrap(out)
    try:
        lacpy_from_host(ops, x.reshape(shape[0], X.n), X)
    finally:
        X.close()
    return out.reshape(shape) if x.ndim == 1 else out


# the modes of qr, ql and lq (pivoted or not), as scipy.linalg.qr's
_MODES = ("full", "r", "economic", "raw")


def _check_mode_and_lwork(mode, lwork):
    if mode not in _MODES:
        raise ValueError(f"mode must be one of {_MODES}; got mode={mode!r}")
    if lwork is not None:
        try:
            operator.index(lwork)
        except TypeError:
            raise ValueError(f"lwork must be an integer or None; got lwork={lwork!r}") from None
