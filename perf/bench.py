#!/usr/bin/env python3
"""Benchmark of hybridla's factorizations against cuSOLVER, MAGMA (through PyTorch) and SciPy.

Usage (from the repository root; ``hybridla bench`` takes the same options):

    python3 perf/bench.py --routine getrf --sizes 16384 32768 --dtype float64 \
        [--nb N] [--lookahead L] [--panel auto] [--repeat 5] \
        [--interfaces gpu,cpu,gpu-tuned,cpu-tuned] \
        [--baselines cusolver|cusolver-device,cusolver-pinned,cusolver-pageable,magma,scipy] \
        [--scipy-max 16384] [--trace-dir DIR] [--out FILE.md]

    python3 perf/bench.py --routine potrf --sizes 16384 32768
    python3 perf/bench.py --routine geqrf,geqlf,gelqf --sizes 16384

The implementations run alternately (round-robin, median and spread of --repeat rounds, a ratio
inside the spreads is "parity"); hybridla's headline rows use the library's defaults, the CPU
interface is compared with cuSOLVER on pinned host memory (runner.py's docstring has the rows).

An installed hybridla takes precedence over the working tree's: run with PYTHONPATH=$PWD to
time the checkout.

The benchmark lives in the package, hybridla/bench/ (runner.py says what each row times and
how results are checked; factorizations.py, checks.py, matrices.py, baselines.py, harness.py):
this script runs it with the working tree's hybridla when none is installed. Its module names
are those of hybridla.bench's modules: reading bench.NAME reads the package's, and setting one
(a test's monkeypatch of DENSE_CHECK_MAX_HOST) sets it in every module of hybridla.bench that
has it.

Without a GPU only the hybridla CPU interface (host backend) and SciPy rows are produced,
e.g. ``python3 perf/bench.py --sizes 2048 4096`` or ``--routine potrf --sizes 512 1000``.
"""
from __future__ import annotations

import os
import sys
import types

# The working tree's hybridla when it is not installed (an installed one takes precedence).
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.append(_ROOT)

from hybridla.bench import (  # noqa: E402
    baselines, checks, factorizations, flops, harness, matrices, runner)
from hybridla.bench.runner import main  # noqa: E402

_PACKAGE_MODULES = (runner, factorizations, checks, matrices, baselines, flops, harness)


class _Forwarding(types.ModuleType):
    """A module whose missing names are hybridla.bench's, read and written there."""

    def __getattr__(self, name):
        for module in _PACKAGE_MODULES:
            if name in vars(module):
                return vars(module)[name]
        raise AttributeError(f"perf/bench.py (hybridla.bench) has no {name!r}")

    def __setattr__(self, name, value):
        owners = [m for m in _PACKAGE_MODULES if name in vars(m)]
        if not owners or name.startswith("__") or name in vars(self):
            super().__setattr__(name, value)
            return
        for module in owners:
            setattr(module, name, value)

    def __delattr__(self, name):
        if name in vars(self):
            super().__delattr__(name)


sys.modules[__name__].__class__ = _Forwarding

if __name__ == "__main__":
    sys.exit(main())
