"""The `hybridla` command (also `python -m hybridla`).

    hybridla demo                 factor a generated matrix on the best backend: table + trace
    hybridla factor A.npy         LU of a matrix from a .npy file (--nb --lookahead --panel --trace)
    hybridla trace RUN.json       render a trace: Gantt PNG next to it, and the overlap summary
    hybridla info                 versions, backends, device, configuration and its sources
    hybridla bench ...            benchmarks against cuSOLVER, MAGMA (PyTorch) and scipy
    hybridla tune                 measure this machine's rates for the cost model into a tuning file

Exit status: 0 done; 1 the work failed (a singular matrix is only a warning, as in scipy);
2 a usage error: a bad option, an input file that is missing or holds no matrix, an output path
that cannot be written, a backend that is not available here. `hybridla COMMAND --help` for
each command's options; -v shows hybridla's decisions (backend, plan) on stderr, -vv also the
traceback of an error.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import logging
import os
import shlex
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from . import __version__
from . import backend as backends
from . import config
from .linalg import LinAlgError, lu_factor
from .scheduler.trace import Trace, render, run_metadata

USAGE, FAILED = 2, 1


class CommandError(Exception):
    """One line for stderr and the exit status: a problem the user can fix, not a bug."""

    def __init__(self, message, status=USAGE):
        super().__init__(message)
        self.status = status


class _Parser(argparse.ArgumentParser):
    """argparse whose usage errors are one line on stderr (and exit status 2)."""

    def error(self, message):
        self.exit(USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


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


# -- checks before any work -----------------------------------------------------------------

def _writable(path, what, option) -> Path:
    """`path` as a Path, if a file can be written there; else a CommandError naming `option`."""
    path = Path(path)
    parent = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise CommandError(f"{option} {path}: is a directory; give a file name for the {what}")
    if not parent.is_dir():
        raise CommandError(f"{option} {path}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise CommandError(f"{option} {path}: cannot write the {what} there (permission denied)")
    return path


def _backend_name(args) -> str:
    """The backend the command runs on ("auto" resolved), or a CommandError saying why not."""
    try:
        return backends.resolve_name(args.backend or config.get("backend"))
    except (RuntimeError, ValueError) as exc:
        hint = (f"; for GPU support: {backends.CUDA_INSTALL_HINT}"
                if "not importable" in str(exc) else "")
        raise CommandError(f"{exc}{hint}") from None


def _load_matrix(file) -> np.ndarray:
    """The matrix in a .npy file, or a CommandError that says what the file is instead."""
    path = Path(file)
    if not path.exists():
        raise CommandError(f"{file}: no such file")
    if path.is_dir():
        raise CommandError(f"{file}: is a directory, not a .npy file")
    try:
        with open(path, "rb") as f:
            magic = f.read(6)
        if magic.startswith(b"PK\x03\x04"):  # a zip: np.savez's archive
            with np.load(path, allow_pickle=False) as archive:
                names = ", ".join(archive.files) or "none"
            raise CommandError(f"{file}: is an .npz archive (arrays: {names}), not a .npy "
                               f"file; save one matrix with numpy.save('A.npy', a)")
        if magic != b"\x93NUMPY":
            raise CommandError(f"{file}: is not a .npy file (a text or other file); save the "
                               f"matrix with numpy.save('A.npy', a)")
        data = np.load(path, allow_pickle=False)
    except PermissionError:
        raise CommandError(f"{file}: permission denied") from None
    except (ValueError, OSError, EOFError) as exc:
        what = ("holds Python objects, which factor does not load (no pickles)"
                if "pickle" in str(exc) else f"is not a readable .npy file ({exc})")
        raise CommandError(f"{file}: {what}") from None
    if data.ndim != 2:
        raise CommandError(f"{file} holds a {data.ndim}-D array of shape {data.shape}, not a "
                           f"matrix")
    if data.size == 0:
        raise CommandError(f"{file} holds an empty {data.shape[0]} x {data.shape[1]} matrix: "
                           f"nothing to factor")
    if data.dtype.kind not in "biufc":
        raise CommandError(f"{file} holds a matrix of dtype {data.dtype}, not numbers")
    return data


# -- running and reporting --------------------------------------------------------------------

def _say(args, *lines):
    if not args.quiet:
        for line in lines:
            print(line)


def _timed_lu_factor(a, args, trace_path):
    """(seconds, (lu, piv)) of lu_factor on an F-ordered copy of `a`, the copy not timed."""
    work = np.array(a, order="F")
    t0 = time.perf_counter()
    try:
        factors = lu_factor(work, overwrite_a=True, backend=args.backend, nb=args.nb,
                            lookahead=args.lookahead, panel=args.panel,
                            trace=None if trace_path is None else str(trace_path),
                            progress=args.progress)
    except (ValueError, TypeError) as exc:  # the matrix's dtype, a configured value (-vv: where)
        if args.verbose >= 2:
            raise
        raise CommandError(str(exc)) from None
    return time.perf_counter() - t0, factors


def _plan_of(a_shape, dtype, args):
    """The plan lu_factor made for these options (the same resolution: call options over the
    configuration, "auto" block sizes from the device's tuning entry)."""
    from .scheduler.plan import make_plan
    return make_plan(backends.get_backend(args.backend), a_shape[0], a_shape[1], dtype,
                     routine="lu", nb=args.nb, lookahead=args.lookahead, panel=args.panel)


def _factor_and_report(a, args, label, first_call=False):
    """Factor `a`, time it, and print the table (and the trace's summary). `first_call`: a
    factorization before the reported one, shown in a row of its own: a process's first call
    also compiles the kernels, creates the cuBLAS and cuSOLVER handles and allocates device and
    pinned memory, so it takes longer than the next (perf/RESULTS.md, "The CPU interface's
    finiteness check, and the demo"). The trace (a temporary one when none is asked for) says
    where the panels ran; it gets the run's metadata."""
    flops = 2 / 3 * min(a.shape) ** 3 if a.shape[0] == a.shape[1] else None
    rows = []
    if first_call:
        seconds, (lu, piv) = _timed_lu_factor(a, args, None)
        rows.append(("hybridla, 1st", args.backend, seconds, getrf_ratio(a.astype(lu.dtype),
                                                                          lu, piv)))
    with tempfile.TemporaryDirectory(prefix="hybridla-") as scratch:
        trace_path = Path(args.trace) if args.trace else Path(scratch) / "run.trace.json"
        seconds, (lu, piv) = _timed_lu_factor(a, args, trace_path)
        plan = _plan_of(a.shape, lu.dtype, args)
        trace = Trace.load(trace_path)
        metadata = trace.full_metadata(run_metadata(plan, "getrf", a.shape, lu.dtype))
        if args.trace:
            trace.to_chrome(trace_path, metadata=metadata)
    rows.append(("hybridla", args.backend, seconds, getrf_ratio(a.astype(lu.dtype), lu, piv)))
    if args.compare_scipy:
        import scipy.linalg
        t0 = time.perf_counter()
        lu2, piv2 = scipy.linalg.lu_factor(a)
        rows.append(("scipy", "LAPACK", time.perf_counter() - t0,
                     getrf_ratio(a.astype(lu2.dtype), lu2, piv2)))
    placed = ", ".join(f"{k} {v}" for k, v in metadata.get("panels", {}).items()) or "none"
    lines = [f"\n{label}: {a.shape[0]} x {a.shape[1]} {a.dtype}",
             f"plan: nb {plan.nb}, look-ahead {plan.lookahead}, panel {plan.panel} "
             f"(panels ran on: {placed}), backend {args.backend} ({plan.backend.device_name})",
             f"{'implementation':16} {'backend':8} {'time s':>9} {'TFLOP/s':>8} {'LU ratio':>9} "
             f"{'speedup':>8}"]
    for name, backend, t, ratio in rows:
        rate = f"{flops / t / 1e12:8.3f}" if flops else f"{'n/a':>8}"
        speedup = f"{rows[-1][2] / t:8.2f}" if args.compare_scipy else f"{'-':>8}"
        lines.append(f"{name:16} {backend:8} {t:9.3f} {rate} {ratio:9.2e} {speedup}")
    lines.append("LU ratio: LAPACK's ||PA - LU|| / (n ||A|| eps), estimated with a random vector; "
                 "< 30 passes")
    if args.compare_scipy:
        lines.append("speedup: scipy.linalg.lu_factor's time / the row's time (> 1: faster than "
                     "scipy)")
    if first_call:
        lines.append("hybridla, 1st: the process's first call (on a GPU it also compiles the "
                     "kernels and makes the handles and memory)")
    if args.trace:
        png = Path(args.trace).with_suffix(".png")
        summary = render(args.trace, png)
        lines += [f"\ntrace: {args.trace} (open in https://ui.perfetto.dev), Gantt: {png}",
                  summary]
    _say(args, *lines)
    return lu, piv


def _engine_args(args):
    """Resolve what demo and factor share: the backend, the progress bar, writable outputs."""
    args.backend = _backend_name(args)
    args.progress = False if args.quiet or args.no_progress else sys.stderr.isatty()
    if args.trace:
        _writable(args.trace, "trace", "--trace")
        _writable(Path(args.trace).with_suffix(".png"), "Gantt chart", "--trace")


def cmd_demo(args):
    args.trace = args.trace or "hybridla-demo.trace.json"
    _engine_args(args)
    name = args.backend
    n = args.n or (16384 if name == "cuda" else 2048)
    _say(args, f"hybridla demo on backend {name!r} ({backends.get_backend(name).device_name})")
    a = np.random.default_rng(0).standard_normal((n, n))
    args.compare_scipy = n <= 16384
    _factor_and_report(a, args, "demo: random matrix", first_call=True)


def cmd_factor(args):
    if args.output:
        if Path(args.output).is_dir():
            raise CommandError(f"--output {args.output}: is a directory; give a file name for "
                               f"the factors (F.npz)")
        _writable(args.output if str(args.output).endswith(".npz") else f"{args.output}.npz",
                  "factors", "--output")
    _engine_args(args)
    a = _load_matrix(args.file)
    args.compare_scipy = args.scipy
    lu, piv = _factor_and_report(a, args, args.file)
    if args.output:
        output = args.output if str(args.output).endswith(".npz") else f"{args.output}.npz"
        try:
            np.savez(output, lu=lu, piv=piv)
        except OSError as exc:
            raise CommandError(f"--output {output}: {exc.strerror or exc}", FAILED) from None
        _say(args, f"factors saved to {output} (arrays lu and piv, as scipy.linalg.lu_factor's)")


def cmd_trace(args):
    path = Path(args.file)
    if not path.is_file():
        raise CommandError(f"{args.file}: no such file" if not path.exists()
                           else f"{args.file}: is a directory, not a trace JSON")
    png = Path(args.png) if args.png else path.with_suffix(".png")
    _writable(png, "Gantt chart", "--png" if args.png else "Gantt chart")
    try:
        summary = render(path, png)
    except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError) as exc:
        raise CommandError(f"{args.file}: not a Chrome trace JSON as hybridla writes "
                           f"({exc.__class__.__name__}: {exc})") from None
    print(summary)
    print(f"Gantt: {png}")


