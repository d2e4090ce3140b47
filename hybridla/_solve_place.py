"""Where a solve on host factors runs (lu_solve, cho_solve, the solve of an out-of-core lstsq):
on the host, LAPACK on the factors where they are, as it always did; or streamed through the
device (lapack/_streamed_solve.py: B up once, the factors' block columns through two slots,
each once per triangular solve).

Configuration solve.place says which: "host" or "device" force one; "auto" (the default) asks
the cost model (scheduler/plan.CostModel.solve_place: the factors' bytes over the host's memory
bandwidth or the link, against the flops at the host's or the device's rate) on a device
backend, and takes the host on the host backend, whose "device" is host memory itself (the
streamed path would only add copies there; forced, it runs within device.memory_budget, which
is how CI tests it). The decision is logged at DEBUG on the ``hybridla.plan`` logger (the cost
model's times) or ``hybridla`` (a forced one), and a trace of the solve (``trace=`` or
configuration "trace") says it in its metadata: "solve_place": "host" or "device".
"""
from __future__ import annotations

import dataclasses
import os
import time

import numpy as np

from . import config as _config
from ._common import _host_backend
from ._memory import _memory_budget
from ._logging import get_logger
from .scheduler.plan import Plan, make_plan, solve_place_setting
from .scheduler.trace import Trace, run_metadata

_log = get_logger()

# the configuration routine whose nb (lu.nb, ...) a streamed solve of each kind takes
_ROUTINES = {"getrs": "lu", "potrs": "cho", "gels": "qr"}


@dataclasses.dataclass
class Placement:
    """Where one solve runs: `place` "host" or "device"; `plan` the streamed run's (its
    memory_budget set; None on the host); `trace_path` where its trace goes (None: nowhere)."""

    place: str
    plan: Plan | None
    trace_path: str | None
    kind: str
    shape: tuple
    nrhs: int
    dtype: np.dtype
    append: bool = False  # the trace goes after the one already at trace_path (lstsq's QR)

    def run_host(self, solve):
        """Run the host solve `solve()` as it always ran; with a trace path, write a trace of
        one CPU record (the solve is one LAPACK call, or ormqr's run for gels) whose metadata
        says "solve_place": "host"."""
        if self.trace_path is None:
            return solve()
        start = time.perf_counter()
        result = solve()
        trace = Trace()
        trace.add(self.kind, "cpu:0", 0.0, time.perf_counter() - start)
        self._write(trace, {"routine": self.kind, "shape": [int(x) for x in self.shape],
                            "dtype": str(self.dtype), "backend": "host"})
        return result

    def run_device(self, driver, *args, **kwargs):
        """Run the streamed driver (`driver(*args, plan, **kwargs) -> trace`) and write its
        trace where asked."""
        trace = driver(*args, self.plan, **kwargs)
        if self.trace_path is not None:
            self._write(trace, run_metadata(self.plan, self.kind, self.shape, self.dtype))
        return trace

    def _write(self, trace, metadata):
        """The solve's trace to trace_path, its metadata saying where it ran; appended (its
        records after the last of the trace there, whose metadata stays first) where asked."""
        path = str(self.trace_path)
        metadata = {**metadata, **trace.metadata, "solve_place": self.place, "nrhs": self.nrhs}
        if self.append and os.path.exists(path):
            before = Trace.load(path)
            offset = max((r["end"] for r in before.records), default=0.0)
            for r in trace.records:
                before.add(r["name"], r["lane"], r["start"] + offset, r["end"] + offset,
                           step=r["step"], flops=r["flops"], bytes=r["bytes"])
            metadata = {**before.metadata, "solve": metadata.pop("routine"),
                        **{k: v for k, v in metadata.items()
                           if k not in before.metadata or k in ("solve_place", "nrhs")}}
            trace = before
        trace.metadata = {}
        trace.to_chrome(path, metadata=metadata)


def choose(backend, kind, m, n, nrhs, dtype, trace=None, append=False,
           **options) -> Placement:
    """Where a solve of `kind` ("getrs", "potrs", "gels") with m x n host factors and `nrhs`
    right-hand sides runs (the module's docstring). Checks configuration solve.place (and, where
    the solve may stream, the backend and the engine options: `options`, make_plan's nb,
    lookahead, panel) before any work; a backend that cannot be had (backend="cuda" without a
    GPU) leaves an "auto" solve on the host, as such solves always ran, and fails a forced
    "device" one. `append`: its trace goes after the one at the trace path (lstsq's QR)."""
    setting = solve_place_setting()
    trace = _config.get("trace") if trace is None else trace
    host = Placement("host", None, str(trace) if trace else None, kind, (m, n), nrhs,
                     np.dtype(dtype), append)
    if setting == "host":
        return host
    try:
        ops = _host_backend(backend)
    except RuntimeError:
        if setting == "device":
            raise
        return host
    if setting == "auto" and not ops.has_device:
        _log.debug("%s on host factors -> host (the %s backend has no device)", kind, ops.name)
        return host
    plan = make_plan(ops, m, n, dtype, routine=_ROUTINES[kind], trace=trace, **options)
    if setting == "auto":
        place = "host" if plan.cost is None else plan.cost.solve_place(kind, m, n, nrhs,
                                                                       plan.nb)
    else:
        place = setting
        _log.debug("%s %dx%d, %d right-hand sides -> %s (configuration solve.place)", kind, m,
                   n, nrhs, place)
    if place == "host":
        return host
    return dataclasses.replace(host, place="device",
                               plan=dataclasses.replace(plan, memory_budget=_memory_budget(ops)))
