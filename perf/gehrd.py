#!/usr/bin/env python3
"""Benchmark of hybridla's reduction to Hessenberg form (gehrd, hessenberg with and without Q)
against scipy.linalg.hessenberg.

Usage (from the repository root):

    python3 perf/gehrd.py --sizes 2048 4096 8192 16384 [--dtype float64] [--nb 32] \
        [--repeat 1] [--interfaces cpu,gpu] [--tables gehrd,hessenberg] [--scipy-max 16384] \
        [--check-max 4096] [--order F] [--copy-mib 2048] [--out perf/RESULTS.md]

One process; --tables picks the tables, each with one row per size and implementation.

Table "gehrd" (the reduction's factors):

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

Table "hessenberg" (issue 34's question: what forming Q adds): hessenberg(a) against
hessenberg(a, calc_q=True), the same three implementations (SciPy's overwrite_a=True on a fresh
copy; the GPU interface's on a fresh device copy, outside the clock), every contender of a size
timed in turn, round-robin, --repeat rounds (harness.alternate). Columns: the median times of H
alone and of H and Q with their spread (fastest-slowest), "Q adds" = (H and Q) / H - 1, the ratio
of SciPy's time to this one for each, and check = max(||A - Q H Q^H||_1 / (n ||A||_1 eps),
||I - Q^H Q||_1 / (n eps)) of the last run, on the host, for n <= --check-max.

--order C hands the CPU interface a C-ordered matrix (as numpy.random's are), which it copies into
LAPACK's layout first; F (the default) measures the factorization without that copy.
Without a GPU only the host backend and SciPy are run: ``python3 perf/gehrd.py --sizes 512 1024``.
SciPy at n = 16384 takes minutes on 16 cores (more with Q): --scipy-max leaves it out above a size.
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
from hybridla.bench import harness, report  # noqa: E402  (CuPy, clocks, the copy bandwidth; tables)
from hybridla.lapack.gehrd import HessenbergStats  # noqa: E402

DTYPES = ("float32", "float64", "complex64", "complex128")
TABLES = ("gehrd", "hessenberg")
COLUMNS = ("n", "implementation", "time (s)", "GFLOP/s", "vs SciPy", "matvec (s)",
           "matvec share", "matvec GB/s", "of copy BW", "check", "note")
Q_COLUMNS = ("n", "implementation", "H (s)", "H and Q (s)", "Q adds", "H vs SciPy",
             "H and Q vs SciPy", "spread H; H and Q (s)", "check", "note")
SCIPY, CPU, GPU = "SciPy (host)", "hybridla CPU iface", "hybridla GPU iface"

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


def test_matrix(n, dtype, seed, order="F"):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((n, n))
    if np.dtype(dtype).kind == "c":
        a = a + 1j * rng.standard_normal((n, n))
    return np.asarray(a.astype(dtype), order=order)


def check_ratio(a, factors, tau) -> float:
    """||A - Q H Q^H||_1 / (n ||A||_1 eps), Q by LAPACK's orghr / unghr (host)."""
    name = "unghr" if np.iscomplexobj(factors) else "orghr"
    orghr = scipy.linalg.lapack.get_lapack_funcs(name, dtype=factors.dtype)
    q, info = orghr(factors, tau)
    assert info == 0
    return hessenberg_ratio(a, np.triu(factors, -1), q)


def hessenberg_ratio(a, h, q) -> float:
    """max(||A - Q H Q^H||_1 / (n ||A||_1 eps), ||I - Q^H Q||_1 / (n eps)) (LAPACK's xHST01)."""
    n = a.shape[0]
    eps = np.finfo(a.dtype).eps
    resid = np.abs(a - q @ h @ q.conj().T).sum(axis=0).max()
    loss = np.abs(np.eye(n) - q.conj().T @ q).sum(axis=0).max()
    return float(max(resid / (n * np.abs(a).sum(axis=0).max() * eps), loss / (n * eps)))


def timed(fn, setup, repeat, sync):
    """Median wall time of fn(setup()) over `repeat` runs (setup untimed); returns
    (median seconds, the last result)."""
    m = harness.measure(lambda arg, last: fn(arg), setup, repeat, sync=sync)
    return m.seconds, m.result


