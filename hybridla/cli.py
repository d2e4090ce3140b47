"""The `hybridla` command (also `python -m hybridla`).

    hybridla demo                 factor a generated matrix on the best backend: table + trace
    hybridla factor A.npy         LU of a matrix from a .npy file (--nb --lookahead --panel --trace)
    hybridla trace RUN.json       render a trace: Gantt PNG next to it, and the overlap summary
    hybridla bench ...            the benchmarks in perf/ (arguments passed through)
    hybridla tune                 measure this machine's rates for the cost model into a tuning file
"""
from __future__ import annotations

import argparse
import datetime
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from . import backend as backends
from . import config
from .linalg import lu_factor
from .scheduler.trace import Trace, render


def getrf_ratio(a, lu, piv) -> float:
    """LAPACK's test ratio ||P A - L U||_1 / (n ||A||_1 eps), by a random probe vector for speed:
    ||P A x - L (U x)||_1 / (n ||A||_1 ||x||_1 eps) (a lower bound of the matrix ratio, tight in
    practice for random x)."""
    m, n = a.shape
    k = min(m, n)
    x = np.random.default_rng(1).standard_normal(n).astype(a.dtype)
    pa_x = a @ x
    for i, p in enumerate(piv):  # the swap sequence, in order
        pa_x[[i, p]] = pa_x[[p, i]]
    u_x = np.triu(lu[:k, :]) @ x
    lu_x = np.tril(lu[:, :k], -1) @ u_x + np.concatenate([u_x, np.zeros(m - k, a.dtype)])
    eps = np.finfo(a.dtype).eps
    return float(np.linalg.norm(pa_x - lu_x, 1)
                 / (max(m, n) * np.linalg.norm(a, 1) * np.linalg.norm(x, 1) * eps))


def _timed_lu_factor(a, args, trace_path):
    """(seconds, (lu, piv)) of lu_factor on an F-ordered copy of `a`, the copy not timed."""
    work = np.array(a, order="F")
    t0 = time.perf_counter()
    factors = lu_factor(work, overwrite_a=True, backend=args.backend, nb=args.nb,
                        lookahead=args.lookahead, panel=args.panel, trace=trace_path,
                        progress=True)
    return time.perf_counter() - t0, factors


def _factor_and_report(a, args, label, first_call=False):
    """Factor `a`, time it, and print the table (and the trace's summary). `first_call`: a
    factorization before the reported one, shown in a row of its own: a process's first call
    also compiles the kernels, creates the cuBLAS and cuSOLVER handles and allocates device and
    pinned memory (on the H100, n = 16384: 0.79 s, then 0.28 s; perf/RESULTS.md)."""
    trace_path = args.trace
    flops = 2 / 3 * min(a.shape) ** 3 if a.shape[0] == a.shape[1] else None
    where = args.backend or config.get("backend")
    rows = []
    if first_call:
        seconds, (lu, piv) = _timed_lu_factor(a, args, None)
        rows.append(("hybridla, 1st", where, seconds, getrf_ratio(a, lu, piv)))
    seconds, (lu, piv) = _timed_lu_factor(a, args, trace_path)
    rows.append(("hybridla", where, seconds, getrf_ratio(a, lu, piv)))
    if args.compare_scipy:
        import scipy.linalg
        t0 = time.perf_counter()
        lu2, piv2 = scipy.linalg.lu_factor(a)
        rows.append(("scipy", "LAPACK", time.perf_counter() - t0, getrf_ratio(a, lu2, piv2)))
    print(f"\n{label}: {a.shape[0]} x {a.shape[1]} {a.dtype}")
    print(f"{'implementation':16} {'backend':8} {'time s':>9} {'TFLOP/s':>8} {'ratio':>9} "
          f"{'vs scipy':>8}")
    for name, backend, t, ratio in rows:
        rate = f"{flops / t / 1e12:8.3f}" if flops else "     n/a"
        speedup = rows[-1][2] / t if args.compare_scipy else float("nan")
        print(f"{name:16} {backend:8} {t:9.3f} {rate} {ratio:9.2e} {speedup:8.2f}")
    print("ratio: LAPACK's ||PA - LU|| / (n ||A|| eps), estimated with a random vector; < 30 passes")
    if first_call:
        print("hybridla, 1st: the process's first call (on a GPU it also compiles the kernels and "
              "makes the handles and memory)")
    if trace_path:
        png = str(Path(trace_path).with_suffix(".png"))
        print(f"\ntrace: {trace_path} (open in https://ui.perfetto.dev), Gantt: {png}")
        print(render(trace_path, png))
    return lu, piv


