"""Driver layer: LAPACK names, one file per routine; info returned as LAPACK does."""
from .getrf import getrf
from .getrs import getrs
from .gesv import gesv
from .posv import posv
from .potrf import potrf
from .potrs import potrs

__all__ = ["getrf", "getrs", "gesv", "potrf", "potrs", "posv"]
