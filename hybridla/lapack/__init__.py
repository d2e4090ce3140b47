"""Driver layer: LAPACK names, one file per routine; info returned as LAPACK does."""
from .getrf import getrf
from .getrs import getrs
from .gesv import gesv

__all__ = ["getrf", "getrs", "gesv"]
