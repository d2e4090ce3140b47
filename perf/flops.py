"""Floating-point operation counts of LAPACK routines (LAWN 41), for the scripts beside this
file: they live in the package, hybridla/bench/flops.py (``hybridla bench`` uses them too)."""

import os
import sys

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.append(_ROOT)   # the working tree's hybridla when it is not installed

from hybridla.bench.flops import *  # noqa: E402,F401,F403
from hybridla.bench.flops import __all__  # noqa: E402,F401
