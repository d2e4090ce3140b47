"""What the functions of hybridla.distributed share: the validated operands, the client and the
options every worker gets alike, the layout, the long-lived jobs of a factorization and of a
solve, and the results assembled where the input lived (a dask array or NumPy)."""
from __future__ import annotations

import functools
import importlib
import logging
import time

import numpy as np

from . import backend as _backends
from . import config as _config
from ._common import _all_finite, _common_dtype, _host_matrix, _lapack_dtype, is_device_array
from ._logging import get_logger
from .lapack import _dist
from .lapack import solves_dist
from .scheduler import cluster as _cluster
from .scheduler.trace import Phases

_log = get_logger("distributed")


class _Operand:
    """A validated matrix argument: a NumPy array (`array`) or a dask array (`dask`), its shape
    and LAPACK dtype; `device`: a dask array whose chunks are device arrays (CuPy), which the
    workers factor where they are, on their GPUs, the factors staying there (`meta`: the
    chunks' kind, an empty array of it)."""

    def __init__(self, name, x, check_finite, ndims=(2,)):
        self.name = name
        if _cluster.is_dask_array(x):
            if x.ndim not in ndims:
                want = " or ".join(f"{d}-D" for d in ndims)
                raise ValueError(f"expected a {want} array for {name}; got shape {x.shape}")
            if any(np.isnan(s) for s in x.shape):
                raise ValueError(f"{name} has unknown chunk sizes (shape {x.shape}): call "
                                 f"{name}.compute_chunk_sizes() first")
            self.dask, self.array = x, None
            self.meta = x._meta
            self.device = is_device_array(self.meta)
            self.dtype = _lapack_dtype(name, x.dtype)
            self.check_finite = check_finite  # on the workers, where the data is
        else:
            self.array, self.dtype = _host_matrix(name, x, check_finite, ndims)
            self.dask, self.check_finite = None, False
            self.meta, self.device = None, False
        self.shape = tuple(int(s) for s in (self.dask if self.dask is not None
                                             else self.array).shape)

    @property
    def device_kind(self):
        """The chunks' kind (an empty array of it) for a device operand, else None."""
        return self.meta if self.device else None

    def check_backend(self, backend):
        """A device operand needs the cuda backend on the workers (ValueError naming it)."""
        if self.device and backend != "cuda":
            raise ValueError(f"{self.name} is a dask array of device chunks "
                             f"({type(self.meta).__module__}): the workers must run the cuda "
                             f"backend; got backend={backend!r}")

    @property
    def data(self):
        return self.dask if self.dask is not None else self.array


def _options(client, backend, nb, lookahead):
    """The client, the backend's name and the engine options as every worker gets them (the
    block size resolved once, so that every rank cuts the matrix alike)."""
    _backends.check_name(backend)
    client = _cluster.find_client(client)
    choice = _config.get("backend") if backend is None else backend
    _backends.check_name(choice)
    name = choice if choice in ("host", "cuda") else "cuda" if _cuda_workers(client) else "host"
    return client, name, nb, lookahead


# a worker process's backends, by its address: what is installed does not change while it
# runs, and asking costs a round trip to it (milliseconds) in every call
_worker_backends: dict = {}


def _cuda_workers(client) -> bool:
    """Whether the workers run the cuda backend ("auto": where the first worker has it)."""
    address = _cluster.workers(client)[0]
    if address not in _worker_backends:
        _worker_backends[address] = tuple(
            client.run(_backends.available_backends, workers=[address])[address])
    return "cuda" in _worker_backends[address]


def _resolve_plan(backend, m, n, dtype, routine, nb, lookahead, device=False):
    """nb and look-ahead as a worker's configuration resolves them for a distributed call (nb
    "auto": its device's table; parts on the GPUs, `device`, take the distributed routine's
    entries first, _dist.table_routine), validated (a bad value raises ValueError naming
    it)."""
    from .scheduler.plan import make_plan
    plan = make_plan(_backends.get_backend(backend), m, n, dtype, routine=routine, nb=nb,
                     lookahead=lookahead, table_routine=_dist.table_routine(routine, device))
    return plan.nb, plan.lookahead


# nb and look-ahead as a worker set's first worker resolved them, by the call's arguments:
# asking costs a task's round trip, 0.026-0.103 s on the 2-GPU machine (perf/RESULTS.md,
# issue 32, stop 49), in every call alike. The worker's configuration may have changed since,
# so a job laid out from a cached resolution is checked by its rank 0
# (lapack/_dist.check_resolution), and the call made again without the cache where it
# differs (_resolving).
_resolutions: dict = {}
_RESOLUTIONS_KEPT = 256