def cmd_info(args):
    from .info import collect, format_text
    info = collect()
    if args.json:
        import json
        print(json.dumps(info, indent=2, default=str))
    else:
        print(format_text(info))


def cmd_bench(args):
    """The factorization benchmark of hybridla.bench (perf/bench.py in a source checkout runs
    the same), its options in args.rest; without a GPU its sizes default to a small one."""
    from .bench import runner
    status = runner.main(args.rest, prog="hybridla bench", small_without_gpu=True)
    if status:
        raise SystemExit(status)


def cmd_tune(args):
    """Measure the rates the panel-placement cost model uses, and write them as this device's
    tuning entry (with date and command) to the tuning file that config reads."""
    import yaml

    from .tune import measure_rates
    path = config.TUNING_DIR / "tuning.yaml"
    if path.parent.exists():
        _writable(path, "tuning file", "tuning file")
    name = _backend_name(args)
    ops = backends.get_backend(name)
    entry = measure_rates(ops, args.n, args.nb)
    entry["provenance"] = (f"measured by `{shlex.join(['hybridla'] + sys.argv[1:])}` on "
                           f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC")
    try:
        os.makedirs(path.parent, exist_ok=True)
        existing = yaml.safe_load(path.read_text()) if path.exists() else {}
        existing = existing or {}
        existing.setdefault("tuning", {})[ops.device_name] = entry
        path.write_text(yaml.safe_dump(existing, sort_keys=False))
    except OSError as exc:
        raise CommandError(f"tuning file {path}: {exc.strerror or exc}", FAILED) from None
    _say(args, yaml.safe_dump({ops.device_name: entry}, sort_keys=False),
         f"written to {path}")


# -- options ----------------------------------------------------------------------------------

def _positive(text, minimum=1):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
    return value


def _nb(text):
    if text == "auto":
        return text
    try:
        return _positive(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected a positive integer or 'auto', got "
                                         f"{text!r}") from None


def _output_options(p):
    p.add_argument("-q", "--quiet", action="store_true",
                   help="print nothing but errors (files are still written); implies "
                        "--no-progress")
    p.add_argument("--no-progress", action="store_true",
                   help="no progress bar (the default shows one when stderr is a terminal)")


def _engine_options(p, trace_help):
    p.add_argument("--backend", choices=["auto", "host", "cuda"], default=None,
                   help="where to run: host (NumPy/SciPy on the CPU), cuda (the GPU), auto (the "
                        "GPU where usable; default: config 'backend')")
    p.add_argument("--nb", type=_nb, default=None, metavar="NB|auto",
                   help="block size (panel width): a positive integer, or auto for the device's "
                        "tuning entry (default: config lu.nb)")
    p.add_argument("--lookahead", type=lambda s: _positive(s, 0), default=None, metavar="K",
                   help="panels factored ahead of the trailing update, >= 0 (default: config "
                        "lu.lookahead)")
    p.add_argument("--panel", choices=["cpu", "gpu", "auto"], default=None,
                   help="where panels are factored; auto: a cost model decides per step "
                        "(default: config lu.panel)")
    p.add_argument("--trace", default=None, metavar="RUN.json", help=trace_help)
    _output_options(p)


def make_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="hybridla", description=__doc__,
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"hybridla {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="log hybridla's decisions to stderr (-v: INFO, -vv: DEBUG: the plan "
                             "of each factorization, and the traceback of an error)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    parser.commands = sub.choices  # {name: its parser}, for main's errors

    p = sub.add_parser("demo", help="the main job: factor a generated matrix on the best backend",
                       description="LU of a random n x n matrix: the process's first call, a "
                                   "second call (traced) and scipy.linalg.lu_factor, in a table; "
                                   "writes the second call's Chrome trace and Gantt chart.")
    p.add_argument("--n", type=_positive, default=None, metavar="N",
                   help="matrix order (default: 16384 on a GPU, 2048 on the CPU)")
    _engine_options(p, "write the second call's Chrome trace JSON here, its Gantt PNG next to "
                       "it (default: hybridla-demo.trace.json)")
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("factor", help="LU of a matrix stored in a .npy file",
                       description="LU with partial pivoting of the matrix in a .npy file "
                                   "(numpy.save): time, TFLOP/s, LAPACK's test ratio, the plan.")
    p.add_argument("file", metavar="A.npy", help="the matrix, as written by numpy.save")
    p.add_argument("--output", metavar="F.npz",
                   help="save the factors lu and piv (scipy.linalg.lu_factor's form) to this "
                        ".npz")
    p.add_argument("--scipy", action="store_true", help="also time scipy.linalg.lu_factor")
    _engine_options(p, "write the run's Chrome trace JSON here, its Gantt PNG next to it")
    p.set_defaults(func=cmd_factor)

    p = sub.add_parser("trace", help="render a trace JSON: Gantt PNG and summary",
                       description="Gantt chart and summary (wall time, busy time per lane, GPU "
                                   "idle, CPU-GPU overlap, TFLOP/s) of a Chrome trace JSON "
                                   "that hybridla wrote.")
    p.add_argument("file", metavar="RUN.json", help="the trace (a factorization's trace=...)")
    p.add_argument("--png", default=None, metavar="CHART.png",
                   help="where to write the chart (.png, or .svg; default: next to the trace)")
    p.set_defaults(func=cmd_trace)

    p = sub.add_parser("info", help="versions, backends, device, configuration and its sources",
                       description="What hybridla runs with here (hybridla.show_config()).")
    p.add_argument("--json", action="store_true", help="the same information as JSON")
    p.set_defaults(func=cmd_info)

    p = sub.add_parser("bench", add_help=False,
                       help="benchmark the factorizations against cuSOLVER, MAGMA (PyTorch) and "
                            "scipy (its options: hybridla bench --help)")
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser("tune", help="measure this machine's rates into the tuning file",
                       description=f"Measure the rates the panel-placement cost model uses and "
                                   f"write them as this device's entry of "
                                   f"{config.TUNING_DIR / 'tuning.yaml'} (HYBRIDLA_CONFIG_DIR).")
    p.add_argument("--backend", choices=["auto", "host", "cuda"], default=None,
                   help="the backend to measure (default: config 'backend')")
    p.add_argument("--n", type=_positive, default=16384,
                   help="rows of the measured panel and order of the update (default 16384)")
    p.add_argument("--nb", type=_positive, default=512,
                   help="width of the measured panel (default 512)")
    p.add_argument("-q", "--quiet", action="store_true", help="print nothing but errors")
    p.set_defaults(func=cmd_tune)
    return parser


@contextlib.contextmanager
def _logging_to_stderr(verbose: int):
    """The command is an application: it may show the library's log on stderr (-v, -vv), for
    the command's duration (main() called from Python leaves the logger as it found it)."""
    if verbose <= 0:
        yield
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(name)s: %(levelname)s: %(message)s"))
    log = logging.getLogger("hybridla")
    level = log.level
    log.addHandler(handler)
    log.setLevel(logging.DEBUG if verbose >= 2 else logging.INFO)
    try:
        yield
    finally:
        log.removeHandler(handler)
        log.setLevel(level)


def main(argv=None):
    parser = make_parser()
    args, extra = parser.parse_known_args(argv)
    if args.command == "bench":
        args.rest = extra
    elif extra:
        parser.commands[args.command].error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        with _logging_to_stderr(args.verbose):
            args.func(args)
    except CommandError as exc:
        if args.verbose >= 2:
            raise
        print(f"hybridla {args.command}: error: {exc}", file=sys.stderr)
        raise SystemExit(exc.status) from None
    except (LinAlgError, MemoryError) as exc:
        if args.verbose >= 2:
            raise
        print(f"hybridla {args.command}: failed: {exc.__class__.__name__}: {exc}",
              file=sys.stderr)
        raise SystemExit(FAILED) from None
    except KeyboardInterrupt:
        print(f"hybridla {args.command}: interrupted", file=sys.stderr)
        raise SystemExit(130) from None


if __name__ == "__main__":
    main()
