#!/usr/bin/env python3
"""Benchmark of hybridla.distributed (LU, Cholesky, QR on several workers) against hybridla's own
one-GPU GPU interface, on the 2-GPU machine; a smoke test with host workers anywhere.

Usage (from the repository root):

    python3 perf/distributed.py                          # 2 GPUs: n 65536 lu,cho,qr + n 120000 lu
    python3 perf/distributed.py --sizes 32768 --routines lu --repeat 2 --trace-dir perf/traces
    python3 perf/distributed.py --sizes 65536 --routines lu --large 0 --lookaheads 1,2
    python3 perf/distributed.py --sizes 65536 --large 0 --device-input --warm-at-size
    python3 perf/distributed.py --sizes 65536 --large 0 --device-input --input-layout dask,cyclic
    python3 perf/distributed.py --sizes 65536 --routines lu --large 0 --nb default,512
    python3 perf/distributed.py --sizes 65536 --routines cho --large 0 --workers-nb 768,1280 --quick
    python3 perf/distributed.py --backend host --sizes 600      # the CPU machine (a smoke test)

What each row times (after an untimed call of each routine at n = WARMUP_N, on one GPU and
on the workers: kernels compiled, handles and communicators made; with --warm-at-size the
workers' untimed call is at the timed order instead, so their memory is grown too; best of
--repeat, each side's median, range and every run printed above the row):
- "workers": the wall time of the hybridla.distributed call on the client, the input already a
  dask array persisted on the workers (generated there, seeded: it never passes through the
  client), the factors left on the workers as a dask array (not computed); so it includes the
  redistribution into the layout, the one long-lived task per worker, the factors' download
  from the GPUs to the workers' host memory and the results' return. With --device-input the
  persisted input's chunks are CuPy arrays on the workers' GPUs and the factors stay there
  (no host traffic: like for like with the "one GPU" row, whose matrix and factors are on
  its GPU).
- "one GPU": hybridla's GPU interface (hybridla.lu_factor / cho_factor / qr(mode="raw") on a
  CuPy array on GPU 0, factors left there), in this process, before the cluster starts, so that
  no worker shares the GPU; with --backend host, the host backend in this process.
- Block sizes: each side at the one hybridla resolves for the routine and order, as a user's
  call gets it (on the H100: 768 for LU and QR, 1024 for Cholesky from n = 12000, one GPU; the
  workers of a distributed LU of device chunks 1024, the table's dist_device_lu_nb_large),
  printed
  above the table; --nb sets both, and a list of them (`--nb default,512`) runs each routine
  at each in turn, both sides, on one cluster. (Until stop 55 both sides ran at nb 512, the
  script's own default then, not the library's.) --workers-nb sweeps the workers' block size
  alone against the one-GPU row at --nb; with --quick a row has no traced run and no check.
- --gates on,off runs each routine with the workers' broadcasts gated on the device and not
  (distributed.nccl_gate, scheduler/transport_nccl.py), in turn on the same input; a list
  such as on,off,on,off gives each a row per turn (the first call of each setting makes its
  communicator: take the best of --repeat 2 or more).
- --configs "NAME:KEY=VALUE,...;NAME:..." runs each routine under each named set of
  configuration values in turn on the same input, set on the client and on the workers (a
  value read as YAML; "default" or an empty set: the configuration as it was), e.g.
  `--configs "default;arrive:distributed.arrive_parts=true"`.
- "phases" (the line under each row): the call's time on the client (the layout and the
  placement's submission; the workers' tasks, until the last ended; their results), and per
  worker how long its task waited to start (its part being placed), connected (beside its
  work's first stretch: "connected" in the work is the wait for it), and worked.
- "overhead": 1 - (the longest worker's engine span, from the merged trace of one more run
  with a trace: its first task's start to its last task's end) / the best untraced call's
  wall time: what Dask, the redistribution, the transfers around the engine and Python cost
  beyond the factorization itself. The timed calls write no trace (a user's default); the
  traced one's wall time is printed beside its phases.
- Every timed call, on either side, starts after a full garbage collection in the processes
  that run it (the workers, the client, the one-GPU process), as timeit runs without one: a
  Python process collects its oldest objects once enough new ones have survived, and in a
  worker a full collection held every thread for 0.24-0.42 s (perf/RESULTS.md, issue 32,
  stop 53), once in some calls and not in others. The traced call prints the workers'
  collections of 10 ms or more.
- "check": LAPACK's residual ratio, estimated with a random x, computed by Dask on the factors
  where they are (A regenerated from its seed): LU ||P A x - L (U x)||_1 / (n ||A||_1 ||x||_1
  eps), Cholesky ||A x - L (L^H x)||_1 / (...), QR ||A x - Q (R x)||_1 / (...) with Q and R
  from a second, untimed hybridla.distributed.qr(mode="economic"); below 30 passes.

The large LU (--large, default 120000 on cuda, none on host) is generated on the workers as it
is placed (not persisted first: its time includes generating it) and holds the matrix once in
the workers' host memory (115 GB at 120000, of the machine's 251 GB; the factors go back over
each worker's part) and 58 GB on each GPU; its check regenerates A from its seed.
"""
from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import sys
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(_HERE)
# this script's folder first on the path would make `import distributed` import this script
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
if _ROOT not in sys.path:
    sys.path.append(_ROOT)