def _resolution(client, address, backend, m, n, dtype, routine, nb, lookahead, cached,
                device=False):
    """(nb, lookahead) resolved on the worker `address` (from the cache where `cached`; for
    parts on the GPUs where `device`), and the job's entries that have rank 0 check a cached
    one."""
    key = (address, backend, m, n, np.dtype(dtype).str, routine, nb, lookahead, device)
    try:
        hash(key)
    except TypeError:  # an unhashable option: the worker refuses it, by name
        key = None
    if cached and key is not None and key in _resolutions:
        return _resolutions[key], {"resolved_from": (nb, lookahead)}
    resolved = client.submit(_resolve_plan, backend, m, n, dtype, routine, nb, lookahead,
                             device, workers=[address], pure=False).result()
    if key is not None:
        if len(_resolutions) >= _RESOLUTIONS_KEPT:
            _resolutions.clear()
        _resolutions[key] = resolved
    return resolved, {}


def _resolving(call):
    """call(cached): with the cached resolutions, then once more without them where the first
    worker resolves otherwise now (lapack/_dist.StaleResolution: nothing of the first
    attempt is kept)."""
    try:
        return call(True)
    except _dist.StaleResolution:
        return call(False)


def _layout(client, backend, routine, operand, m, n, nb, lookahead, data=None, stack=True,
            timings=None, cached=False):
    """The workers, the layout of the m x n matrix `operand` over them (nb resolved on the
    first) and each rank's part placed on its worker: (addresses, layout, lookahead, parts
    as Futures, the placement: the job's entries "private", whether each worker may write
    over its part, and "holders", see below). `data`: what to place, if not operand.data
    (the same shape). A dask array's block columns stay on the workers that already hold
    them, as far as the trailing updates' balance allows (BlockColumns.near: moving a block
    between worker processes costs more than an uneven share of the updates unless the
    share is far off); a NumPy array is cut cyclically and scattered. `stack`: see
    scheduler/cluster.place. `timings`: a scheduler.trace.Phases that gets the seconds of
    its stretches ("resolve_s": nb and look-ahead from the first worker; "columns_s": a dask
    array's block columns and their holders; "place_s": the parts' submission). `cached`: nb and
    look-ahead from an earlier call's resolution where there is one (_resolution; the
    placement then has the entries that have the job check it).
    A dask array of device chunks is laid out cyclically, and each worker's part is the
    block columns it holds ("holders": the rank holding each block column): the workers
    move the blocks to their owners themselves, GPU to GPU over NCCL
    (lapack/_dist_parts.device_part).
    Dask moves them through host memory and TCP: a worker of the LU at n = 65536 on 2 GPUs
    waited 1.1 s for its share of such moves (perf/RESULTS.md, issue 32, stop 48)."""
    operand.check_backend(backend)
    mark = timings.mark if timings is not None else (lambda name: None)
    addresses = _cluster.workers(client)
    (nb, lookahead), check = _resolution(client, addresses[0], backend, m, n, operand.dtype,
                                         routine, nb, lookahead, cached, operand.device)
    mark("resolve_s")
    data = operand.data if data is None else data
    if operand.device:
        data, futures, holders = _cluster.block_columns(client, addresses, data, nb)
        mark("columns_s")
        layout = _dist.BlockColumns(m, n, nb, len(addresses))
        holders = [h if h >= 0 else layout.owner(j) for j, h in enumerate(holders)]
        held = [[j for j, h in enumerate(holders) if h == rank] for rank in range(layout.size)]
        parts, _ = _cluster.place(client, addresses, data, held, operand.dtype, nb,
                                  stack=False, futures=futures)
        mark("place_s")
        return addresses, layout, lookahead, parts, {"private": [False] * layout.size,
                                                     "holders": holders, **check}
    futures = None  # a dask array's block columns, persisted
    if _cluster.is_dask_array(data):
        data, futures, holders = _cluster.block_columns(client, addresses, data, nb)
        layout = _dist.BlockColumns.near(m, n, nb, len(addresses), holders, min(m, n))
    else:
        layout = _dist.BlockColumns(m, n, nb, len(addresses))
    mark("columns_s")
    parts, private = _cluster.place(client, addresses, data,
                                    [layout.owned(rank) for rank in range(layout.size)],
                                    operand.dtype, layout.nb, stack=stack, futures=futures)
    mark("place_s")
    return addresses, layout, lookahead, parts, {"private": private, **check}


