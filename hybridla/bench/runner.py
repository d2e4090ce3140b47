"""Benchmark of hybridla's factorizations against cuSOLVER, MAGMA (through PyTorch) and SciPy:
``hybridla bench`` (installed), or ``python3 perf/bench.py`` in a source checkout.

    hybridla bench --routine getrf --sizes 16384 32768 --dtype float64 \
        [--nb N] [--lookahead L] [--panel auto] [--repeat 3] [--interfaces gpu,cpu] \
        [--baselines cusolver,magma,scipy] [--scipy-max 16384] [--trace-dir DIR] [--out FILE.md]

    hybridla bench --routine potrf --sizes 16384 32768
    hybridla bench --routine geqrf,geqlf,gelqf --sizes 16384

--routine takes one routine or a comma list of them: getrf (LU with partial pivoting),
potrf (Cholesky, lower), geqrf (QR), geqlf (QL), gelqf (LQ), all square (m = n), in all
four dtypes.  Routines of one run are timed in that (table) order, one after another at each
size, on the same matrix where they share one: one process, one table.

Test matrices (F order, fixed seed, one per size and kind, shared by the routines of a run):

  getrf, geqrf, geqlf, gelqf   float64 standard normals (real and imaginary parts for
                               complex dtypes), generated on the host
  potrf                        Hermitian positive definite A = G G^H / n + I (G as above),
                               built in double precision on the GPU with CuPy where one is
                               present, else on the host with NumPy (O(n^3): slow for large n
                               without a GPU); the two generators draw different numbers

Every selected implementation is timed on it (xxxx = the routine's cuSOLVER/LAPACK call):

  cuSOLVER (device)     xxxx of nvmath.bindings.cusolverDn (getrf, potrf lower, geqrf) on a
                        CuPy array already on the device (upload outside the timed region)
  cuSOLVER+transfers    from the pageable NumPy array: cupy.asarray upload (staged through
                        CuPy's pinned pool, primed before the clock) + xxxx + download of the
                        factors (and pivots / tau) into host memory, all timed
  hybridla GPU iface    hybridla.lu_factor / cho_factor(lower=True) / geqrf / geqlf / gelqf
                        on the CuPy array, overwrite_a=True, backend="cuda" (upload outside
                        the timed region; the factors stay on the device)
  hybridla CPU iface    the same call on the NumPy array, backend="cuda" (or "host" without a
                        GPU); the factors are in host memory when the clock stops
  MAGMA (torch)         torch.linalg.lu_factor / torch.linalg.cholesky_ex / torch.geqrf on a
                        CUDA tensor with torch.backends.cuda.preferred_linalg_library("magma")
  SciPy                 scipy.linalg.lu_factor / cho_factor(lower=True) / qr(mode="raw") on the
                        host (only for n <= --scipy-max)

cuSOLVER, MAGMA (through torch) and SciPy have no QL or LQ: for geqlf and gelqf their rows
time geqrf on the same matrix ("cuSOLVER geqrf (device)", "SciPy geqrf (host)", ...; not
repeated when geqrf is in the same run), the cuSOLVER ratios are against cuSOLVER's geqrf,
and a column "vs our geqrf" gives hybridla's geqrf time through the same interface divided
by this time (issue 3 asks geqlf and gelqf to be within 1.2x of our geqrf: >= 0.83x here).
A hybridla function that does not exist (yet) gives a row "skipped: hybridla.qr not
available"; an implementation that cannot run on this machine (no GPU, no torch) is left
out with a message on stderr.

Each implementation runs once untimed at the smallest size (warm-up), then --repeat times
per size; the median is reported.  GPU timings synchronize the device before reading the
clock.  Every result is checked outside the timed region (checks.py: LAPACK's test ratios,
dense for small n, random-vector estimates marked ~ above); the table's header gives the
formulas.  Rows are printed as markdown as they come (a "routine" column when a run has
several routines); --out appends the table to a file; --trace-dir keeps hybridla's trace of
each last repetition as DIR/<routine>_<gpu|cpu>_<n>.json.

Without a GPU only the hybridla CPU interface (host backend) and SciPy rows are produced, and
one line on stderr says what was left out: ``hybridla bench`` then runs n = 1024 unless --sizes
says otherwise (``python3 perf/bench.py`` keeps 4096).
"""
from __future__ import annotations