def row(cells):
    return report.MarkdownTable.format_row(cells)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[2048, 4096, 8192, 16384])
    p.add_argument("--dtype", choices=DTYPES, default="float64")
    p.add_argument("--nb", type=int, default=None, help="panel width (default: config hrd.nb)")
    p.add_argument("--repeat", type=int, default=1, help="timed runs per size (median)")
    p.add_argument("--interfaces", default="cpu,gpu", help="hybridla interfaces: cpu,gpu")
    p.add_argument("--tables", default="gehrd,hessenberg",
                   help="gehrd (the factors), hessenberg (H alone against H and Q)")
    p.add_argument("--scipy-max", type=int, default=16384, help="largest n for SciPy")
    p.add_argument("--check-max", type=int, default=4096, help="largest n for the check")
    p.add_argument("--order", choices=("F", "C"), default="F",
                   help="the test matrix's layout (C: the CPU interface copies it first)")
    p.add_argument("--copy-mib", type=int, default=2048, help="size of the copy timed for BW")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="append the tables to this markdown file")
    p.add_argument("--trace-dir", default=None,
                   help="the hessenberg table's hybridla rows write the Chrome trace of their "
                        "last run here")
    opts = p.parse_args(argv)
    opts.tables = [t for t in opts.tables.split(",") if t]
    if opts.trace_dir:
        os.makedirs(opts.trace_dir, exist_ok=True)
    unknown = sorted(set(opts.tables) - set(TABLES))
    if unknown:
        p.error(f"--tables: unknown {unknown}; choose from {TABLES}")
    return opts


class Session:
    """What both tables share: the options, the interfaces and backend there are, the clock's
    device synchronization, and where the lines go (stdout, and --out when given)."""

    def __init__(self, opts, argv):
        self.opts, self.dtype = opts, np.dtype(opts.dtype)
        self.cp = cupy_or_none()
        self.backend = "cuda" if "cuda" in hybridla.available_backends() else "host"
        self.interfaces = [w for w in opts.interfaces.split(",") if w]
        if "gpu" in self.interfaces and (self.cp is None or self.backend != "cuda"):
            log("no CuPy with a GPU and hybridla's cuda backend: the GPU interface is left out")
            self.interfaces.remove("gpu")
        cp = self.cp
        self.sync = (lambda: cp.cuda.Device().synchronize()) if cp is not None else (lambda: None)
        self.command = report.command_line(argv, "perf/gehrd.py")
        self.options = {"nb": opts.nb} if opts.nb else {}
        self.out = open(opts.out, "a", encoding="utf-8") if opts.out else None  # noqa: SIM115

    def emit(self, line):
        print(line, flush=True)
        if self.out:
            self.out.write(line + "\n")
            self.out.flush()

    def implementations(self, n=None):
        """The implementations timed at order n (None: at any order, for the warm-up): SciPy
        up to --scipy-max, then the interfaces."""
        scipy_too = n is None or n <= self.opts.scipy_max
        return [SCIPY] * scipy_too + [f"hybridla {i.upper()} iface" for i in ("cpu", "gpu")
                                      if i in self.interfaces]

    def matrix(self, n):
        """The test matrix of order n, saying so (and whether SciPy sits this size out)."""
        log(f"n={n}: generating the {self.dtype} matrix")
        if n > self.opts.scipy_max:
            log(f"n={n}: SciPy skipped (n > --scipy-max {self.opts.scipy_max})")
        return test_matrix(n, self.dtype, self.opts.seed, self.opts.order)

    def setup_for(self, name, a):
        """The timed call's input, made outside the clock: SciPy overwrites a copy, the GPU
        interface a device copy, the CPU interface reads the matrix as it is."""
        if name == SCIPY:
            return lambda: a.copy(order="F")
        if name == GPU:
            return lambda: self.cp.asarray(a, order="F")
        return lambda: a

    def to_numpy(self, x):
        return x if isinstance(x, np.ndarray) else self.cp.asnumpy(x)

    def free_device_pool(self):
        if self.cp is not None:
            self.cp.get_default_memory_pool().free_all_blocks()

    def preamble(self, title, notes, columns):
        now = report.utc_now()
        lines = ["", f"### {title} {self.dtype} on {device_name(self.cp)}, {now}", "",
                 f"`{self.command}`", "",
                 f"hybridla {hybridla.__file__} (backend {self.backend}, nb "
                 f"{self.opts.nb or hybridla.config.get('hrd.nb')}); numpy {np.__version__}, "
                 f"scipy {scipy.__version__}; {self.opts.order}-ordered input; repeat "
                 f"{self.opts.repeat} (median), warm-up once at n = 256. " + notes,
                 "", row(columns),
                 "|" + "|".join("---:" if c not in ("implementation", "note") else "---"
                                for c in columns) + "|"]
        for line in lines:
            self.emit(line)

    def close(self):
        if self.out:
            self.out.close()


