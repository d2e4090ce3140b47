"""The benchmarks' harness, shipped with the package so that ``hybridla bench`` runs from an
installed wheel; the scripts in a source checkout's perf/ use it too.

- ``harness``: optional GPU modules imported on first use, clocks (median or best of
  synchronized repeats, CUDA events), device and pinned memory, device names, markdown tables.
- ``baselines``: cuSOLVER (getrf, potrf, geqrf, getrs, potrs, <xy>_gesv) through
  nvmath.bindings.cusolverDn, and the CPU-interface baseline with its transfers.
- ``flops``: LAWN 41 operation counts.
- ``matrices``, ``checks``: test matrices and LAPACK's test ratios of the results.
- ``factorizations``, ``runner``: the factorization benchmark (``hybridla bench``, perf/bench.py).

Nothing here is imported by ``import hybridla``; importing it needs no GPU.
"""
