#!/usr/bin/env python3
"""Benchmark of hybridla's reduction to Hessenberg form (gehrd) against scipy.linalg.hessenberg.

Usage (from the repository root):

    python3 perf/gehrd.py --sizes 2048 4096 8192 16384 [--dtype float64] [--nb 32] \
        [--repeat 1] [--interfaces cpu,gpu] [--scipy-max 16384] [--check-max 4096] \
        [--copy-mib 2048] [--out perf/RESULTS.md]

One process, one table, one row per size and implementation:

  SciPy (host)          scipy.linalg.hessenberg(a) (LAPACK gebal (a no-op) + gehrd + triu) on
                        the host's cores, for n <= --scipy-max
  hybridla CPU iface    hybridla.gehrd(a) on the NumPy array: backend "cuda" where there is a GPU
                        (the matrix streamed up and back; factors in host memory when the clock
                        stops), else "host"
  hybridla GPU iface    hybridla.gehrd(d_a, overwrite_a=True) on a CuPy array (upload outside the
                        timed region; the factors stay on the device); needs CuPy and a GPU

Columns: time (median of --repeat, after one untimed warm-up at n = 256); GFLOP/s by LAPACK's
count 10/3 n^3 (times 4 for complex dtypes); "vs SciPy" = SciPy's time / this time; the
matrix-vector phase from hybridla's HessenbergStats: the time of the panels' GEMVs with the
trailing matrix (device time by CUDA events on a GPU), its share of the total, the bytes of the matrix those
GEMVs read divided by that time, and that rate as a fraction of the device's copy bandwidth
measured here (a device-to-device copy of --copy-mib MiB, bytes read + written / time, best of
10, CUDA events); on a machine without a GPU there is no device copy bandwidth and the fraction
is left out. "check" = ||A - Q H Q^H||_1 / (n ||A||_1 eps) with Q from scipy's orghr/unghr on the
factors and tau (so it also checks LAPACK's storage), computed on the host for n <= --check-max.

Without a GPU only the host backend and SciPy are run: ``python3 perf/gehrd.py --sizes 512 1024``.
SciPy at n = 16384 takes minutes on 16 cores: run that size in a command of its own.
"""
from __future__ import annotations

import argparse
import os
import platform
import sys

import numpy as np
import scipy.linalg
import scipy.linalg.lapack

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)  # the working tree's hybridla, before any installed one

import hybridla  # noqa: E402
from hybridla.bench import harness  # noqa: E402  (CuPy, clocks, the copy bandwidth, tables)
from hybridla.lapack.gehrd import HessenbergStats  # noqa: E402

DTYPES = ("float32", "float64", "complex64", "complex128")
COLUMNS = ("n", "implementation", "time (s)", "GFLOP/s", "vs SciPy", "matvec (s)",
           "matvec share", "matvec GB/s", "of copy BW", "check", "note")

log = harness.logger("gehrd")


def cupy_or_none():
    return harness.cupy() if harness.cupy_has_gpu() else None


def device_name(cp) -> str:
    cores = f"{os.cpu_count()} host cores"
    if cp is None:
        return f"{platform.processor() or platform.machine()} (no GPU), {cores}"
    name = cp.cuda.runtime.getDeviceProperties(0)["name"]
    return f"{name.decode() if isinstance(name, bytes) else name}, {cores}"


def flop_count(n, dtype) -> float:
    return 10 / 3 * n ** 3 * (4 if np.dtype(dtype).kind == "c" else 1)


def test_matrix(n, dtype, seed):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((n, n))
    if np.dtype(dtype).kind == "c":
        a = a + 1j * rng.standard_normal((n, n))
    return np.asfortranarray(a.astype(dtype))


def check_ratio(a, factors, tau) -> float:
    """||A - Q H Q^H||_1 / (n ||A||_1 eps), Q by LAPACK's orghr / unghr (host)."""
    name = "unghr" if np.iscomplexobj(factors) else "orghr"
    orghr = scipy.linalg.lapack.get_lapack_funcs(name, dtype=factors.dtype)
    q, info = orghr(factors, tau)
    assert info == 0
    h = np.triu(factors, -1)
    n = a.shape[0]
    resid = np.abs(a - q @ h @ q.conj().T).sum(axis=0).max()
    return float(resid / (n * np.abs(a).sum(axis=0).max() * np.finfo(a.dtype).eps))


def timed(fn, setup, repeat, sync):
    """Median wall time of fn(setup()) over `repeat` runs (setup untimed); returns
    (median seconds, the last result)."""
    m = harness.measure(lambda arg, last: fn(arg), setup, repeat, sync=sync)
    return m.seconds, m.result


def row(cells):
    return harness.MarkdownTable.format_row(cells)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[2048, 4096, 8192, 16384])
    p.add_argument("--dtype", choices=DTYPES, default="float64")
    p.add_argument("--nb", type=int, default=None, help="panel width (default: config hrd.nb)")
    p.add_argument("--repeat", type=int, default=1, help="timed runs per size (median)")
    p.add_argument("--interfaces", default="cpu,gpu", help="hybridla interfaces: cpu,gpu")
    p.add_argument("--scipy-max", type=int, default=16384, help="largest n for SciPy")
    p.add_argument("--check-max", type=int, default=4096, help="largest n for the check")
    p.add_argument("--copy-mib", type=int, default=2048, help="size of the copy timed for BW")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="append the table to this markdown file")
    return p.parse_args(argv)