import numpy as np  # noqa: E402
from distributed import wait  # noqa: E402

import hybridla  # noqa: E402
import hybridla.backend  # noqa: E402
import hybridla.distributed as hd  # noqa: E402
from hybridla.bench.flops import geqrf_flops, getrf_flops, potrf_flops  # noqa: E402
from hybridla.bench.matrices import placed_cyclically  # noqa: E402,F401 - probes take it here

WARMUP_N = 4096  # the untimed first calls' order, on one GPU and on the workers
FLOPS = {"lu": lambda n: getrf_flops(n, n), "cho": potrf_flops, "qr": lambda n: geqrf_flops(n, n)}
THRESH = 30.0


def matrix(n, routine, nb, seed=1, device=False):
    """The seeded n x n input as a lazy dask array in block columns of nb (symmetric positive
    definite for Cholesky: S + 2 n I, S symmetric standard normal, made a block column at a
    time where it is placed: no transpose, so no block moves between workers); `device`:
    each block column copied to the GPU of the worker that makes it (CuPy chunks)."""
    import dask.array as da
    if routine == "cho":
        a = da.map_blocks(_spd_block_column, n, nb, seed, dtype=np.float64,
                          chunks=((n,), tuple(min(nb, n - c) for c in range(0, n, nb))))
    else:
        a = da.random.default_rng(seed).standard_normal((n, n), chunks=(n, nb))
    if device:
        import cupy
        a = a.map_blocks(cupy.asarray, dtype=a.dtype, meta=cupy.empty((0, 0), a.dtype))
    return a


def _on_host(x):
    """A dask array of device chunks as one of NumPy chunks (the check's arithmetic)."""
    if isinstance(x, np.ndarray) or isinstance(x._meta, np.ndarray):
        return x
    return x.map_blocks(lambda block: block.get(), dtype=x.dtype,
                        meta=np.empty((0,) * x.ndim, x.dtype))


def _spd_block_column(n, nb, seed, block_info=None):
    """Block column j (columns j nb : (j + 1) nb) of S + 2 n I: S's nb x nb block (i, j) is
    drawn from a generator seeded by (seed, min(i, j), max(i, j)), transposed below the
    diagonal, so that S is symmetric; a diagonal block is G + G^T. Gershgorin: the off-diagonal
    entries' row sums (about 0.8 n) stay below 2 n, so S + 2 n I is positive definite."""
    (_, _), (c0, c1) = block_info[None]["array-location"]
    j = c0 // nb
    out = np.empty((n, c1 - c0), order="F")
    for i, r0 in enumerate(range(0, n, nb)):
        r1 = min(r0 + nb, n)
        lo, hi = min(i, j), max(i, j)
        block = np.random.default_rng([seed, lo, hi]).standard_normal(
            (min(nb, n - lo * nb), min(nb, n - hi * nb)))
        if i == j:
            block = block + block.T
            block[np.diag_indices_from(block)] += 2 * n
        out[r0:r1] = block if i <= j else block.T
    return out


