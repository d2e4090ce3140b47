"""User layer: scipy.linalg's names, signatures and conventions, on the hybrid engine.

Where the matrix lives decides the interface: a NumPy array (or anything array-like) is the CPU
interface, with the result in host memory; a device array (PyCUDA GPUArray, CuPy, PyTorch: any
`__cuda_array_interface__`) is the GPU interface, with the result left on the device as the same
kind of array. Engine options (backend, nb, lookahead, panel, trace) are keyword-only; None takes
them from `hybridla.config`.

One module per family, as scipy.linalg has them: _decomp_lu, _decomp_cholesky, _basic (solve),
_decomp_qr, _decomp_hessenberg, _lstsq, _solve_mixed; what they share is in _common.
"""
from __future__ import annotations

from scipy.linalg import LinAlgError, LinAlgWarning

from ._basic import solve
from ._decomp_cholesky import cho_factor, cho_solve, cholesky
from ._decomp_hessenberg import gehrd, hessenberg
from ._decomp_lu import lu_factor, lu_solve
from ._decomp_qr import gelqf, geqlf, geqrf, lq, ql, qr
from ._lstsq import lstsq
from ._solve_mixed import lstsq_mixed, solve_mixed

__all__ = ["lu_factor", "lu_solve", "solve", "cho_factor", "cho_solve", "cholesky", "qr", "ql",
           "lq", "lstsq", "hessenberg", "geqrf", "geqlf", "gelqf", "gehrd", "solve_mixed",
           "lstsq_mixed", "LinAlgError", "LinAlgWarning"]