def cmd_demo(args):
    name = backends.resolve_name(args.backend or config.get("backend"))
    n = args.n or (16384 if name == "cuda" else 2048)
    print(f"hybridla demo on backend {name!r} ({backends.get_backend(name).device_name})")
    a = np.random.default_rng(0).standard_normal((n, n))
    args.backend = name
    args.trace = args.trace or "hybridla-demo.trace.json"
    args.compare_scipy = n <= 16384
    _factor_and_report(a, args, "demo: random matrix", first_call=True)


def cmd_factor(args):
    a = np.load(args.file)
    if a.ndim != 2:
        raise SystemExit(f"hybridla factor: {args.file} holds a {a.ndim}-D array, not a matrix")
    args.compare_scipy = args.scipy
    lu, piv = _factor_and_report(a, args, args.file)
    if args.output:
        np.savez(args.output, lu=lu, piv=piv)
        print(f"factors saved to {args.output}")


def cmd_trace(args):
    print(render(args.file, args.png))
    print(f"Gantt: {args.png or Path(args.file).with_suffix('.png')}")


def cmd_bench(args):
    bench = Path(__file__).resolve().parents[1] / "perf" / "bench.py"
    if not bench.exists():
        raise SystemExit("hybridla bench: perf/bench.py is part of the source checkout; run it there")
    raise SystemExit(subprocess.call([sys.executable, str(bench), *args.rest]))


def cmd_tune(args):
    """Measure the rates the panel-placement cost model uses, and write them as this device's
    tuning entry (with date and command) to the tuning file that config reads."""
    from .tune import measure_rates
    name = backends.resolve_name(args.backend or config.get("backend"))
    ops = backends.get_backend(name)
    entry = measure_rates(ops, args.n, args.nb)
    entry["provenance"] = (f"measured by `{shlex.join(['hybridla'] + sys.argv[1:])}` on "
                           f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC")
    import yaml
    path = config.TUNING_DIR / "tuning.yaml"
    os.makedirs(path.parent, exist_ok=True)
    existing = yaml.safe_load(path.read_text()) if path.exists() else {}
    existing = existing or {}
    existing.setdefault("tuning", {})[ops.device_name] = entry
    path.write_text(yaml.safe_dump(existing, sort_keys=False))
    print(yaml.safe_dump({ops.device_name: entry}, sort_keys=False))
    print(f"written to {path}")


def _engine_options(p):
    p.add_argument("--backend", choices=["auto", "host", "cuda"], default=None)
    p.add_argument("--nb", type=lambda s: s if s == "auto" else int(s), default=None)
    p.add_argument("--lookahead", type=int, default=None)
    p.add_argument("--panel", choices=["cpu", "gpu", "auto"], default=None)
    p.add_argument("--trace", default=None, help="write the run's Chrome trace JSON here")


def main(argv=None):
    parser = argparse.ArgumentParser(prog="hybridla", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("demo", help="factor a generated matrix on the best backend")
    p.add_argument("--n", type=int, default=None)
    _engine_options(p)
    p.set_defaults(func=cmd_demo)
    p = sub.add_parser("factor", help="LU of a matrix stored in a .npy file")
    p.add_argument("file")
    p.add_argument("--output", help="save lu and piv to this .npz")
    p.add_argument("--scipy", action="store_true", help="also time scipy.linalg.lu_factor")
    _engine_options(p)
    p.set_defaults(func=cmd_factor)
    p = sub.add_parser("trace", help="render a trace JSON: Gantt PNG and summary")
    p.add_argument("file")
    p.add_argument("--png", default=None)
    p.set_defaults(func=cmd_trace)
    p = sub.add_parser("bench", help="run perf/bench.py (arguments passed through)")
    p.add_argument("rest", nargs=argparse.REMAINDER)
    p.set_defaults(func=cmd_bench)
    p = sub.add_parser("tune", help="measure this machine's rates into the tuning file")
    p.add_argument("--backend", choices=["auto", "host", "cuda"], default=None)
    p.add_argument("--n", type=int, default=16384)
    p.add_argument("--nb", type=int, default=512)
    p.set_defaults(func=cmd_tune)
    args = parser.parse_args(argv)
    args.func(args)


if __name__ == "__main__":
    main()