import argparse
import gc
import os
import sys
from typing import Optional

import numpy as np

import hybridla

from . import baselines, harness
from .checks import Case
from .factorizations import ROUTINES, Impl, Routine, select_implementations

DTYPES = ("float32", "float64", "complex64", "complex128")
INTERFACES = ("gpu", "cpu")
BASELINES = ("cusolver", "magma", "scipy")
DEFAULT_SIZES = (4096,)
SMALL_SIZES = (1024,)     # hybridla bench's default on a machine without a GPU

COLUMNS = ("n", "implementation", "time (s)", "TFLOP/s", "backward error",
           "vs cuSOLVER", "vs cuSOLVER+transfers", "note")
ROUTINE_COLUMN = "routine"            # after "n", when a run has several routines
OUR_REFERENCE_COLUMN = "vs our {}"    # before "note", when a routine stands on another

log = harness.logger("bench")


class Table(harness.MarkdownTable):
    """The markdown table of one run. The columns are COLUMNS, plus "routine" when the run has
    several routines and "vs our geqrf" when one of them (geqlf, gelqf) is measured against
    our geqrf."""

    def __init__(self, path: Optional[str], routines: list[Routine]):
        self.routines = routines
        self.multi = len(routines) > 1
        self.references = sorted({r.baseline for r in routines if r.baseline})
        columns = list(COLUMNS)
        if self.multi:
            columns.insert(1, ROUTINE_COLUMN)
        for ref in self.references:
            columns.insert(len(columns) - 1, OUR_REFERENCE_COLUMN.format(ref))
        super().__init__(path, columns, right=("n", "time (s)", "TFLOP/s"))

    def row(self, n: int, r: Routine, label: str, t=None, flop=None, berr=None,
            estimated=False, bases=(None, None), ours=None, note="") -> str:
        """One row; bases: the (cuSOLVER, cuSOLVER+transfers) times, ours: our time of
        r.baseline through the same interface (or None)."""
        cells = [str(n)] + ([r.name] if self.multi else []) + [
            label, harness.fmt(t, ".4g"), harness.rate(flop, t),
            harness.error_cell(berr, estimated), *(harness.ratio(b, t) for b in bases)]
        cells += [harness.ratio(ours if r.baseline == ref else None, t)
                  for ref in self.references]
        cells.append(note.replace("|", "/"))
        return self.format_row(cells)

    def begin(self, opts: argparse.Namespace, command: str) -> None:
        names = [r.name for r in self.routines]
        errors = " ".join((f"{r.name}: " if self.multi else "") + r.error_text
                          for r in self.routines)
        notes = [
            f"hybridla: {hybridla.__file__}; numpy {np.__version__}; "
            f"repeat {opts.repeat} (median), warm-up once at the smallest size; "
            f"TFLOP/s from LAWN 41 {', '.join(names)} flops.",
            f"Backward error {errors} "
            f"Ratios are cuSOLVER time / this time (> 1: this is faster).",
        ]
        for ref in self.references:
            stand = ", ".join(r.name for r in self.routines if r.baseline == ref)
            notes.append(
                f"cuSOLVER, MAGMA and SciPy have no {stand}: their rows for {stand} time "
                f"{ref} on the same matrix (shown once per size when {ref} is in the run), "
                f"and the cuSOLVER ratios of {stand} are against cuSOLVER's {ref}. "
                f"\"vs our {ref}\" = hybridla's {ref} time through the same interface / "
                f"this time (\"within 1.2x of our {ref}\" is >= 0.83x).")
        self.start(f"{','.join(names)} {opts.dtype} on {harness.device_name()}, "
                   f"{harness.utc_now()}", command, notes)


# -- command line ------------------------------------------------------------------------------

