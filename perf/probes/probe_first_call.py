#!/usr/bin/env python3
"""A fresh process's first call against its warm calls (issue 34, rows "first call"): the
CPU interface's lu_factor of an n x n F-ordered float64 matrix with the defaults, in a child
process per case: "fresh machine" (an empty PyCUDA compiler cache: XDG_CACHE_HOME an empty
directory), then "cache present" (the same directory, which the first child filled).

    python3 perf/probes/probe_first_call.py [--n 32768] [--warm 2]

Each child times `import hybridla`, get_backend("cuda") (returns at once: the kernels compile
and the first lanes' handles are made in the background), the first lu_factor, then --warm
more; and, from get_backend on, when the last module of kernels was ready (a thread waiting on
backend.kernels). The matrix is made once per child, in parallel (hybridla.bench.matrices),
between the import and get_backend. Targets: first - warm <= 0.5 s with the cache, <= 2 s on
a fresh machine. With --trace-dir, each child's first and last warm call write their traces,
and one more child's first call is profiled (cProfile, the calling thread).
A child without hybridla times what any CUDA library pays before its first kernel (the
driver's initialization and primary context, a cuBLAS and a cuSOLVER handle): the floor. A last
one loads the modules of kernels from the cache one at a time: nvcc's version (PyCUDA's cache
key holds it), each cache lookup, each load.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

_CHILD = r"""
import json, sys, threading, time
t0 = time.perf_counter()
import hybridla
times = {"import": time.perf_counter() - t0}
import numpy as np
from hybridla import backend as backends
from hybridla.bench.matrices import random_matrix
n, warm = int(sys.argv[1]), int(sys.argv[2])
a = random_matrix(n, np.float64, 0)
t0 = time.perf_counter()
backend = backends.get_backend("cuda")
times["get_backend"] = time.perf_counter() - t0

def kernels_ready():
    backend.kernels.wait()
    times["kernels ready (from get_backend)"] = time.perf_counter() - t0

watcher = threading.Thread(target=kernels_ready)
watcher.start()
trace = sys.argv[3] if len(sys.argv) > 3 else ""
profiled = len(sys.argv) > 4 and sys.argv[4] == "profile"
if profiled:  # where the calling thread's time goes (the engine's threads are in the trace)
    import cProfile, pstats
    profile = cProfile.Profile()
    profile.enable()
t1 = time.perf_counter()
hybridla.lu_factor(a, trace=f"{trace}_first.json" if trace and not profiled else None)
times["first"] = time.perf_counter() - t1
if profiled:
    profile.disable()
    with open(f"{trace}_first_profile.txt", "w") as out:
        stats = pstats.Stats(profile, stream=out).sort_stats("cumulative")
        stats.print_stats(45)
        stats.print_callers(r"_find_spec|threading.py.*\(start\)|thread.py.*\(submit\)")
watcher.join()
for i in range(warm):
    t1 = time.perf_counter()
    hybridla.lu_factor(a, trace=f"{trace}_warm.json" if trace and i == warm - 1 else None)
    times[f"warm {i + 1}"] = time.perf_counter() - t1
