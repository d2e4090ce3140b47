#!/usr/bin/env python3
"""Probe: solve_mixed with A kept on the host (n = 100,000 on an H100) under a few settings of
the low-precision LU (mixed.lu_panel_sms, nb), to see whether n = 32768's tuning holds at this
size. One A and b (perf/mixed_ooc.py's generator), an untimed solve first, then one timed solve
per setting, each row the phases of info.seconds, the GMRES steps, the kept columns, and the
most device memory hybridla held during the solve (sampled every 10 ms) against the budget.

    python3 perf/probes/probe_mixed_large.py --n 100000 --settings 32:auto 16:auto 0:auto 32:3072
"""
from __future__ import annotations

import argparse
import os
import sys
import threading
import time

sys.path.append(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import numpy as np  # noqa: E402

import hybridla  # noqa: E402
from hybridla._memory import _memory_budget  # noqa: E402
from hybridla.bench.matrices import random_matrix  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=100000)
    p.add_argument("--settings", nargs="+", default=["32:auto"], metavar="SMS:NB")
    args = p.parse_args()
    a = random_matrix(args.n, np.float64, 0)
    b = np.random.default_rng(0).standard_normal(args.n)
    hybridla.solve_mixed(a, b, check_finite=False)  # the pinned slots' growth, kernels
    ops = hybridla.backend.get_backend("auto")
    budget = _memory_budget(ops)
    print(f"budget {budget} bytes")
    print("| lu_panel_sms | nb | seconds | GMRES steps | kept columns | most held (GB) | phases |")
    for setting in args.settings:
        sms, nb = setting.split(":")
        most, done = [0], threading.Event()

        def sample():
            while not done.wait(0.01):
                most[0] = max(most[0], ops.allocated_bytes())
        sampler = threading.Thread(target=sample)
        sampler.start()
        try:
            with hybridla.config.set({"mixed.lu_panel_sms": int(sms)}):
                started = time.perf_counter()
                _, info = hybridla.solve_mixed(a, b, nb=None if nb == "auto" else int(nb))
                seconds = time.perf_counter() - started
        finally:
            done.set()
            sampler.join()
        phases = ", ".join(f"{k} {v:.3f}" for k, v in info.seconds.items())
        print(f"| {sms} | {nb} | {seconds:.3f} | {info.inner_iterations} | "
              f"{info.kept_columns} | {most[0] / 1e9:.2f} (budget {(budget or 0) / 1e9:.2f}) | "
              f"{phases} |", flush=True)


if __name__ == "__main__":
    main()