def run_distributed(client, routine, a, backend, nb, trace, lookahead=None):
    options = dict(client=client, backend=backend, nb=nb, trace=trace, lookahead=lookahead)
    if routine == "lu":
        return hd.lu_factor(a, **options)
    if routine == "cho":
        return hd.cho_factor(a, lower=True, **options)
    return hd.geqrf(a, **options)


def residual_ratio(routine, a, factors, n, client, backend, nb):
    """The estimated residual ratio (module docstring), by Dask where the factors are."""
    import dask
    import dask.array as da
    x = np.random.default_rng(2).standard_normal(n)
    device_a, a = a, _on_host(a)
    if factors is not None:
        factors = (_on_host(factors[0]),) + tuple(factors[1:])
    # A x and ||A||_1 in one pass over A: the large LU's A is regenerated for the check, and
    # two passes over its 115 GB did not finish within the call's limit (2026-11-26)
    ax, anorm = dask.compute(a @ x, da.abs(a).sum(axis=0).max())
    anorm = float(anorm)
    if routine == "lu":
        lu, piv = factors
        order = np.arange(n)
        for i, p in enumerate(piv):
            order[i], order[p] = order[p], order[i]
        ux = da.triu(lu) @ x
        lux = (da.tril(lu, -1) @ ux + ux).compute()
        r = ax[order] - lux
    elif routine == "cho":
        c, _ = factors
        low = da.tril(c)
        r = ax - (low @ (low.conj().T @ x)).compute()
    else:  # Q from a second, untimed run (forming Q from geqrf's reflectors: qr's orgqr)
        q, rr = hd.qr(device_a, mode="economic", client=client, backend=backend, nb=nb)
        if factors is not None:  # R from the timed run's factors, here on the host: the
            rr = da.triu(factors[0])  # triangle of device chunks moved them between GPUs
        r = ax - (_on_host(q) @ (_on_host(rr) @ x)).compute()
    eps = np.finfo(np.float64).eps
    return float(np.abs(r).sum() / (n * anorm * np.abs(x).sum() * eps))


def _cores():
    return len(os.sched_getaffinity(0)), os.cpu_count()


def _gc_pauses(action, dask_worker=None):
    """On a worker (Client.run): "start" timing its Python garbage collections, "stop" and
    return those of 10 ms or more, (generation, seconds, wall time, objects it found
    unreachable, resident memory it gave back in MB, objects tracked after it), and what the heap held: the objects the
    collector tracks at the start and at the stop, and the types of the objects the call added
    by the stop (the 8 most); "start" returns how long one more full collection took there
    and the keys the worker holds. A diagnostic of this benchmark's traced call only (one worker
    stalled 0.4-0.5 s once a run with nothing in its trace to say why: perf/RESULTS.md, issue
    32, stops 50-53)."""
    import collections
    import gc

    import psutil
    for watch in [c for c in gc.callbacks if getattr(c, "hybridla_bench", False)]:
        gc.callbacks.remove(watch)
        if action == "stop":
            now = collections.Counter(type(o).__name__ for o in gc.get_objects())
            added = (now - watch.types).most_common(8)
            watch.types = None
            return {"pauses": watch.pauses, "objects": (watch.objects, sum(now.values())),
                    "added": added}
    if action != "start":
        return {}
    process = psutil.Process()

    def watch(phase, info, began=[0.0, 0]):
        if phase == "start":
            began[:] = [time.perf_counter(), process.memory_info().rss]
        elif time.perf_counter() - began[0] >= 0.01:
            watch.pauses.append((info["generation"], round(time.perf_counter() - began[0], 3),
                                 time.time(), info["collected"],
                                 round((began[1] - process.memory_info().rss) / 1e6),
                                 len(gc.get_objects())))
    began = time.perf_counter()
    gc.collect()
    idle = {"collect_s": round(time.perf_counter() - began, 3),
            "keys": None if dask_worker is None else len(dask_worker.data)}
    watch.hybridla_bench, watch.pauses = True, []
    watch.types = collections.Counter(type(o).__name__ for o in gc.get_objects())
    watch.objects = sum(watch.types.values())
    gc.callbacks.append(watch)
    return idle


