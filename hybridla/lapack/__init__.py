"""Driver layer: LAPACK names, one file per routine; info returned as LAPACK does."""
from .gecon import gecon, pocon
from .gelqf import gelqf
from .gehrd import gehrd
from .gels import gels, gelqs, geqrs
from .gels_mixed import gels_mixed
from .geqlf import geqlf
from .geqp3 import geqp3
from .gelsy import gelsy, gelsy_factored, geqp3_host  # host arrays, through scipy.linalg.lapack
from .geqrf import geqrf
from .geqrf_ooc import geqrf_ooc
from .getrf import getrf
from .getrf_ooc import getrf_ooc
from .getrs import getrs
from .gesv import gesv
from .gesv_mixed import gesv_mixed
from .larscl2 import larscl2
from .orghr import orghr, ormhr
from .orgqr import orglq, orgql, orgqr
from .ormqr import ormlq, ormql, ormqr
from .posv import posv
from .posv_mixed import posv_mixed
from .potrf import potrf
from .potrf_ooc import potrf_ooc
from .potrs import potrs
from .sytrf import lansy, sycon, sytrf, sytrs  # device stores (cuSOLVER); host: scipy's
from .trtrs import lantr, trcon, trtrs

__all__ = ["getrf", "getrs", "gesv", "potrf", "potrs", "posv", "geqrf", "geqlf", "gelqf",
           "getrf_ooc", "potrf_ooc", "geqrf_ooc",
           "ormqr", "ormql", "ormlq", "orgqr", "orgql", "orglq", "gels", "geqrs", "gelqs",
           "geqp3", "gehrd", "orghr", "ormhr", "gesv_mixed", "posv_mixed", "gels_mixed", "gecon",
           "pocon", "sytrf", "sytrs", "sycon", "lansy", "trtrs", "trcon", "lantr", "larscl2"]
