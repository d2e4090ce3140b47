"""hybridla: dense matrix factorizations with the CPU and the GPU working together.

    >>> import numpy as np, hybridla
    >>> a = np.random.default_rng(0).standard_normal((1000, 1000))
    >>> lu, piv = hybridla.lu_factor(a)            # scipy.linalg.lu_factor's conventions
    >>> x = hybridla.lu_solve((lu, piv), np.ones(1000))
"""
from . import _logging  # noqa: F401 - the "hybridla" logger with its NullHandler
from . import config
from .backend import available_backends
from .info import show_config
from .linalg import (
                     LinAlgError,
                     LinAlgWarning,
                     cho_factor,
                     cho_solve,
                     cholesky,
                     gehrd,
                     gelqf,
                     geqlf,
                     geqp3,
                     geqrf,
                     hessenberg,
                     lq,
                     lstsq,
                     lstsq_mixed,
                     lu_factor,
                     lu_solve,
                     ql,
                     qr,
                     solve,
                     solve_mixed,
)

from ._version import __version__  # noqa: F401  (the package's version)
__all__ = ["lu_factor", "lu_solve", "solve", "cho_factor", "cho_solve", "cholesky", "qr", "ql",
           "lq", "lstsq", "hessenberg", "geqrf", "geqlf", "gelqf", "geqp3", "gehrd", "solve_mixed",
           "lstsq_mixed", "LinAlgError",
           "LinAlgWarning", "config", "available_backends", "show_config"]
