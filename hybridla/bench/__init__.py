"""The benchmarks' harness, shipped with the package so that ``hybridla bench`` runs from an
installed wheel; the scripts in a source checkout's perf/ use it too.

- ``harness``: optional GPU modules imported on first use, clocks (median or best of
  synchronized repeats, CUDA events), the alternating comparison (``alternate``), device and
  pinned memory.
- ``report``: where and when a table was made (date, device, commit, baseline), its cells
  (ratios with "parity" where the spreads overlap) and markdown tables.
- ``baselines``: cuSOLVER (getrf, potrf, geqrf, getrs, potrs, the expert IRS solver) through
  nvmath.bindings.cusolverDn, and the CPU-interface baselines with pinned or pageable transfers.
- ``flops``: LAWN 41 operation counts.
- ``matrices``, ``checks``: test matrices and LAPACK's test ratios of the results.
- ``factorizations``, ``runner``: the factorization benchmark (``hybridla bench``, perf/bench.py).

Nothing here is imported by ``import hybridla``; importing it needs no GPU.
"""
