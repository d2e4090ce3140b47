"""gesv_mixed: A X = B to working precision, the LU in a low precision (MAGMA's dhgesv with GMRES
refinement, Haidar et al. SC18; cuSOLVER's IRS; SLATE's gesv_mixed):

    [convert]  r, c powers of two, entries of diag(r) A diag(c) about 1;  A_low := fl32(r A c)
    [factor]   P A_low = L U: getrf on the engine, its GEMMs in `lowest` on the tensor cores
    [refine]   M^-1 v = diag(c) U^-1 L^-1 P diag(r) v  (float32, where the factors are);
               refinement in the working precision with the true A (lapack/_refine.py)

With mixed.panel_pivoting "window" the copy is randomized, A_low := fl32(W_L^T (r A c) W_R)
with random butterflies (hybridla/butterfly.py, applied while rounding), and the LU
searches each column's pivot within mixed.pivot_window block rows from the diagonal only
(panel/lu.getrf_panel_window): its panels lose the pivot search across the whole height that
makes them the LU's critical path. Then M^-1 v = diag(c) W_R U^-1 L^-1 P W_L^T diag(r) v.

Codes beyond refine's: -2 when the scaled A or a GEMM operand overflows `lowest`, -3 when the
low-precision U has an exact zero on its diagonal (info as LAPACK's getrf). The bytes: [convert]
reads A three times (row and column statistics, the rounding) and writes the float32 copy; each
refinement iteration reads A once (the residual) and the factors once (the two triangular
solves): at n = 32768 in float64 that is 8.6 GB and 4.3 GB, milliseconds at HBM speed.
"""
from __future__ import annotations

import dataclasses

from .. import config
from ..butterfly import random_butterfly
from ._mixed import MixedSolver, general_scaling, keep_butterfly, narrow
from ._preconditioner import TriangularPreconditioner
from .getrf import getrf


class GesvMixed(MixedSolver):
    def __init__(self, ops, options, plan):
        super().__init__(ops, options, plan)
        self.butterfly = None  # keep_butterfly's pair when the LU pivots within windows only
        self.pivoting = plan.panel_pivoting

    def scale_and_narrow(self, source, low):
        # the LU without a pivot search across the height is stable for the randomized copy
        # W_L^T (r A c) W_R (hybridla/butterfly.py), not for A itself; the butterflies go to
        # the device while it makes the scaling passes
        def upload():
            return keep_butterfly(self.ops, low, random_butterfly(low.n))

        scaling, self.butterfly = general_scaling(
            self.ops, source, self.options.equilibrate,
            meanwhile=upload if self.pivoting == "window" else None)
        if scaling.zero_line and self.pivoting == "window":
            # exactly singular: randomized, its zero pivot would be lost to rounding, and the
            # solve would not fail with LAPACK's info; partial pivoting keeps it exact
            self.pivoting, self.butterfly = "partial", None
        r, c = scaling.r, scaling.c
        return r, c, scaling.norm_inf, narrow(self.ops, source, low, r, c, self.options.lowest,
                                              self.butterfly)

    def factor(self, A, low, plan, r, c) -> int:
        # the tensor-core update leaves SMs to the panels, the LU's critical path (config
        # mixed.lu_panel_sms up to mixed.lu_panel_sms_max_n; null, or a larger LU:
        # device.panel_sms as for everything else)
        reserved = config.get("mixed.lu_panel_sms") \
            if low.n <= config.get("mixed.lu_panel_sms_max_n") else None
        settings = plan.device_settings if reserved is None else \
            dataclasses.replace(plan.device_settings, panel_sms=reserved)
        self.pivots, info, trace = getrf(low, dataclasses.replace(
            plan, panel_pivoting=self.pivoting, device_settings=settings))
        if plan.trace_path:
            trace.to_chrome(plan.trace_path)
        return info

    def preconditioner(self, low, nrhs, r, c):
        # P diag(r) A diag(c) = L U:  A^-1 = diag(c) U^-1 L^-1 P diag(r)
        return TriangularPreconditioner(self.ops, low, low.n, nrhs,
                                        [("L", "N", "U"), ("U", "N", "N")], r, c,
                                        butterfly=self.butterfly, pivots=self.pivots)


def gesv_mixed(ops, A, B, options, plan, arriving=None):
    """Solve A X = B (A the working-precision tile store, or a HostResidentMatrix whose
    products run on the host; B a host array n x nrhs) by a low-precision LU and refinement.
    Returns (X, MixedInfo); see MixedSolver.solve."""
    return GesvMixed(ops, options, plan).solve(A, B, arriving)