def _run(client, backend, addresses, layout, lookahead, parts, work, job, trace,
         layout_phases=None):
    """Run `work` on every worker over its part; returns (Futures of what each returned, the
    small results on the client); a `trace` path gets the merged Chrome trace, its metadata
    the call's phases: on the client "layout_s" and its stretches (`layout_phases`: the
    layout and the placement's submission, _layout's `timings`), "jobs_s" (until every
    worker's task ended: the parts' placement included) and "results_s"; per worker, the
    seconds its task waited to start after the submission (its part being placed),
    connecting (of which "rendezvous_s": the host transport's; in a thread of its own, beside
    the work's first stretch), and working, and the work's
    own stretches ("work": the finiteness check, the store, the driver's run, its output,
    closing the store; lapack/_dist's on_worker) (client_phases, worker_phases)."""
    job = dict(job, shape=(layout.m, layout.n), nb=layout.nb, lookahead=lookahead, layout=layout,
               traced=trace is not None, stagers=_cluster.workers_per_host(addresses))
    submitted = time.time()
    futures, small = _cluster.run_job(client, addresses, work, parts, job, backend)
    ended = time.time()
    results = _cluster.small_results(client, small)
    if _log.isEnabledFor(logging.DEBUG):  # where the untraced call's time went, per worker
        _log.debug("%s %dx%d: client %s, jobs %.3f s, results %.3f s; per worker: %s",
                   job["routine"], layout.m, layout.n, _rounded(layout_phases or {}),
                   ended - submitted, time.time() - ended, "; ".join(
                       f"connect {r['phases']['connect_s']:.3f}, work {r['phases']['work_s']:.3f}"
                       f" {_rounded(r.get('work_phases', {}))}" for r in results))
    if trace is not None:
        offsets = _cluster.clock_offsets(client, addresses)
        metadata = {"routine": job["routine"], "shape": [layout.m, layout.n],
                    "dtype": str(np.dtype(job["dtype"])), "nb": layout.nb,
                    "lookahead": lookahead, "backend": backend, "workers": layout.size,
                    "client_phases": {**(layout_phases or {}), "jobs_s": ended - submitted,
                                      "results_s": time.time() - ended},
                    "worker_phases": [
                        {"waited_s": r["phases"]["started"] - offset - submitted,
                         "connect_s": r["phases"]["connect_s"],
                         "rendezvous_s": r["phases"].get("rendezvous_s"),
                         "work_s": r["phases"]["work_s"],
                         "work": r.get("work_phases", {})}
                        for r, offset in zip(results, offsets)]}
        _cluster.merged_trace(results, offsets, metadata).to_chrome(trace)
    return futures, results


def _rounded(seconds: dict) -> dict:
    return {name: round(value, 3) for name, value in seconds.items()}


def _factor(client, backend, routine, driver, operand, nb, lookahead, trace, arguments=None):
    """Place `operand` and run the factorization `driver` on it: (the factors' parts as
    Futures on their workers, the layout, the ranks' small results, the run's context for a
    solve that follows)."""
    m, n = operand.shape

    def attempt(cached):
        began, timings = time.time(), Phases()
        # a device worker streams a dask array's block columns up from where they lie; the
        # host backend factors its part in place, so it gets them stacked
        addresses, layout, depth, parts, placement = _layout(client, backend, routine, operand,
                                                             m, n, nb, lookahead,
                                                             stack=backend != "cuda",
                                                             timings=timings, cached=cached)
        timings.seconds["layout_s"] = time.time() - began
        job = dict(name=operand.name, routine=routine, dtype=operand.dtype,
                   check_finite=operand.check_finite, arguments=arguments or {},
                   device=operand.device, device_meta=operand.meta,
                   arrive=bool(_config.get("distributed.arrive_parts", False)), **placement)
        futures, results = _run(client, backend, addresses, layout, depth, parts,
                                functools.partial(_dist.on_worker, driver,
                                                  all_finite=_all_finite),
                                job, trace, timings.seconds)
        return _cluster.local_parts(client, futures), layout, results, (addresses, depth)

    return _resolving(attempt)


def _solve(client, backend, routine, solver, parts, layout, context, b, name, dtype,
           check_finite=False, extra=None, arguments=None, device=None):
    """Run the distributed solve `solver` with the factors' `parts` (in `layout`; `device`:
    on the workers' GPUs, the chunks' kind, an empty array of it, else None) and the
    right-hand side `b` (host, n x nrhs) on every rank; returns x (host) from rank 0."""
    addresses, lookahead = context
    job = dict(name=name, routine=routine, dtype=dtype, check_finite=check_finite, b=b,
               arguments=arguments or {}, device=device is not None, device_meta=device,
               **(extra or {}))
    futures, results = _run(client, backend, addresses, layout, lookahead, parts,
                            functools.partial(solves_dist.solve_on_worker, solver), job, None)
    return results[0]["x"]


