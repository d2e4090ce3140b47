#!/usr/bin/env python3
"""Probe (issue 32): how fast our one-GPU GPU interface's LU is at the block size a user's call
resolves (nb auto: the device table's nb_large, 768 on the H100 from n = 12000) against the nb
512 that every issue-32 baseline until stop 55 ran at (perf/distributed.py forced it). The
ratios the issue reports are against this call, so its fastest reachable block size matters.

    python3 perf/probes/probe_one_gpu_nb.py --n 65536 --nb default,512 --repeat 3

One process; an untimed call of each block size at 4096 first, then the block sizes taken in
turn --repeat times (alternated, so that drift hits each alike), each call on a new seeded
matrix made on the GPU (F-ordered, overwrite_a=True, the library's other defaults), timed
with the device synchronized around it. Prints every run, then each block size's best and
median.
"""
from __future__ import annotations

import argparse
import gc
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import numpy as np  # noqa: E402

import hybridla  # noqa: E402
from hybridla.backend import get_backend  # noqa: E402
from hybridla.scheduler.plan import make_plan  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=65536)
    parser.add_argument("--nb", default="default,512",
                        help="block sizes, comma-separated; 'default': the library's own")
    parser.add_argument("--repeat", type=int, default=3)
    opts = parser.parse_args(argv)
    import cupy
    rng = cupy.random.default_rng(1)
    backend = get_backend("cuda")
    choices = [None if x == "default" else int(x) for x in opts.nb.split(",")]
    label = {nb: f"nb {make_plan(backend, opts.n, opts.n, np.float64, nb=nb).nb}"
             + (" (default)" if nb is None else "") for nb in choices}

    def call(n, nb):
        a = rng.standard_normal((n, n)).T  # F-ordered
        cupy.cuda.runtime.deviceSynchronize()
        gc.collect()
        start = time.perf_counter()
        hybridla.lu_factor(a, overwrite_a=True, **({} if nb is None else {"nb": nb}))
        cupy.cuda.runtime.deviceSynchronize()
        seconds = time.perf_counter() - start
        del a
        return seconds

    for nb in choices:
        call(4096, nb)
    runs = {nb: [] for nb in choices}
    for i in range(opts.repeat):
        for nb in choices:
            runs[nb].append(call(opts.n, nb))
            print(f"lu {opts.n} {label[nb]} run {i}: {runs[nb][-1]:.3f} s", flush=True)
    for nb in choices:
        print(f"lu {opts.n} {label[nb]}: best {min(runs[nb]):.3f} s, median "
              f"{np.median(runs[nb]):.3f} ({', '.join(f'{t:.3f}' for t in runs[nb])})")


if __name__ == "__main__":
    main()