def _nb(value: str):
    if value == "auto":
        return value
    try:
        nb = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--nb: an integer or 'auto', not {value!r}") from None
    if nb <= 0:
        raise argparse.ArgumentTypeError("--nb must be positive")
    return nb


def _word_list(allowed):
    def parse(value: str) -> list[str]:
        words = [w.strip() for w in value.split(",") if w.strip()]
        if words in (["none"], []):
            return []
        bad = [w for w in words if w not in allowed]
        if bad:
            raise argparse.ArgumentTypeError(
                f"unknown {', '.join(bad)}; choose from {', '.join(allowed)} (or 'none')")
        return words
    return parse


def _routine_list(value: str) -> list[str]:
    """A comma list of routine names, in table (run) order, each once."""
    words = {w.strip() for w in value.split(",") if w.strip()}
    bad = sorted(words - set(ROUTINES))
    if bad or not words:
        raise argparse.ArgumentTypeError(
            f"unknown routine {', '.join(bad) or repr(value)}; choose from "
            f"{', '.join(ROUTINES)} (or a comma list of them)")
    return [name for name in ROUTINES if name in words]


def positive_int(value: str) -> int:
    try:
        v = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {value!r}") from None
    if v <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, not {v}")
    return v


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line on stderr (and exit status 2), as the hybridla command's."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def parse_args(argv=None, prog: Optional[str] = None,
               sizes: tuple = DEFAULT_SIZES) -> argparse.Namespace:
    """The options; `prog` names the command in usage and errors, `sizes` is --sizes' default."""
    p = _Parser(
        prog=prog,
        description="Benchmark hybridla's factorizations against cuSOLVER, MAGMA and SciPy.",
        epilog="One markdown row per size and implementation: cuSOLVER (device), "
               "cuSOLVER+transfers (the CPU-interface baseline), hybridla GPU iface, hybridla "
               "CPU iface, MAGMA (torch), SciPy; time (median of --repeat after one warm-up), "
               "TFLOP/s (LAWN 41), backward error (LAPACK's test ratio, < 30 passes), ratios "
               "to both cuSOLVER rows. Without a GPU: hybridla's host backend and SciPy only.")
    p.add_argument("--routine", dest="routines", type=_routine_list, default="getrf",
                   metavar="|".join(ROUTINES),
                   help="one routine or a comma list (e.g. geqrf,geqlf,gelqf), run in "
                        "this order at each size")
    p.add_argument("--sizes", type=positive_int, nargs="+", default=list(sizes), metavar="N",
                   help=f"matrix orders (run in ascending order; default "
                        f"{' '.join(map(str, sizes))})")
    p.add_argument("--dtype", choices=DTYPES, default="float64", help="the matrices' dtype")
    p.add_argument("--nb", type=_nb, default=None, help="hybridla block size (int or auto)")
    p.add_argument("--lookahead", type=int, default=None, help="hybridla lookahead depth")
    p.add_argument("--panel", choices=("cpu", "gpu", "auto"), default=None,
                   help="where hybridla factors panels")
    p.add_argument("--repeat", type=positive_int, default=3, help="timed runs per size")
    p.add_argument("--interfaces", type=_word_list(INTERFACES), default=list(INTERFACES),
                   help="hybridla interfaces, comma separated: gpu,cpu")
    p.add_argument("--baselines", type=_word_list(BASELINES), default=list(BASELINES),
                   help="comma separated: cusolver (device and +transfers), magma, scipy")
    p.add_argument("--scipy-max", type=int, default=16384,
                   help="largest n for the (slow) SciPy baseline")
    p.add_argument("--seed", type=int, default=0, help="random matrix seed")
    p.add_argument("--trace-dir", default=None,
                   help="write hybridla's trace of the last repetition to "
                        "DIR/<routine>_<iface>_<n>.json")
    p.add_argument("--out", default=None, metavar="FILE.md",
                   help="append the table (with device, date, command) to this file")
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["--"]:        # `hybridla bench -- --routine ...` passes the "--" along
        argv = argv[1:]
    opts = p.parse_args(argv)
    if opts.lookahead is not None and opts.lookahead < 0:
        p.error("--lookahead must be >= 0")
    opts.routine = ",".join(opts.routines)
    return opts