def _assemble(client, parts, layout, dtype, operand):
    """The m x n factors from the ranks' local parts: for a dask `operand`, a dask array
    whose block columns are sliced out of the parts on their workers (nothing moves until
    computed; chunks of the operand's kind: device arrays for device chunks), or, for a
    NumPy input, a NumPy array gathered to the client."""
    m, n = layout.m, layout.n
    if operand.dask is not None:
        import uuid

        import dask.array as da
        from dask.highlevelgraph import HighLevelGraph
        meta = operand.meta[:0, :0].astype(dtype) if operand.meta.ndim == 2 else \
            np.empty((0, 0), dtype=dtype)
        # one graph of slices of the parts' Futures: 128 from_delayed and a concatenate took
        # 63 ms of the client's time at 130 block columns on the CPU machine
        name = f"hybridla-factors-{uuid.uuid4().hex}"
        layer = {}
        for j in range(layout.blocks):
            rank, local = layout.owner(j), layout.local_start(layout.owner(j), j)
            layer[(name, 0, j)] = (_columns, parts[rank], local,
                                   local + layout.block_width(j))
        if not layer:
            return da.zeros((m, n), dtype=dtype)
        chunks = ((m,), tuple(layout.block_width(j) for j in range(layout.blocks)))
        return da.Array(HighLevelGraph.from_collections(name, layer, dependencies=()), name,
                        chunks, meta=meta)
    out = np.empty((m, n), dtype=dtype, order="F")
    for rank, local in enumerate(client.gather(parts)):
        out[:, layout.columns(rank)] = local
    return out


def _columns(local, c0, c1):
    return local[:, c0:c1]


def _merged(results, key):
    """Every rank's per-step {step: value} of `key`, merged, in step order."""
    merged = {}
    for r in results:
        merged.update(r["results"].get(key, {}))
    return [merged[s] for s in sorted(merged)]


def _info(results) -> int:
    """LAPACK's info: the first failing step's, made global (0: none)."""
    failing = [i for i in _merged(results, "infos") if i > 0]
    return failing[0] if failing else 0


def _out(client, factors, operand, shape=None):
    """The factors where the input lived: a dask array of block columns on the workers, or a
    NumPy array gathered; `factors` None: the empty result of an empty input."""
    if factors is None:
        shape = operand.shape if shape is None else shape
        if operand.dask is not None:
            import dask.array as da
            return da.zeros(shape, dtype=operand.dtype)
        return np.empty(shape, dtype=operand.dtype, order="F")
    parts, layout, _ = factors
    return _assemble(client, parts, layout, operand.dtype, operand)


class _Lazy:
    """What _x_out needs of a dask right-hand side: its chunks' kind (`meta`, an empty array
    of it: NumPy, or CuPy for device chunks)."""

    def __init__(self, meta):
        self.meta = meta


def _rhs(name, b, operand, check_finite):
    """A right-hand side as the solves take it, for the matrix `operand` (n: its rows):
    (host n x nrhs array in the common dtype of the two, its original shape, a _Lazy if it
    was a dask array, else None); the operand's dtype becomes that common one, which the
    solve runs in."""
    n = operand.shape[0]
    lazy = _Lazy(b._meta) if _cluster.is_dask_array(b) else None
    if lazy is not None:
        if b.ndim not in (1, 2):
            raise ValueError(f"expected a 1-D or 2-D array for {name}; got shape {b.shape}")
        if is_device_array(lazy.meta):  # device chunks come to the client as NumPy
            b = b.map_blocks(_to_host, dtype=b.dtype, meta=np.empty((0,) * b.ndim, b.dtype))
        b = b.compute()  # n x nrhs: small beside the factors
    array, b_dtype = _host_matrix(name, b, check_finite, ndims=(1, 2))
    if array.shape[0] != n:
        raise ValueError(f"{name} must have {n} rows to match the matrix; got shape "
                         f"{array.shape}")
    operand.dtype = _common_dtype(operand.dtype, b_dtype)
    return np.array(array.reshape(n, -1), dtype=operand.dtype, order="F"), array.shape, lazy


def _to_host(block):
    """A device chunk as NumPy (CuPy's get)."""
    return block.get()


def _as_module_array(block, module):
    """A NumPy chunk as an array of the library `module` (its asarray: cupy.asarray)."""
    return importlib.import_module(module).asarray(block)


def _x_out(x, shape, lazy, rows=None):
    """The solution where the right-hand side was: NumPy, or a dask array (`lazy`) of
    the right-hand side's chunk kind."""
    x = x[:shape[0] if rows is None else rows]
    x = x.reshape((x.shape[0],) + tuple(shape[1:]))
    if lazy is not None:
        import dask.array as da
        x = da.from_array(x)
        if is_device_array(lazy.meta):
            x = x.map_blocks(_as_module_array, type(lazy.meta).__module__.split(".")[0],
                             dtype=x.dtype, meta=lazy.meta)
        return x
    return x


def _factors_operand(name, x, check_finite, square=True):
    operand = _Operand(name, x, check_finite)
    if square and operand.shape[0] != operand.shape[1]:
        raise ValueError(f"expected a square matrix for {name}; got shape {operand.shape}")
    return operand


def _module(lazy):
    if lazy:
        import dask.array as da
        return da
    return np
