"""Configuration: built-in defaults < tuning file < HYBRIDLA_* environment < ``config.set`` < call kwargs.

The merging is donfig's (the library dask.config grew out of): YAML files in ``/etc/hybridla``
and then ``~/.config/hybridla`` (``HYBRIDLA_CONFIG_DIR``; where ``hybridla tune`` writes
``tuning.yaml``) override the defaults, environment variables such as ``HYBRIDLA_LU__NB=256``
override the files, and ``config.set`` is a context manager over all of those. Call keyword
arguments win over everything; `resolve` applies them.

    >>> import hybridla
    >>> with hybridla.config.set({"lu.nb": 256, "lu.lookahead": 2}):
    ...     lu, piv = hybridla.lu_factor(a)

Every key hybridla reads is in ``data/defaults.yaml``. A key that is not (a typo such as
``lu.nbb``) would be ignored silently, so it warns (`UnknownConfigKeyWarning`) where it is set:
in ``config.set``, or in a file or the environment when they are read (at import and at
``config.refresh()``). Below ``tuning`` the per-device entries are free-form and never warn.
`sources()` says which layer each effective value comes from (``hybridla info`` prints it).
"""
from __future__ import annotations

import difflib
import os
import warnings
from pathlib import Path

import yaml
from donfig import Config as _DonfigConfig
from donfig.config_obj import collect_env, collect_yaml, merge

_HERE = Path(__file__).parent
DEFAULTS_FILE = _HERE / "data" / "defaults.yaml"
TUNING_DIR = Path(os.environ.get("HYBRIDLA_CONFIG_DIR", Path.home() / ".config" / "hybridla"))
ENV_PREFIX = "HYBRIDLA_"
# HYBRIDLA_* variables that locate configuration rather than set a key (ours and donfig's)
_LOCATION_VARIABLES = frozenset({"HYBRIDLA_CONFIG_DIR", "HYBRIDLA_CONFIG", "HYBRIDLA_ROOT_CONFIG",
                                 "HYBRIDLA_INTERNAL_INHERIT_CONFIG"})
FREE_FORM = ("tuning",)  # subtrees whose keys are not checked: one entry per device

with open(DEFAULTS_FILE) as _f:
    _defaults = yaml.safe_load(_f)


class UnknownConfigKeyWarning(UserWarning):
    """A configuration key that hybridla does not read (not in data/defaults.yaml)."""


def _normal(key: str) -> str:
    return key.replace("-", "_")  # donfig treats lu.panel-leaf as lu.panel_leaf


def flatten(tree, prefix="", free_form=FREE_FORM) -> dict:
    """{"lu.nb": 256, ...} of a nested mapping; the free-form subtrees stay whole values."""
    flat = {}
    for key, value in (tree or {}).items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value and _normal(name) not in free_form:
            flat.update(flatten(value, name + ".", free_form))
        else:
            flat[name] = value
    return flat


KNOWN_KEYS = frozenset(_normal(k) for k in flatten(_defaults))


def unknown_keys(flat_keys) -> list:
    """The keys of `flat_keys` that hybridla does not read (below ``tuning`` anything goes)."""
    return [key for key in flat_keys
            if _normal(key) not in KNOWN_KEYS
            and not any(_normal(key).startswith(f + ".") for f in FREE_FORM)]


def _warn_unknown(keys, where, stacklevel, names=None):
    """One warning per unknown key, with the closest known key; `names`: how the user spelled
    each key ({"lu.nbb": "HYBRIDLA_LU__NBB"})."""
    for key in keys:
        near = difflib.get_close_matches(_normal(key), KNOWN_KEYS, n=1)
        hint = f"; did you mean {near[0]!r}?" if near else ""
        shown = (names or {}).get(_normal(key), key)
        warnings.warn(f"unknown hybridla configuration key {shown!r} {where}, ignored (the keys "
                      f"hybridla reads are those of hybridla/data/{DEFAULTS_FILE.name}){hint}",
                      UnknownConfigKeyWarning, stacklevel=stacklevel + 1)