def gehrd_table(session):
    """The gehrd table: the factors, their matrix-vector phase and its bandwidth."""
    opts, cp, backend, dtype = session.opts, session.cp, session.backend, session.dtype
    copy_bw = harness.copy_bandwidth(opts.copy_mib) if cp is not None else None
    session.preamble(
        "gehrd",
        f"GFLOP/s by 10/3 n^3{' x 4' if dtype.kind == 'c' else ''}. Device copy bandwidth (D2D, "
        f"read + written): " + (f"{copy_bw / 1e9:.0f} GB/s." if copy_bw else "no GPU.") + " "
        "matvec = the panels' GEMVs with the trailing matrix (their device time by CUDA events; "
        "wall time on the host backend); matvec GB/s = bytes of the matrix they read / that "
        "time; check = ||A - Q H Q^H||_1 / (n ||A||_1 eps), Q by LAPACK orghr on our factors.",
        COLUMNS)
    runs = {
        SCIPY: lambda a, stats: scipy.linalg.hessenberg(a, overwrite_a=True),
        CPU: lambda a, stats: hybridla.gehrd(a, backend=backend, stats=stats, **session.options),
        GPU: lambda a, stats: hybridla.gehrd(a, overwrite_a=True, stats=stats,
                                             **session.options),
    }
    warm = test_matrix(256, dtype, opts.seed, opts.order)
    for name in session.implementations():  # compile, allocate, start the worker pools
        runs[name](session.setup_for(name, warm)(), HessenbergStats())

    for n in sorted(set(opts.sizes)):
        a = session.matrix(n)
        scipy_time = None
        for name in session.implementations(n):
            log(f"n={n}: {name}")
            stats = HessenbergStats()
            cells = [n, name]
            try:
                # stats accumulate over the repetitions: divide by them
                seconds, result = timed(lambda x, name=name, stats=stats: runs[name](x, stats),
                                        session.setup_for(name, a), opts.repeat, session.sync)
            except Exception as exc:  # noqa: BLE001  (a row that says why, and the next one)
                session.emit(row(cells + ["n/a"] * 8 + [f"{type(exc).__name__}: {exc}"[:160]]))
                continue
            if name == SCIPY:
                scipy_time = seconds
            check = "–"
            if name != SCIPY and n <= opts.check_max:
                factors, tau = result
                check = f"{check_ratio(a, session.to_numpy(factors), tau):.2f}"
            matvec = stats.seconds / opts.repeat
            has_stats = name != SCIPY and stats.calls
            bandwidth = stats.bandwidth if has_stats else None
            cells += [f"{seconds:.4g}", f"{flop_count(n, dtype) / seconds / 1e9:.1f}",
                      "–" if scipy_time is None else f"{scipy_time / seconds:.2f}x",
                      f"{matvec:.3g}" if has_stats else "–",
                      f"{matvec / seconds:.0%}" if has_stats else "–",
                      f"{bandwidth / 1e9:.0f}" if has_stats else "–",
                      f"{bandwidth / copy_bw:.0%}" if has_stats and copy_bw
                      and backend == "cuda" else "–",
                      check, ""]
            session.emit(row(cells))
            result = None
            session.free_device_pool()


