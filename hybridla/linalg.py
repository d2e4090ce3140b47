"""User layer: scipy.linalg's names, signatures and conventions, on the hybrid engine.

Where the matrix lives decides the interface: a NumPy array (or anything array-like) is the CPU
interface, with the result in host memory; a device array (PyCUDA GPUArray, CuPy, PyTorch: any
`__cuda_array_interface__`) is the GPU interface, with the result left on the device as the same
kind of array. Engine options (backend, nb, lookahead, panel, trace) are keyword-only; None takes
them from `hybridla.config`.

One module per family, as scipy.linalg has them: _decomp_lu, _decomp_cholesky, _basic (solve),
_decomp_qr (with _decomp_householder: geqrf, geqlf, gelqf), _decomp_hessenberg, _lstsq,
_solve_mixed; what they share is in _common.
"""
from __future__ import annotations

from scipy.linalg import LinAlgError, LinAlgWarning

from . import (
           _basic,
           _decomp_cholesky,
           _decomp_hessenberg,
           _decomp_householder,
           _decomp_lu,
           _decomp_qr,
           _decomp_qr_pivoted,
           _lstsq,
           _solve_mixed,
)
from ._common import public

__all__ = ["lu_factor", "lu_solve", "solve", "cho_factor", "cho_solve", "cholesky", "qr", "ql",
           "lq", "lstsq", "hessenberg", "geqrf", "geqlf", "gelqf", "geqp3", "gehrd",
           "solve_mixed", "lstsq_mixed", "LinAlgError", "LinAlgWarning"]

# each family's functions, as the user calls them (`public`: a call that touches the GPU holds the
# device, with its context current in the calling thread, until it returns)
lu_factor, lu_solve = public(_decomp_lu.lu_factor), public(_decomp_lu.lu_solve)
solve = public(_basic.solve)
cho_factor, cho_solve, cholesky = (public(_decomp_cholesky.cho_factor),
                                   public(_decomp_cholesky.cho_solve),
                                   public(_decomp_cholesky.cholesky))
qr, ql, lq = public(_decomp_qr.qr), public(_decomp_qr.ql), public(_decomp_qr.lq)
geqrf, geqlf, gelqf = (public(_decomp_householder.geqrf), public(_decomp_householder.geqlf),
                       public(_decomp_householder.gelqf))
geqp3 = public(_decomp_qr_pivoted.geqp3)
hessenberg, gehrd = public(_decomp_hessenberg.hessenberg), public(_decomp_hessenberg.gehrd)
lstsq = public(_lstsq.lstsq)
solve_mixed, lstsq_mixed = public(_solve_mixed.solve_mixed), public(_solve_mixed.lstsq_mixed)