def engine_span(trace_path):
    """The longest worker's engine span in the merged trace (its lanes "w<rank>/..."): its
    first task's start to its last task's end, in seconds."""
    with open(trace_path) as f:
        data = json.load(f)["traceEvents"]
    lane_of = {(e["pid"], e["tid"]): e["args"]["name"] for e in data
               if e.get("ph") == "M" and e.get("name") == "thread_name"}
    spans: dict = {}
    for e in data:
        if e.get("ph") != "X":
            continue
        worker = lane_of.get((e["pid"], e["tid"]), "w?/").split("/")[0]
        lo, hi = spans.get(worker, (np.inf, -np.inf))
        spans[worker] = (min(lo, e["ts"]), max(hi, e["ts"] + e["dur"]))
    return max(hi - lo for lo, hi in spans.values()) / 1e6 if spans else 0.0


def phases(trace_path):
    """The call's phases from the merged trace's metadata (_dist_common._run): one line."""
    with open(trace_path) as f:
        meta = json.load(f).get("metadata", {})
    client, workers = meta.get("client_phases"), meta.get("worker_phases")
    if not client or not workers:
        return "phases: not in the trace"
    def work(w):  # the work's own stretches (lapack/_dist.on_worker), where recorded
        inside = ", ".join(f"{k.removesuffix('_s').replace('_', ' ')} {v:.3f}"
                           for k, v in w.get("work", {}).items())
        return f"work {w['work_s']:.2f}" + (f" [{inside}]" if inside else "")

    def connect(w):  # of which the host transport's rendezvous, where recorded
        inner = w.get("rendezvous_s")
        return f"connect {w['connect_s']:.3f}" + ("" if inner is None else
                                                  f" [rendezvous {inner:.3f}]")

    layout = ", ".join(f"{k.removesuffix('_s')} {client[k]:.3f}"
                       for k in ("resolve_s", "columns_s", "place_s") if k in client)
    ranks = "; ".join(f"w{r}: waited {w['waited_s']:.3f}, {connect(w)}, {work(w)}"
                      for r, w in enumerate(workers))
    return (f"phases (s): layout {client['layout_s']:.3f}" + (f" [{layout}]" if layout else "")
            + f", jobs {client['jobs_s']:.3f} ({ranks}), results {client['results_s']:.3f}")


def _spd(b, xp):
    """B + B^T + 2 n I with at most two n x n arrays alive (at n = 65536 three would not fit
    one GPU)."""
    a = b + b.T
    del b
    diagonal = xp.arange(a.shape[0])
    a[diagonal, diagonal] += 2 * a.shape[0]
    return a


def one_gpu_seconds(routine, n, backend, nb, repeat):
    """hybridla's one-GPU GPU interface (host backend: its CPU interface), best of `repeat`
    after one untimed call at min(n, WARMUP_N) (kernels compiled, handles made); the matrix
    made on the device from the same seed's distribution. `nb` None: the library's own
    block size, as a user's call gets it. Returns (seconds, the block size of the timed
    calls)."""
    kwargs = dict(backend=backend, **({} if nb is None else {"nb": nb}))
    if backend == "cuda":
        import cupy
        rng = cupy.random.default_rng(1)
        def make(size):
            # F-ordered (a C-ordered array's transpose, the same distribution): QR copies a
            # C-ordered matrix first, and at n = 65536 two do not fit one GPU
            a = rng.standard_normal((size, size)).T
            if routine == "cho":  # B's memory back from CuPy's pool: on an 80 GB GPU at
                a = _spd(a, cupy)  # n = 65536 hybridla's budget was 13.8 GB otherwise
                cupy.get_default_memory_pool().free_all_blocks()
            return a

        def sync():
            cupy.cuda.runtime.deviceSynchronize()
    else:
        rng = np.random.default_rng(1)
        make = (lambda size: _spd(rng.standard_normal((size, size)), np)) if routine == "cho" \
            else (lambda size: np.asfortranarray(rng.standard_normal((size, size))))

        def sync():
            pass
    factor = {"lu": lambda a: hybridla.lu_factor(a, overwrite_a=True, **kwargs),
              "cho": lambda a: hybridla.cho_factor(a, lower=True, overwrite_a=True, **kwargs),
              "qr": lambda a: hybridla.qr(a, mode="raw", overwrite_a=True, **kwargs)}[routine]
    factor(make(min(n, WARMUP_N)))
    best = np.inf
    for _ in range(repeat):
        a = make(n)
        sync()
        gc.collect()  # each timed call starts after a full collection (module docstring)
        start = time.perf_counter()
        factor(a)
        sync()
        best = min(best, time.perf_counter() - start)
        del a
        if backend == "cuda":
            # the next repetition's matrix and the workers after the last get the GPU's memory
            # back (the pools keep it otherwise: a second QR at n = 65536 was refused its R)
            cupy.get_default_memory_pool().free_all_blocks()
            hybridla.backend.get_backend("cuda").free_cached()
    return best, nb or resolved_nb(routine, n, backend)