print("TIMES " + json.dumps(times), flush=True)
"""


# What any CUDA library pays in a fresh process before its first kernel, hybridla or
# cuSOLVER alike: the floor under "first - warm".
_FLOOR = r"""
import json, time
times = {}
t0 = time.perf_counter()
import pycuda.driver as drv
from nvmath.bindings import cublas, cusolverDn
times["import pycuda.driver, nvmath's cublas and cusolverDn"] = time.perf_counter() - t0
t0 = time.perf_counter()
drv.init()
context = drv.Device(0).retain_primary_context()
context.push()
times["cuInit, the primary context retained and pushed"] = time.perf_counter() - t0
t0 = time.perf_counter()
blas = cublas.create()
times["cublasCreate"] = time.perf_counter() - t0
t0 = time.perf_counter()
solver = cusolverDn.create()
times["cusolverDnCreate"] = time.perf_counter() - t0
t0 = time.perf_counter()
cublas.create()
cusolverDn.create()
times["a second cublasCreate + cusolverDnCreate"] = time.perf_counter() - t0
drv.Context.pop()
print("TIMES " + json.dumps(times), flush=True)
"""


# Where a cached module's time goes, one module after another in one thread of a fresh process
# (the cache present): nvcc's version (part of PyCUDA's cache key), the cache lookup, the load.
_MODULES = r"""
import json, time
times = {}
import pycuda.driver as drv
from pycuda.compiler import get_nvcc_version
from hybridla.backend.cuda import runtime
drv.init()
device = drv.Device(0)
context = device.retain_primary_context()
context.push()
arch = "sm_%d%d" % device.compute_capability()
t0 = time.perf_counter()
get_nvcc_version("nvcc")
times["nvcc --version"] = time.perf_counter() - t0
for file, before in runtime._KERNEL_FILES.items():
    source = "".join(f'#line 1 "{part}"\n{runtime._kernel_source(part)}\n'
                     for part in (*before, file))
    t0 = time.perf_counter()
    cubin = runtime.compile_source(source, arch)
    times[f"{file} cache lookup"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    runtime._driver.Module(cubin)
    times[f"{file} load ({len(cubin) >> 10} KiB)"] = time.perf_counter() - t0
drv.Context.pop()
print("TIMES " + json.dumps(times), flush=True)
"""


def run_child(n: int, warm: int, cache: str, trace: str = "", code: str = _CHILD,
              profile: bool = False) -> dict:
    env = dict(os.environ, XDG_CACHE_HOME=cache)  # the child's environment only
    env.pop("PYCUDA_CACHE_DIR", None)  # it would override XDG_CACHE_HOME
    env.pop("PYCUDA_DISABLE_CACHE", None)
    argv = [sys.executable, "-c", code, str(n), str(warm), trace] + (["profile"] if profile else [])
    done = subprocess.run(argv, env=env,
                          capture_output=True, text=True, check=False)
    for line in done.stdout.splitlines():
        if line.startswith("TIMES "):
            return json.loads(line[len("TIMES "):])
    raise RuntimeError(f"the child failed (exit {done.returncode}):\n{done.stderr[-4000:]}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=32768)
    parser.add_argument("--warm", type=int, default=2)
    parser.add_argument("--trace-dir", default="",
                        help="the traces of each child's first and last warm call go here")
    args = parser.parse_args()
    rows = []
    if args.trace_dir:
        os.makedirs(args.trace_dir, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="hybridla-first-call-") as cache:
        for case, tag in (("fresh machine (empty cache)", "fresh"), ("cache present", "cached")):
            trace = os.path.join(args.trace_dir, f"first_call_{tag}_{args.n}") \
                if args.trace_dir else ""
            rows.append((case, run_child(args.n, args.warm, cache, trace)))
        if args.trace_dir:  # once more, the first call under cProfile (its times not shown)
            run_child(args.n, 0, cache, os.path.join(args.trace_dir, f"first_call_{args.n}"),
                      profile=True)
        floor = run_child(args.n, 0, cache, code=_FLOOR)
        modules = run_child(args.n, 0, cache, code=_MODULES)
    print(f"lu_factor, {args.n} x {args.n} float64, F-ordered, defaults; seconds")
    print(f"{'case':30} {'import':>7} {'backend':>8} {'kernels':>8} {'first':>7} "
          f"{'warm':>7} {'first-warm':>11}")
    for case, t in rows:
        warm = min(v for k, v in t.items() if k.startswith("warm")) if args.warm else 0.0
        print(f"{case:30} {t['import']:7.2f} {t['get_backend']:8.2f} "
              f"{t['kernels ready (from get_backend)']:8.2f} {t['first']:7.2f} {warm:7.2f} "
              f"{t['first'] - warm:11.2f}")
    print("kernels: from get_backend until the last module of kernels was ready; warm: the "
          "fastest warm call")
    for case, t in rows:
        print(case, json.dumps({k: round(v, 3) for k, v in t.items()}))
    print("the floor, a fresh process without hybridla: " +
          json.dumps({k: round(v, 3) for k, v in floor.items()}))
    print("the modules from the cache, one at a time: " +
          json.dumps({k: round(v, 3) for k, v in modules.items()}))


if __name__ == "__main__":
    main()