def hessenberg_contenders(session, a, names):
    """For each implementation of `names`, H alone and H with Q as harness Contenders (named
    "<implementation>|H" and "<implementation>|H and Q"); H and Q's last result is checked on
    the host at once (finish) for n <= --check-max, so that it need not stay alive."""
    opts, backend, n = session.opts, session.backend, a.shape[0]
    calls = {
        SCIPY: lambda x, calc_q, trace: scipy.linalg.hessenberg(x, calc_q=calc_q,
                                                                overwrite_a=True),
        CPU: lambda x, calc_q, trace: hybridla.hessenberg(x, calc_q=calc_q, backend=backend,
                                                          trace=trace, **session.options),
        GPU: lambda x, calc_q, trace: hybridla.hessenberg(x, calc_q=calc_q, overwrite_a=True,
                                                          trace=trace, **session.options),
    }

    def trace_path(name, calc_q, last):
        """--trace-dir's file for the last run of a hybridla contender (None: no trace)."""
        if not (opts.trace_dir and last and name != SCIPY):
            return None
        iface = "cpu" if name == CPU else "gpu"
        return os.path.join(opts.trace_dir,
                            f"hessenberg{'_q' if calc_q else ''}_{iface}_{n}.json")

    def check(result):
        if n > opts.check_max:
            return "–"
        h, q = (session.to_numpy(x) for x in result)
        return f"{hessenberg_ratio(a, h, q):.2f}"

    contenders = []
    for name in names:
        sync = session.sync if name != SCIPY else None
        for calc_q in (False, True):
            contenders.append(harness.Contender(
                f"{name}|{'H and Q' if calc_q else 'H'}",
                lambda x, last, name=name, calc_q=calc_q: calls[name](
                    x, calc_q, trace_path(name, calc_q, last)),
                setup=session.setup_for(name, a), sync=sync,
                finish=check if calc_q else (lambda result: None)))
    return contenders


def hessenberg_table(session):
    """The hessenberg table: H alone against H and Q, per implementation, and what Q adds."""
    opts = session.opts
    session.preamble(
        "hessenberg (H; H and Q)",
        "Every contender of a size timed in turn, round-robin (H, H and Q; SciPy, CPU, GPU "
        "interface). Q adds = (H and Q) / H - 1 (issue 34's target for the CPU interface: "
        "<= 30%); vs SciPy = SciPy's time / this one's; check = max(||A - Q H Q^H||_1 / "
        "(n ||A||_1 eps), ||I - Q^H Q||_1 / (n eps)).", Q_COLUMNS)
    warm = test_matrix(256, session.dtype, opts.seed, opts.order)
    # compile, allocate, start the worker pools (Q's kernels and plans too)
    harness.alternate(hessenberg_contenders(session, warm, session.implementations()), 1)

    for n in sorted(set(opts.sizes)):
        a = session.matrix(n)
        names = session.implementations(n)
        log(f"n={n}: " + ", ".join(names) + "; H, then H and Q, in turn")
        measured = harness.alternate(hessenberg_contenders(session, a, names), opts.repeat)
        session.free_device_pool()
        scipy_seconds = {kind: getattr(measured.get(f"{SCIPY}|{kind}"), "seconds", None)
                         for kind in ("H", "H and Q")}
        for name in names:
            h, hq = measured[f"{name}|H"], measured[f"{name}|H and Q"]
            if h.seconds is None or hq.seconds is None:
                session.emit(row([n, name] + ["n/a"] * 7 + [str(h.error or hq.error)[:160]]))
                continue
            spread = "; ".join(f"{min(m.times):.3g}-{max(m.times):.3g}" for m in (h, hq))
            session.emit(row([
                n, name, f"{h.seconds:.4g}", f"{hq.seconds:.4g}",
                f"{hq.seconds / h.seconds - 1:.0%}",
                report.ratio(scipy_seconds["H"], h.seconds),
                report.ratio(scipy_seconds["H and Q"], hq.seconds),
                spread, hq.result, ""]))


def main(argv=None) -> int:
    opts = parse_args(argv)
    session = Session(opts, argv)
    try:
        if "gehrd" in opts.tables:
            gehrd_table(session)
        if "hessenberg" in opts.tables:
            hessenberg_table(session)
    finally:
        session.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