def resolved_nb(routine, n, backend):
    """The block size hybridla resolves for a one-GPU n x n float64 `routine` here (nb auto:
    this device's table)."""
    from hybridla.scheduler.plan import make_plan
    return make_plan(hybridla.backend.get_backend(backend), n, n, np.float64,
                     routine=routine).nb


def workers_nb(client, routine, n, backend, device=False):
    """The block size a distributed call resolves on its first worker (for device chunks,
    `device`, the device table's distributed entries first: _dist_common._resolve_plan)."""
    from hybridla._dist_common import _resolve_plan
    first = sorted(client.nthreads())[0]
    return client.submit(_resolve_plan, backend, n, n, np.float64, routine, None, None, device,
                         workers=[first], pure=False).result()[0]


def one_gpu_in_own_process(routine, n, backend, nb, repeat):
    """one_gpu_seconds in a new process (spawned: no CUDA state inherited) per repetition,
    the best answer back: at n = 65536 a second QR in one process was refused its R (the
    first one's memory not all given back), 2026-11-26."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    runs = []
    for _ in range(repeat):
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
            seconds, used = pool.submit(one_gpu_seconds, routine, n, backend, nb, 1).result()
            runs.append(seconds)
    print(f"one GPU: {routine} {n} nb {used} {min(runs):.3f} s ({spread(runs)})", flush=True)
    return min(runs)


def _block_sizes(text):
    """--nb's list: None for 'default' (hybridla's resolution), else a positive int."""
    sizes = [None if x == "default" else int(x) for x in text.split(",") if x]
    if not sizes or any(nb is not None and nb < 1 for nb in sizes):
        raise argparse.ArgumentTypeError(f"block sizes or 'default', got {text!r}")
    return sizes


def spread(runs):
    """Every run's seconds, their median and range: what a best-of row is one of."""
    return (f"median {np.median(runs):.3f}, range {min(runs):.3f}-{max(runs):.3f}, runs "
            + ", ".join(f"{s:.3f}" for s in runs))


def start_cluster(backend, scheduler):
    """A local cluster of two workers (cuda: one per GPU), or a client of `scheduler`. No
    worker memory limit: the matrices are as large as the machine allows (module docstring),
    which Dask's default limit (a share of the memory per worker) would pause or kill; nor
    a device memory limit, for the same reason on the GPUs."""
    from distributed import Client, LocalCluster
    if scheduler:
        return None, Client(scheduler)
    if backend == "cuda":
        from dask_cuda import LocalCUDACluster
        # no device spilling: dask-cuda moves a worker's device chunks to host memory once
        # its GPU is 80% full (its default), which a factorization's copy of a 17 GB part
        # and its workspace reach at n = 65536 (perf/RESULTS.md, issue 32, stop 48)
        cluster = LocalCUDACluster(n_workers=2, threads_per_worker=4, memory_limit=0,
                                   device_memory_limit=0)
    else:
        cluster = LocalCluster(n_workers=2, threads_per_worker=2, processes=True,
                               dashboard_address=None)
    return cluster, Client(cluster)