def main(argv=None) -> int:
    opts = parse_args(argv)
    dtype = np.dtype(opts.dtype)
    cp = cupy_or_none()
    backend = "cuda" if "cuda" in hybridla.available_backends() else "host"
    interfaces = [w for w in opts.interfaces.split(",") if w]
    if "gpu" in interfaces and (cp is None or backend != "cuda"):
        log("no CuPy with a GPU and hybridla's cuda backend: the GPU interface is left out")
        interfaces.remove("gpu")
    copy_bw = harness.copy_bandwidth(opts.copy_mib) if cp is not None else None
    sync = (lambda: cp.cuda.Device().synchronize()) if cp is not None else (lambda: None)
    command = harness.command_line(argv, "perf/gehrd.py")
    now = harness.utc_now()
    lines = [
        "", f"### gehrd {dtype} on {device_name(cp)}, {now}", "", f"`{command}`", "",
        f"hybridla {hybridla.__file__} (backend {backend}, nb "
        f"{opts.nb or hybridla.config.get('hrd.nb')}); numpy {np.__version__}, scipy "
        f"{scipy.__version__}; repeat {opts.repeat} (median), warm-up once at n = 256; GFLOP/s "
        f"by 10/3 n^3{' x 4' if dtype.kind == 'c' else ''}. Device copy bandwidth (D2D, read + "
        f"written): " + (f"{copy_bw / 1e9:.0f} GB/s." if copy_bw else "no GPU."),
        "matvec = the panels' GEMVs with the trailing matrix (their device time by CUDA events; "
        "wall time on the host backend); matvec GB/s = bytes of the matrix they read / that "
        "time; check = "
        "||A - Q H Q^H||_1 / (n ||A||_1 eps), Q by LAPACK orghr on our factors.",
        "", row(COLUMNS), "|" + "|".join("---:" if c not in ("implementation", "note") else "---"
                                         for c in COLUMNS) + "|"]
    out = open(opts.out, "a", encoding="utf-8") if opts.out else None

    def emit(line):
        print(line, flush=True)
        if out:
            out.write(line + "\n")
            out.flush()

    for line in lines:
        emit(line)

    options = dict(nb=opts.nb) if opts.nb else {}
    runs = {
        "SciPy (host)": lambda a, stats: scipy.linalg.hessenberg(a, overwrite_a=True),
        "hybridla CPU iface": lambda a, stats: hybridla.gehrd(a, backend=backend, stats=stats,
                                                              **options),
        "hybridla GPU iface": lambda a, stats: hybridla.gehrd(a, overwrite_a=True, stats=stats,
                                                              **options),
    }
    selected = ["SciPy (host)"] + [f"hybridla {i.upper()} iface" for i in ("cpu", "gpu")
                                   if i in interfaces]

    def setup_for(name, a):
        if name == "SciPy (host)":
            return lambda: a.copy(order="F")
        if name == "hybridla GPU iface":
            return lambda: cp.asarray(a, order="F")
        return lambda: a

    warm = test_matrix(256, dtype, opts.seed)
    for name in selected:  # compile, allocate, start the worker pools
        runs[name](setup_for(name, warm)(), HessenbergStats())

    try:
        for n in sorted(set(opts.sizes)):
            log(f"n={n}: generating the {dtype} matrix")
            a = test_matrix(n, dtype, opts.seed)
            scipy_time = None
            for name in selected:
                if name == "SciPy (host)" and n > opts.scipy_max:
                    log(f"n={n}: SciPy skipped (n > --scipy-max {opts.scipy_max})")
                    continue
                log(f"n={n}: {name}")
                stats = HessenbergStats()
                cells = [n, name]
                note = ""
                try:
                    # stats accumulate over the repetitions: divide by them
                    seconds, result = timed(lambda x: runs[name](x, stats),
                                            setup_for(name, a), opts.repeat, sync)
                except Exception as exc:
                    emit(row(cells + ["n/a"] * 8 + [f"{type(exc).__name__}: {exc}"[:160]]))
                    continue
                if name == "SciPy (host)":
                    scipy_time = seconds
                check = "–"
                if name != "SciPy (host)" and n <= opts.check_max:
                    factors, tau = result
                    factors = cp.asnumpy(factors) if not isinstance(factors, np.ndarray) \
                        else factors
                    check = f"{check_ratio(a, factors, tau):.2f}"
                matvec = stats.seconds / opts.repeat
                has_stats = name != "SciPy (host)" and stats.calls
                bandwidth = stats.bandwidth if has_stats else None
                cells += [f"{seconds:.4g}", f"{flop_count(n, dtype) / seconds / 1e9:.1f}",
                          "–" if scipy_time is None else f"{scipy_time / seconds:.2f}x",
                          f"{matvec:.3g}" if has_stats else "–",
                          f"{matvec / seconds:.0%}" if has_stats else "–",
                          f"{bandwidth / 1e9:.0f}" if has_stats else "–",
                          f"{bandwidth / copy_bw:.0%}" if has_stats and copy_bw
                          and backend == "cuda" else "–",
                          check, note]
                emit(row(cells))
                result = None
                if cp is not None:
                    cp.get_default_memory_pool().free_all_blocks()
    finally:
        if out:
            out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
