"""The library's logger: ``logging.getLogger("hybridla")`` (children "hybridla.backend", ...).

A library configures nothing globally: the logger has a NullHandler, so nothing is printed
unless the application asks for it, e.g.

    >>> import logging
    >>> logging.basicConfig(level=logging.INFO)             # every library's INFO lines
    >>> logging.getLogger("hybridla").setLevel(logging.DEBUG)  # hybridla's decisions too

INFO: decisions made once (which backend a process gets). DEBUG: decisions made per call (the
plan of each factorization: block size, look-ahead, panel placement, transfer mode).
The command line's ``hybridla -v`` / ``-vv`` shows them on stderr.
"""
from __future__ import annotations

import logging

logger = logging.getLogger("hybridla")
if not any(isinstance(h, logging.NullHandler) for h in logger.handlers):
    logger.addHandler(logging.NullHandler())


def get_logger(name: str | None = None) -> logging.Logger:
    """``hybridla`` or its child ``hybridla.<name>``."""
    return logger if not name else logger.getChild(name)