def _set_keys(arg, kwargs) -> list:
    """The dotted keys a config.set(arg, **kwargs) call assigns (nested dicts flattened)."""
    given = dict(arg or {})
    given.update({k.replace("__", "."): v for k, v in kwargs.items()})
    keys = []
    for key, value in given.items():
        if isinstance(value, dict) and value and not any(
                _normal(key) == f or _normal(key).startswith(f + ".") for f in FREE_FORM):
            keys += [f"{key}.{k}" for k in flatten(value)]
        else:
            keys.append(key)
    return keys


class HybridlaConfig(_DonfigConfig):
    """donfig's Config that remembers its layers (each file, the environment) for `sources`,
    and warns about keys hybridla does not read."""

    def collect(self, paths=None, env=None) -> dict:
        paths = self.paths if paths is None else paths
        env = self.env if env is None else env
        files = []
        for path in paths:
            if os.path.isdir(path):
                try:
                    names = sorted(p for p in os.listdir(path)
                                   if os.path.splitext(p)[1].lower() in (".json", ".yaml", ".yml"))
                except OSError:
                    names = []
                files += [os.path.join(path, p) for p in names]
            elif os.path.exists(path):
                files.append(path)
        file_layers = [(f, layer[0]) for f in files if (layer := collect_yaml([f]))]
        variables = {name: value for name, value in env.items()
                     if name.startswith(self.env_prefix) and name not in _LOCATION_VARIABLES}
        env_layer = collect_env(self.env_prefix, env=variables)
        names = {_normal(name[len(self.env_prefix):].lower().replace("__", ".")): name
                 for name in variables}
        self.layers = {"files": file_layers, "env": env_layer, "env_names": names}
        for path, layer in file_layers:
            _warn_unknown(unknown_keys(flatten(layer)), f"in {path}", stacklevel=3)
        _warn_unknown(unknown_keys(flatten(env_layer)), "in the environment", stacklevel=3,
                      names=self.layers["env_names"])
        return merge(*[layer for _, layer in file_layers], env_layer)

    def set(self, arg=None, **kwargs):  # noqa: A003 - donfig's name
        """donfig's ``set`` (a context manager, or a global assignment when not used as one),
        warning first about keys hybridla does not read."""
        _warn_unknown(unknown_keys(_set_keys(arg, kwargs)), "in config.set", stacklevel=2)
        return super().set(arg, **kwargs)

    def sources(self) -> dict:
        """{key: (value, source)} of the effective configuration, the ``tuning`` table as one
        entry. Source: "default" (data/defaults.yaml), "file PATH" (a tuning/config file),
        "environment NAME" (HYBRIDLA_*), or "config.set" (a value that none of the layers below
        gives: set in the current context or globally by ``config.set``)."""
        layers = getattr(self, "layers", {"files": [], "env": {}, "env_names": {}})
        base = flatten(merge(*self.defaults, *[layer for _, layer in layers["files"]],
                             layers["env"]))
        env_flat = flatten(layers["env"])
        file_flats = [(path, flatten(layer)) for path, layer in layers["files"]]
        result = {}
        for key, value in flatten(self.config).items():
            if key not in base or base[key] != value:
                source = "config.set"
            elif key in env_flat:
                source = f"environment {layers['env_names'].get(_normal(key), key)}"
            elif any(key in flat for _, flat in file_flats):
                source = "file " + [path for path, flat in file_flats if key in flat][-1]
            else:
                source = "default"
            result[key] = (value, source)
        return result


config = HybridlaConfig("hybridla", defaults=[_defaults],
                        paths=["/etc/hybridla", str(TUNING_DIR)])

get = config.get
set = config.set  # noqa: A001 - donfig's name, as dask.config.set
refresh = config.refresh
sources = config.sources


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