def _set_config(key, value):
    import hybridla.config
    hybridla.config.set({key: value})  # the worker's, from now on


def _hybridla_config(key):
    import hybridla.config
    return hybridla.config.get(key)


def _config_sets(text):
    """--configs: [(name, {key: value})] from "NAME:KEY=VALUE,...;NAME:..." (a bare NAME,
    such as "default", sets nothing)."""
    import yaml
    sets = []
    for item in (x.strip() for x in text.split(";") if x.strip()):
        name, _, pairs = item.partition(":")
        values = {}
        for pair in (p.strip() for p in pairs.split(",") if p.strip()):
            key, sep, value = pair.partition("=")
            if not sep:
                raise argparse.ArgumentTypeError(f"{pair!r} in --configs is not KEY=VALUE")
            values[key.strip()] = yaml.safe_load(value)
        sets.append((name.strip(), values))
    return sets


def _use_config_set(client, values, keys, initial):
    """Make `values` the configuration of the client and the workers for the `keys` any
    set names, the others of them back at `initial` (as they were before the first set)."""
    import hybridla.config
    for key in keys:
        value = values.get(key, initial[key])
        hybridla.config.set({key: value})
        client.run(_set_config, key, value)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("cuda", "host"), default="cuda")
    parser.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",") if x],
                        default=None, help="comma-separated orders (default 65536; host 600)")
    parser.add_argument("--routines", default="lu,cho,qr")
    parser.add_argument("--large", type=int, default=None,
                        help="the order of the large LU run (default 120000 on cuda, 0: none)")
    parser.add_argument("--nb", type=_block_sizes, default=[None],
                        help="block size on both sides (default: each side's own, hybridla's "
                        "resolution for the routine and order, as a user's call gets it); "
                        "comma-separated, each in turn ('default': that resolution)")
    parser.add_argument("--workers-nb", type=_block_sizes, default=None,
                        help="block sizes for the workers alone, each in turn, the one-GPU side "
                        "at --nb (a sweep of the distributed block size against one baseline)")
    parser.add_argument("--quick", action="store_true",
                        help="no traced run and no check: a sweep's rows (no overhead either)")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--lookaheads", type=lambda s: [int(x) for x in s.split(",")],
                        default=[None], help="look-ahead depths to run each routine with, "
                        "in turn on the same input (default: config)")
    parser.add_argument("--gates", type=lambda s: [{"on": True, "off": False}[x] for x in
                                                   s.split(",")], default=[None],
                        help="distributed.nccl_gate on the workers, each in turn on the same "
                        "input: on, off or a list (on,off,on); default: config")
    parser.add_argument("--configs", type=_config_sets, default=None,
                        help='named sets of configuration values, each in turn on the same '
                        'input, on the client and the workers: "NAME:KEY=VALUE,...;NAME:..." '
                        '("default": as configured)')
    parser.add_argument("--warm-at-size", action="store_true",
                        help="make the workers' untimed first call of each routine at the "
                        "timed order (not WARMUP_N): host memory, pinned slots and device "
                        "pools grown before the timing")
    parser.add_argument("--device-input", action="store_true",
                        help="the n = --sizes inputs as CuPy chunks on the workers' GPUs, the "
                        "factors left there: data where the one-GPU GPU interface has it "
                        "(the large LU stays host-resident: it does not fit twice)")
    parser.add_argument("--input-layout", default="dask",
                        help="where the persisted n = --sizes inputs' block columns lie: "
                        "'dask', where Dask's scheduler put them (default), 'cyclic', block "
                        "column j on worker j mod p, the layout of a call on device chunks "
                        "(no moves in the call), or 'dask,cyclic': a row each")
    parser.add_argument("--trace-dir", default=None)
    parser.add_argument("--scheduler", default=None,
                        help="address of a running Dask scheduler (else a local cluster)")
    opts = parser.parse_args(argv)
    cuda = opts.backend == "cuda"
    sizes = opts.sizes if opts.sizes is not None else ([65536] if cuda else [600])
    large = opts.large if opts.large is not None else (120000 if cuda else 0)
    routines = [r for r in opts.routines.split(",") if r]
    layouts = [x for x in opts.input_layout.split(",") if x]
    if not layouts or set(layouts) - {"dask", "cyclic"}:
        parser.error(f"--input-layout takes dask, cyclic or both; got {opts.input_layout!r}")
    unknown = set(routines) - set(FLOPS)
    if unknown:
        parser.error(f"unknown routines {sorted(unknown)}: lu, cho, qr")
    trace_dir = opts.trace_dir or os.path.join(_ROOT, "perf", "traces")
    os.makedirs(trace_dir, exist_ok=True)
    # each call's time per worker, untraced ones too (_dist_common._run's debug line): an
    # untraced Cholesky took 1.265 s twice where the traced one took 1.187 s (stop 57)
    phase_lines = logging.StreamHandler(sys.stdout)
    phase_lines.setFormatter(logging.Formatter("    phases: %(message)s"))
    logging.getLogger("hybridla.distributed").addHandler(phase_lines)
    logging.getLogger("hybridla.distributed").setLevel(logging.DEBUG)

    # one GPU first, before any worker holds a GPU; each in a process of its own, so that
    # what one routine's run leaves in a pool (CuPy's, the backend's) cannot shrink the next
    # one's memory budget (at n = 65536 QR was refused after LU and Cholesky, 2026-11-26)
    single = {(r, n, choice): one_gpu_in_own_process(r, n, opts.backend, choice, opts.repeat)
              for r in routines for n in sizes for choice in opts.nb}

    cluster, client = start_cluster(opts.backend, opts.scheduler)
    # the keys --configs sets, and their values before any set (the client's)
    config_keys = sorted({key for _, values in opts.configs or [] for key in values})
    initial_config = {key: _hybridla_config(key) for key in config_keys}
    try:
        workers = len(client.nthreads())
        print(f"hybridla.distributed, {workers} workers ({opts.backend}), "
              f"{time.strftime('%Y-%m-%d')}")
        # each staged copy runs on every core (device.copy_threads); do the workers share them?
        print(f"  the workers' cores (their CPU affinity's, of the host's): "
              f"{list(client.run(_cores).values())}")
        print("| routine | n | workers s | TFLOP/s | one GPU s | speedup | overhead | check |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- |")
        # (routine, n, input layout, block size on the workers, the one-GPU row's block size)
        on_workers = opts.workers_nb or opts.nb
        runs = [(r, n, where, c, c if opts.workers_nb is None else opts.nb[0])
                for r in routines for n in sizes for c in on_workers for where in layouts] + \
            [("lu", large, "dask", c, c) for c in opts.nb if large]
        # each routine and order at the block size the workers resolve (or --nb): the input's
        # block columns are that wide, so that the call cuts nothing anew
        nbs = {(r, n, c): c or workers_nb(client, r, n, opts.backend,
                                         opts.device_input and n != large)
               for r, n, _, c, _ in runs}
        print("  nb on the workers: " + ", ".join(f"{r} {n}: {b}"
                                                  for (r, n, _), b in nbs.items()))
        # untimed first: each worker's kernels, handles and communicator; with --warm-at-size
        # also its memory at the timed order (on a fresh GPU machine the first touch of a
        # worker's new 17 GB home took 7.0 s at n = 65536: perf/RESULTS.md, issue 32, stop 43)
        warm_sizes = sorted({n for _, n, _, _, _ in runs}) if opts.warm_at_size else [WARMUP_N]
        for routine, nb in {(r, nbs[r, n, c]) for r, n, _, c, _ in runs}:
            for size in warm_sizes:
                warm = client.persist(matrix(size, routine, nb,
                                             device=opts.device_input and size != large))
                wait(warm)
                run_distributed(client, routine, warm, opts.backend, nb, None)
                del warm
        for routine, n, where, choice, baseline in runs:
            nb = nbs[routine, n, choice]
            a = matrix(n, routine, nb, device=opts.device_input and n != large)
            if n != large:  # the large one is generated as it is placed: held once, not twice
                a = placed_cyclically(client, a) if where == "cyclic" else client.persist(a)
                wait(a)
            turns = [(la, g, c) for la in opts.lookaheads for g in opts.gates
                     for c in (opts.configs or [None])]
            for lookahead, gate, config_set in turns:
                if gate is not None:  # read where a communicator is made: the next call's
                    client.run(_set_config, "distributed.nccl_gate", gate)
                if config_set is not None:
                    _use_config_set(client, config_set[1], config_keys, initial_config)
                name = routine if lookahead is None else f"{routine} la{lookahead}"
                if gate is not None:
                    name += f" gate {'on' if gate else 'off'}"
                if config_set is not None:
                    name += f" {config_set[0]}"
                if len(layouts) > 1 and n != large:
                    name += f" {where}"
                if len(on_workers) > 1:
                    name += f" nb{nb}"
                seconds, factors = [], None
                for i in range(opts.repeat):  # as a user calls it: no trace
                    factors = None
                    client.run(gc.collect)  # (module docstring)
                    gc.collect()
                    start = time.perf_counter()
                    factors = run_distributed(client, routine, a, opts.backend, nb, None,
                                              lookahead)
                    seconds.append(time.perf_counter() - start)
                    print(f"  {name} {n} run {i}: {seconds[-1]:.3f} s", flush=True)
                best = min(seconds)
                print(f"  {name} {n} workers: best {best:.3f} s ({spread(seconds)})", flush=True)
                one = single.get((routine, n, baseline))
                if opts.quick:
                    print(f"| {name} | {n} | {best:.3f} | {FLOPS[routine](n) / best / 1e12:.2f} | "
                          f"{'-' if one is None else f'{one:.3f}'} | "
                          f"{'-' if one is None else f'{one / best:.2f}x'} | - | - |", flush=True)
                    factors = None
                    continue
                # then once more with the trace, for the engine span and the phases
                factors = None
                path = os.path.join(trace_dir, f"distributed_{name.replace(' ', '_')}_{n}.json")
                client.run(gc.collect)
                gc.collect()
                idle = client.run(_gc_pauses, "start")
                print("  the workers' full collection just before the traced call, and the keys "
                      "they held: " + "; ".join(f"{v['collect_s']} s, {v['keys']} keys"
                                                for v in idle.values()), flush=True)
                start, began = time.perf_counter(), time.time()
                factors = run_distributed(client, routine, a, opts.backend, nb, path, lookahead)
                traced = time.perf_counter() - start
                pauses = client.run(_gc_pauses, "stop")
                print("  the workers' garbage collections of 10 ms or more in the traced call "
                      "(generation, s, at s after its start, unreachable objects, MB given "
                      "back, objects tracked after): " + "; ".join(
                          f"{[(g, s, round(t - began, 3), *rest) for g, s, t, *rest in p['pauses']]}"
                          for p in pauses.values()), flush=True)
                print("  the workers' tracked objects at the traced call's start and end, and "
                      "the types it added: " + "; ".join(
                          f"{p['objects']} {p['added']}" for p in pauses.values()), flush=True)
                overhead = 1 - engine_span(path) / best
                row = (f"| {name} | {n} | {best:.3f} | {FLOPS[routine](n) / best / 1e12:.2f} | "
                       f"{'-' if one is None else f'{one:.3f}'} | "
                       f"{'-' if one is None else f'{one / best:.2f}x'} | {overhead:.1%} |")
                # the timing first: a check that runs long must not take the row with it
                print(f"  {name} {n} traced run {traced:.3f} s, {phases(path)}", flush=True)
                if routine == "qr":  # the check makes Q anew: the GPUs' memory back first
                    factors = (client.persist(_on_host(factors[0])), factors[1])
                    wait(factors[0])
                print(f"  {row} (check follows)", flush=True)
                ratio = residual_ratio(routine, a, factors, n, client, opts.backend, nb)
                print(f"{row} {ratio:.2g} {'ok' if ratio < THRESH else 'FAILED'} |", flush=True)
                del factors
            del a
        print(f"traces: {trace_dir}")
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


if __name__ == "__main__":
    main()