# -- the run -----------------------------------------------------------------------------------

def run_one(name: str, impl: Impl, r: Routine, case: Case, table: Table,
            measured: dict) -> str:
    """Time one implementation for routine r at one size, check its result; return the row.

    measured maps (implementation, routine timed) to seconds at this size; this row's time
    is added before its ratios are computed.
    """
    c = impl.computes(r)
    label, note = impl.label_for(r), ""
    t = berr = None
    estimated = False
    outcome = None
    reason = impl.supports(c)
    if reason:
        log(f"n={case.n}: {c.name} {name}: {reason}")
        return table.row(case.n, r, label, note=reason)
    try:
        log(f"n={case.n}: {c.name} {name}")
        outcome = impl.run(case, c)
        t, label = outcome.time, impl.label_for(r, **outcome.label)
        notes = list(outcome.notes)
        try:
            berr, estimated = c.check(case, outcome.factors)
        except Exception as exc:
            notes.append(f"backward error failed: {type(exc).__name__}: {exc}")
        note = "; ".join(notes)
    except Exception as exc:
        note = f"{type(exc).__name__}: {exc}".splitlines()[0][:160]
        log(f"n={case.n}: {c.name} {name} failed: {note}")
    finally:
        outcome = None
        harness.release_device_memory()
    if t is not None:
        measured[(name, c.name)] = t
    ref = r.baseline or r.name
    bases = (measured.get(("cusolver", ref)), measured.get(("cusolver+transfers", ref)))
    ours = measured.get((name, r.baseline)) if impl.hybridla and r.baseline else None
    return table.row(case.n, r, label, t, c.flops(case.n, case.n, case.dtype), berr,
                     estimated, bases, ours, note)


def main(argv=None, prog: Optional[str] = None, small_without_gpu: bool = False) -> int:
    """Run the benchmark; 0 when it ran, 1 when nothing could. `prog` is the command's name
    ("hybridla bench"; None: perf/bench.py); `small_without_gpu`: --sizes defaults to
    SMALL_SIZES on a machine without a GPU."""
    small = small_without_gpu and harness.no_gpu_reason() is not None
    opts = parse_args(argv, prog, SMALL_SIZES if small else DEFAULT_SIZES)
    dtype = np.dtype(opts.dtype)
    routines = [ROUTINES[name] for name in opts.routines]
    if opts.trace_dir:
        os.makedirs(opts.trace_dir, exist_ok=True)
    command = harness.command_line(argv, prog or "perf/bench.py")
    impls = select_implementations(opts, log)
    if not impls:
        log("nothing to run")
        return 1
    table = Table(opts.out, routines)
    table.begin(opts, command)
    try:
        for i, n in enumerate(sorted(set(opts.sizes))):
            case = None
            measured: dict = {}
            attempted: set = set()       # (implementation, routine timed) at this size
            for r in routines:
                if case is None or case.kind != r.matrix:
                    case = None
                    gc.collect()
                    kind = "" if r.matrix == "general" else f"{r.matrix} "
                    log(f"n={n}: generating the {dtype} {kind}matrix "
                        f"({n * n * dtype.itemsize / 2**30:.2f} GiB)")
                    case = Case(n, dtype, opts, warmup=1 if i == 0 else 0, kind=r.matrix)
                for name, impl in impls:
                    key = (name, impl.computes(r).name)
                    if key in attempted:     # a stand-in already in an earlier routine's rows
                        continue
                    attempted.add(key)
                    limit = impl.max_n(opts)
                    if limit is not None and n > limit:
                        log(f"n={n}: skipping {name} (n > {limit})")
                        continue
                    table.emit(run_one(name, impl, r, case, table, measured))
            case = None
            gc.collect()
    finally:
        try:
            baselines.destroy_handle()
        except Exception:
            pass
    return 0
