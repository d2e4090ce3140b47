#!/usr/bin/env python3
"""What check_finite costs the CPU interface: numpy.asarray_chkfinite (the check until
2026-11-25) against hybridla's own (linalg._all_finite: a sum in pieces by a thread per core),
alone and inside lu_factor of a host matrix, with and without a trace.

    python3 perf/probes/probe_check_finite.py --sizes 16384 32768 --repeat 3

Times: best of --repeat, wall clock; lu_factor on an F-ordered float64 standard normal matrix
with overwrite_a=True (the copy made before the clock starts), the backend's default.
"""
from __future__ import annotations

import argparse
import os
import tempfile

import numpy as np

import hybridla
from hybridla import _common as linalg
from hybridla.bench import harness


def best(fn, repeat, setup=lambda: None):
    """Seconds of the fastest of `repeat` calls fn(*setup()), setup untimed (host clock)."""
    return harness.measure(lambda args, last: fn(*(args or ())), setup, repeat,
                           statistic=min).seconds


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[16384, 32768])
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    print(f"{os.cpu_count()} cores; backend {hybridla.config.get('backend')}")
    print("| n | GB | asarray_chkfinite (s) | _all_finite (s) | lu_factor, no check (s) "
          "| lu_factor, check (s) | lu_factor, check + trace (s) |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    trace = os.path.join(tempfile.mkdtemp(), "probe.trace.json")
    for n in args.sizes:
        a = np.asfortranarray(np.random.default_rng(0).standard_normal((n, n)))
        hybridla.lu_factor(a.copy(order="F"), overwrite_a=True)  # warm-up
        check_old = best(lambda: np.asarray_chkfinite(a), args.repeat)
        check_new = best(lambda: linalg._all_finite(a), args.repeat)

        def factor(**kw):
            return best(lambda w: hybridla.lu_factor(w, overwrite_a=True, **kw), args.repeat,
                        setup=lambda: (a.copy(order="F"),))

        row = [factor(check_finite=False), factor(), factor(trace=trace)]
        print(f"| {n} | {a.nbytes / 1e9:.2f} | {check_old:.4f} | {check_new:.4f} | "
              + " | ".join(f"{t:.4f}" for t in row) + " |", flush=True)


if __name__ == "__main__":
    main()
