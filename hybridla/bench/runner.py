"""Benchmark of hybridla's factorizations against cuSOLVER, MAGMA (through PyTorch) and SciPy:
``hybridla bench`` (installed), or ``python3 perf/bench.py`` in a source checkout.

    hybridla bench --routine getrf --sizes 16384 32768 --dtype float64 \
        [--nb N] [--lookahead L] [--panel auto] [--repeat 5] \
        [--interfaces gpu,cpu,gpu-tuned,cpu-tuned] \
        [--baselines cusolver|cusolver-device,cusolver-pinned,cusolver-pageable,magma,scipy] \
        [--scipy-max 16384] [--trace-dir DIR] [--out FILE.md]

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

Every selected implementation is timed on it (xxxx = the routine's cuSOLVER/LAPACK call;
the --interfaces / --baselines word in brackets):

  hybridla GPU iface    [gpu] hybridla.lu_factor / cho_factor(lower=True) / geqrf / geqlf /
                        gelqf on a CuPy array, backend="cuda", with the library's DEFAULTS
                        (check_finite=True, overwrite_a=False: nothing else is passed); the
                        factors stay on the device. The GPU interface's headline row.
  ... tuned             [gpu-tuned] the same with overwrite_a=True, check_finite=False
  hybridla CPU iface    [cpu] the same call on the NumPy array (the pristine A; overwrite_a=False
                        leaves it alone), backend="cuda" (or "host" without a GPU); the factors
                        are in host memory when the clock stops. The CPU interface's headline.
  ... tuned             [cpu-tuned] overwrite_a=True, check_finite=False, on a fresh host copy
  cuSOLVER (device)     [cusolver-device] xxxx of nvmath.bindings.cusolverDn (getrf, potrf
                        lower, geqrf) on a device copy of A refreshed outside the timed region
                        (a device-to-device copy); the GPU interface's reference
  cuSOLVER+transfers pinned (reference)
                        [cusolver-pinned] A copied into a pinned host buffer outside the
                        clock; timed: async upload from it on CuPy's stream, xxxx, async
                        download into the same pinned buffer (read there: no copy to pageable
                        memory is timed; A is copied back into it before the next run),
                        small pivots / tau / info; the CPU interface's reference
  cuSOLVER+transfers pageable (what a first try gets)
                        [cusolver-pageable] cupy.asarray of the pageable A (CuPy's pinned
                        staging, its pool primed before the clock), xxxx, d_a.get(out=) into a
                        pageable array, in series, all timed
  MAGMA (torch)         [magma] torch.linalg.lu_factor / linalg.cholesky_ex / torch.geqrf on a
                        CUDA tensor with torch.backends.cuda.preferred_linalg_library("magma")
  SciPy                 [scipy] scipy.linalg.lu_factor / cho_factor(lower=True) / qr(mode="raw")
                        on the host, overwrite_a=True, check_finite=False (only n <= --scipy-max)

--baselines cusolver means all three cuSOLVER rows.  cuSOLVER, MAGMA (through torch) and SciPy
have no QL or LQ: for geqlf and gelqf their rows time geqrf on the same matrix ("cuSOLVER
geqrf (device)", "SciPy geqrf (host)", ...; not repeated when geqrf is in the same run), the
cuSOLVER ratios are against cuSOLVER's geqrf, and a column "vs our geqrf" gives hybridla's
geqrf time through the same interface divided by this time (issue 3 asks geqlf and gelqf to be
within 1.2x of our geqrf: >= 0.83x here).  A hybridla function that does not exist (yet) gives
a row "skipped: hybridla.qr not available"; an implementation that cannot run on this machine
(no GPU, no torch) is left out with a message on stderr.

Statistics (harness.alternate): at each size and routine the implementations run ALTERNATELY,
round-robin in table order (hybridla, hybridla tuned, ..., cuSOLVER, ...; one untimed round at
the smallest size, then --repeat rounds, 5 by default); each row gives the median and the
spread (fastest-slowest).  Ratios = the baseline's median / this median (> 1: this is faster),
"(parity)" where the two spreads overlap.  Ratio columns name their baseline: "vs cuSOLVER
(device)" and "vs cuSOLVER pinned+transfers".  After the table, one summary line per size and
routine gives each interface's headline (defaults) row against its reference (the GPU
interface against cuSOLVER on the device, the CPU interface against pinned cuSOLVER), with the
date, device, commit and baseline.  GPU timings synchronize the device before reading the
clock.  Every result is checked outside the timed region, right after its last repetition
(checks.py: LAPACK's test ratios, dense for small n, random-vector estimates marked ~ above);
the table's header gives the formulas.  Rows are printed as markdown when a size and routine
are done (a "routine" column when a run has several routines); --out appends the table to a
file; --trace-dir keeps hybridla's trace of each last repetition as
DIR/<routine>_<gpu|cpu|gpu-tuned|cpu-tuned>_<n>.json.

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

from . import baselines, harness, report
from .checks import Case
from .factorizations import (DEVICE_REFERENCE, HEADLINES, HOST_REFERENCE, IMPLEMENTATIONS,
                             ROUTINES, Impl, Routine, select_implementations)

DTYPES = ("float32", "float64", "complex64", "complex128")
INTERFACES = ("gpu", "cpu", "gpu-tuned", "cpu-tuned")
BASELINES = ("cusolver", "cusolver-device", "cusolver-pinned", "cusolver-pageable", "magma",
             "scipy")
DEFAULT_BASELINES = ("cusolver", "magma", "scipy")
DEFAULT_SIZES = (4096,)
SMALL_SIZES = (1024,)     # hybridla bench's default on a machine without a GPU
DEFAULT_REPEAT = 5

# (the first five columns are what tests/test_cli.py and earlier tables have)
COLUMNS = ("n", "implementation", "time (s)", "TFLOP/s", "backward error", "spread (s)",
           "vs cuSOLVER (device)", "vs cuSOLVER pinned+transfers", "note")
ROUTINE_COLUMN = "routine"            # after "n", when a run has several routines
OUR_REFERENCE_COLUMN = "vs our {}"    # before "note", when a routine stands on another

log = harness.logger("bench")


class Table(report.MarkdownTable):
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

    def row(self, n: int, r: Routine, label: str, m: Optional[harness.Measurement] = None,
            flop=None, berr=None, estimated=False, bases=(None, None), ours=None,
            note="") -> str:
        """One row; m: this row's measurement (None: not run), bases: the (cuSOLVER device,
        cuSOLVER pinned+transfers) measurements, ours: hybridla's measurement of r.baseline
        through the same interface (or None)."""
        t = None if m is None else m.seconds
        cells = [str(n)] + ([r.name] if self.multi else []) + [
            label, report.fmt(t, ".4g"), report.rate(flop, t),
            report.error_cell(berr, estimated), report.spread_cell(m),
            *(report.compare(b, m) for b in bases)]
        cells += [report.compare(ours if r.baseline == ref else None, m)
                  for ref in self.references]
        cells.append(note.replace("|", "/"))
        return self.format_row(cells)

    def begin(self, opts: argparse.Namespace, command: str) -> None:
        names = [r.name for r in self.routines]
        errors = " ".join((f"{r.name}: " if self.multi else "") + r.error_text
                          for r in self.routines)
        notes = [
            f"hybridla: {hybridla.__file__}; numpy {np.__version__}; "
            f"{opts.repeat} rounds, the implementations alternating round-robin (one "
            f"untimed round at the smallest size); time = median, spread = fastest-slowest; "
            f"TFLOP/s from LAWN 41 {', '.join(names)} flops.",
            f"Backward error {errors} "
            f"Ratios are the named baseline's median / this median (> 1: this is faster); "
            f"\"(parity)\": the two spreads overlap. hybridla rows without \"tuned\" use the "
            f"library's defaults (check_finite=True, overwrite_a=False) and are the headline.",
        ]
        for ref in self.references:
            stand = ", ".join(r.name for r in self.routines if r.baseline == ref)
            notes.append(
                f"cuSOLVER, MAGMA and SciPy have no {stand}: their rows for {stand} time "
                f"{ref} on the same matrix (shown once per size when {ref} is in the run), "
                f"and the cuSOLVER ratios of {stand} are against cuSOLVER's {ref}. "
                f"\"vs our {ref}\" = hybridla's {ref} time through the same interface / "
                f"this time (\"within 1.2x of our {ref}\" is >= 0.83x).")
        where = report.provenance(report.device_name(), BASELINE_NAMES)
        self.start(f"{','.join(names)} {opts.dtype}; {where}", command, notes)


BASELINE_NAMES = ("cuSOLVER (device) for the GPU interface, cuSOLVER with pinned transfers "
                  "for the CPU interface")


def summary_line(n: int, r: Routine, name: str, label: str, m: harness.Measurement,
                 reference: str, base: Optional[harness.Measurement]) -> str:
    """The headline of one interface at one size: its defaults row against its reference,
    with where and when (a markdown list item, outside the table)."""
    ref_label = IMPLEMENTATIONS[reference].label_for(r)
    against = (f"{ref_label} not run" if base is None or base.seconds is None else
               f"{ref_label} {base.seconds:.4g} s ({report.spread_cell(base)}): "
               f"{report.compare(base, m)}")
    return (f"- summary n={n} {r.name}: {label} {report.fmt(m.seconds, '.4g')} s "
            f"({report.spread_cell(m)}) vs {against}; "
            f"{report.provenance(report.device_name(), ref_label)}")


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
        epilog="One markdown row per size and implementation: hybridla GPU and CPU iface "
               "(defaults, then tuned), cuSOLVER (device), cuSOLVER+transfers pinned (the "
               "CPU-interface reference) and pageable, MAGMA (torch), SciPy; all alternating "
               "round-robin; time (median of --repeat rounds after one warm-up round), spread, "
               "TFLOP/s (LAWN 41), backward error (LAPACK's test ratio, < 30 passes), ratios "
               "to cuSOLVER (device) and pinned cuSOLVER, \"(parity)\" where spreads overlap. "
               "Without a GPU: hybridla's host backend and SciPy only.")
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
    p.add_argument("--repeat", type=positive_int, default=DEFAULT_REPEAT,
                   help=f"timed rounds per size and routine, the implementations alternating "
                        f"(median and spread; default {DEFAULT_REPEAT})")
    p.add_argument("--interfaces", type=_word_list(INTERFACES), default=list(INTERFACES),
                   help="hybridla rows, comma separated: gpu, cpu (the library's defaults: "
                        "the headlines), gpu-tuned, cpu-tuned (overwrite_a=True, "
                        "check_finite=False); default all")
    p.add_argument("--baselines", type=_word_list(BASELINES), default=list(DEFAULT_BASELINES),
                   help="comma separated: cusolver (= cusolver-device, cusolver-pinned, "
                        "cusolver-pageable), magma, scipy")
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

def _checker(impl: Impl, c: Routine, case: Case, plan, outcome: dict):
    """The contender's finish: the plan's factors of the last repetition, checked at once
    (they may live in buffers the next contender refreshes); outcome gets berr, estimated."""
    def finish(raw):
        notes = outcome["notes"]
        factors = plan.finish(raw, notes)
        try:
            outcome["berr"], outcome["estimated"] = c.check(case, factors)
        except Exception as exc:
            notes.append(f"backward error failed: {type(exc).__name__}: {exc}")
        return None
    return finish


def run_routine(r: Routine, case: Case, impls: list, table: Table, measured: dict,
                attempted: set) -> tuple[list, list]:
    """Time the implementations of routine r at one size alternately (harness.alternate) and
    check each result; returns (table rows, summary lines).

    measured maps (implementation, routine timed) to Measurements at this size (this
    routine's are added); attempted holds the (implementation, routine timed) pairs already
    run at this size, so that a stand-in (geqrf for geqlf) runs once.
    """
    rows: list = []        # (name, impl, routine timed, label, outcome dict)
    contenders = []
    for name, impl in impls:
        c = impl.computes(r)
        key = (name, c.name)
        if key in attempted:
            continue
        attempted.add(key)
        limit = impl.max_n(case.opts)
        if limit is not None and case.n > limit:
            log(f"n={case.n}: skipping {name} (n > {limit})")
            continue
        outcome: dict = {"notes": [], "berr": None, "estimated": False}
        label = impl.label_for(r)
        reason = impl.supports(c)
        if reason is None:
            try:
                plan = impl.plan(case, c)
                label = impl.label_for(r, **plan.label)
                outcome["notes"] += plan.notes
                contenders.append(harness.Contender(
                    name, plan.fn, plan.setup, plan.sync,
                    finish=_checker(impl, c, case, plan, outcome)))
            except Exception as exc:
                reason = f"{type(exc).__name__}: {exc}".splitlines()[0][:160]
        if reason:
            log(f"n={case.n}: {c.name} {name}: {reason}")
            outcome["notes"].append(reason)
        rows.append((name, impl, c, label, outcome))
    log(f"n={case.n}: {r.name}: {', '.join(x.name for x in contenders)} alternating, "
        f"{case.warmup} + {case.repeat} rounds")
    try:
        results = harness.alternate(contenders, case.repeat, warmup=case.warmup)
    finally:
        contenders = []
        harness.release_device_memory()
    for name, impl, c, _, outcome in rows:
        m = results.get(name)
        if m is not None:
            if m.error:
                log(f"n={case.n}: {c.name} {name} failed: {m.error}")
                outcome["notes"].append(m.error)
            measured[(name, c.name)] = m
    ref = r.baseline or r.name
    bases = (measured.get((DEVICE_REFERENCE, ref)), measured.get((HOST_REFERENCE, ref)))
    lines, summaries = [], []
    for name, impl, c, label, outcome in rows:
        m = results.get(name)
        ours = measured.get((name, r.baseline)) if impl.hybridla and r.baseline else None
        lines.append(table.row(case.n, r, label, m, c.flops(case.n, case.n, case.dtype),
                               outcome["berr"], outcome["estimated"], bases, ours,
                               "; ".join(outcome["notes"])))
        reference = HEADLINES.get(name)
        if reference is not None and m is not None and m.seconds is not None:
            summaries.append(summary_line(case.n, r, name, label, m, reference,
                                          measured.get((reference, ref))))
    return lines, summaries


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
    command = report.command_line(argv, prog or "perf/bench.py")
    impls = select_implementations(opts, log)
    if not impls:
        log("nothing to run")
        return 1
    table = Table(opts.out, routines)
    table.begin(opts, command)
    summaries: list = []
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
                lines, said = run_routine(r, case, impls, table, measured, attempted)
                for line in lines:
                    table.emit(line)
                summaries += said
            case = None
            gc.collect()
    finally:
        try:
            baselines.destroy_handle()
        except Exception:
            pass
    if summaries:
        table.emit("")
        for line in summaries:
            table.emit(line)
    return 0
