"""Configuration: built-in defaults < tuning file < HYBRIDLA_* environment < ``config.set`` < call kwargs.

The merging is donfig's (the library dask.config grew out of): YAML files in ``~/.config/hybridla``
(where ``hybridla tune`` writes ``tuning.yaml``) and ``/etc/hybridla`` override the defaults,
environment variables such as ``HYBRIDLA_LU__NB=256`` override the files, and ``config.set`` is a
context manager over all of those. Call keyword arguments win over everything; `resolve` applies them.

    >>> import hybridla
    >>> with hybridla.config.set({"lu.nb": 256, "lu.lookahead": 2}):
    ...     lu, piv = hybridla.lu_factor(a)
"""
from __future__ import annotations

import os
from pathlib import Path

import yaml
from donfig import Config

_HERE = Path(__file__).parent
DEFAULTS_FILE = _HERE / "data" / "defaults.yaml"
TUNING_DIR = Path(os.environ.get("HYBRIDLA_CONFIG_DIR", Path.home() / ".config" / "hybridla"))

with open(DEFAULTS_FILE) as _f:
    _defaults = yaml.safe_load(_f)

config = Config("hybridla", defaults=[_defaults], paths=[str(TUNING_DIR), "/etc/hybridla"])

get = config.get
set = config.set  # noqa: A001 - donfig's name, as dask.config.set
refresh = config.refresh


def device_table(device_name: str) -> dict:
    """The tuning entry for a device: the "default" entry overlaid with the named device's, if any.

    Entries come from data/defaults.yaml (with their provenance) and from tuning files written by
    ``hybridla tune``; each entry says which device, date and command produced it.
    """
    tables = config.get("tuning", {}) or {}
    merged = dict(tables.get("default", {}))
    for name, entry in tables.items():
        if name != "default" and name.lower() in device_name.lower():
            merged.update(entry)
    return merged
