#!/usr/bin/env python3
"""Out-of-core factorizations (issue 31) against in-core, CPU interface, in the same process.

Usage (from the repository root):

    python3 perf/ooc.py --sizes 65536 --budget-gib 16 --routines getrf potrf geqrf \
        [--nb N] [--repeat 1] [--trace-dir DIR] [--skip-in-core]

For each routine and size: the in-core CPU-interface factorization (the budget as configured,
out of core "never"), then the out-of-core one with device.memory_budget capped at
--budget-gib (out of core "always"), on the same matrix (perf/bench.py's generators: randn,
SPD for potrf), after an untimed in-core and out-of-core call of each routine at
--warmup-n (kernels compiled, handles made). One row each: seconds (the best of --repeat),
TFLOP/s (LAWN 41 counts), the ratio to in-core, the LAPACK-style residual ratio
(hybridla/bench/checks.py: dense below 8192, a random-vector estimate above), and how the
matrix was cut (wide columns x width). A matrix
larger than the device (n = 100000 on an H100) needs --skip-in-core; one too large for two
host copies (80 GB of the GPU machine's 125) needs --in-place, which factors the generated
matrix itself after taking what the residual's estimate needs of it.
Traces (--trace-dir) show the copy lanes against the compute lanes.

Without a GPU it runs on the host backend (small sizes: the budget caps the host's working
store the same way).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import types

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.append(_ROOT)

import numpy as np  # noqa: E402

import hybridla  # noqa: E402
from hybridla.bench import checks, flops  # noqa: E402

ROUTINES = {
    "getrf": ("general", lambda a, **kw: hybridla.lu_factor(a, overwrite_a=True, **kw),
              lambda case, f: checks.getrf_error(case, f), flops.getrf_flops),
    "potrf": ("spd", lambda a, **kw: (hybridla.cho_factor(a, lower=True, overwrite_a=True,
                                                         **kw)[0],),
              lambda case, f: checks.potrf_error(case, f), lambda m, n, d: flops.potrf_flops(n, d)),
    "geqrf": ("general", lambda a, **kw: hybridla.geqrf(a, overwrite_a=True, **kw),
              lambda case, f: checks.qr_error("qr", case, f), flops.geqrf_flops),
}


LARGE = 32768  # orders above this: the parallel generators (minutes less on the GPU machine)


def run(routine, case, opts, ooc, config):
    """(best seconds, factors of the last run, out-of-core record) of `routine` on case.a."""
    kind, factor, _, _ = ROUTINES[routine]
    best, record, factors = float("inf"), None, None
    if opts.in_place:  # what the residual's estimate reads of A, before A is gone
        case.anorm
        case.ax
    for repetition in range(opts.repeat):
        work = case.a if opts.in_place else case.host_copy()
        trace = None
        if repetition == opts.repeat - 1:  # the last run's trace says how the matrix was cut
            trace = os.path.join(opts.trace_dir or tempfile.gettempdir(),
                                 f"hybridla_{routine}_{ooc}_{case.n}"
                                 f"{'_' + config.get('device.ooc_transfer', '')}.json")
        with hybridla.config.set(config):
            start = time.perf_counter()
            factors = factor(work, nb=opts.nb, ooc=ooc, trace=trace)
            best = min(best, time.perf_counter() - start)
        if trace:
            with open(trace, encoding="utf-8") as f:
                record = json.load(f)["metadata"].get("out_of_core")
    return best, factors, record


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[4096])
    parser.add_argument("--budget-gib", type=float, default=None,
                        help="device.memory_budget for the out-of-core runs (default: half "
                             "the matrix)")
    parser.add_argument("--routines", nargs="+", default=list(ROUTINES), choices=ROUTINES)
    parser.add_argument("--nb", default=None)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--trace-dir", default=None)
    parser.add_argument("--skip-in-core", action="store_true")
    parser.add_argument("--in-place", action="store_true",
                        help="factor the generated matrix itself, once, out of core (no second "
                             "host copy: n = 100000 on the GPU machine's 125 GB); its norm and A x "
                             "for the residual's estimate are taken first; getrf and potrf only")
    parser.add_argument("--transfers", nargs="+", default=[None],
                        choices=["register", "staged"],
                        help="device.ooc_transfer of the out-of-core runs, each in turn "
                             "(default: the configured one)")
    parser.add_argument("--warmup-n", type=int, default=4096,
                        help="order of the untimed first calls of each routine (default 4096)")
    opts = parser.parse_args(argv)
    opts.nb = int(opts.nb) if opts.nb and opts.nb != "auto" else None
    if opts.in_place:
        if set(opts.routines) - {"getrf", "potrf"}:
            parser.error("--in-place takes getrf and potrf only (QR's check reads A again)")
        if len(opts.transfers) > 1:
            parser.error("--in-place factors the matrix once: one --transfers at most")
        opts.skip_in_core, opts.repeat = True, 1
    if opts.trace_dir:
        os.makedirs(opts.trace_dir, exist_ok=True)
    # untimed first: each routine in core and out of core at a small order, so that no timed
    # call pays for compiling the kernels (a fresh machine has no cache: seconds) or handles
    for routine in opts.routines:
        kind, factor, _, _ = ROUTINES[routine]
        small = checks.Case(opts.warmup_n, np.float64, types.SimpleNamespace(seed=1, repeat=1),
                            warmup=0, kind=kind)
        with hybridla.config.set({}):
            factor(small.host_copy(), nb=opts.nb, ooc="never")
        budget = small.nbytes // 2
        while True:  # out of core: the smallest of these budgets that holds two wide columns
            try:
                with hybridla.config.set({"device.memory_budget": budget}):
                    factor(small.host_copy(), nb=opts.nb, ooc="always")
                break
            except MemoryError:
                budget = budget * 3 // 2
        del small
    print("| routine | n | run | seconds | TFLOP/s | vs in-core | residual | cut |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for routine in opts.routines:
        kind, _, error, count = ROUTINES[routine]
        for n in opts.sizes:
            # above LARGE, the generators made for it (parallel; SPD without G G^T, which
            # would need 160 GB of device memory at n = 100000: hybridla/bench/matrices.py)
            case = checks.Case(n, np.float64, types.SimpleNamespace(seed=opts.seed, repeat=1),
                               warmup=0, kind=f"large-{kind}" if n > LARGE else kind)
            budget = int(opts.budget_gib * 2 ** 30) if opts.budget_gib else case.nbytes // 2
            total = count(n, n, np.float64)
            runs = [] if opts.skip_in_core else [("in-core", "never", {})]
            for transfer in opts.transfers:
                config = {"device.memory_budget": budget}
                if transfer:
                    config["device.ooc_transfer"] = transfer
                runs.append((f"out-of-core{', ' + transfer if transfer else ''}", "always",
                             config))
            in_core = None
            for name, ooc, config in runs:
                seconds, factors, record = run(routine, case, opts, ooc, config)
                ratio, _ = error(case, factors)
                rate = total / seconds / 1e12
                in_core = rate if name == "in-core" else in_core
                versus = f"{rate / in_core:.3f}" if in_core and name != "in-core" else ""
                cut = (f"{record['wide_columns']} x {record['width']}, "
                       f"{record.get('transfer', '')}") if record else ""
                print(f"| {routine} | {n} | {name} | {seconds:.3f} | {rate:.3g} | {versus} | "
                      f"{ratio:.3g} | {cut} |", flush=True)
                del factors


if __name__ == "__main__":
    main()
