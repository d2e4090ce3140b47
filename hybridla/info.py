"""What hybridla runs with here: ``hybridla info`` and ``hybridla.show_config()``.

Versions of hybridla and its dependencies, the BLAS, each backend's availability (and why not),
the device and its tuning entry, and the effective configuration with the layer each value came
from (default, file, environment, config.set).
"""
from __future__ import annotations

import os
import platform
import sys
from importlib import metadata

# (distribution, what it is for); the optional ones are listed only where installed
DEPENDENCIES = (("numpy", ""), ("scipy", ""), ("dask", ""), ("donfig", ""), ("pyyaml", ""),
                ("threadpoolctl", ""), ("matplotlib", "trace charts"), ("tqdm", "progress bars"))
OPTIONAL = (("pycuda", "cuda backend"), ("nvmath-python", "cuda backend: cuBLAS, cuSOLVER"),
            ("cupy", "device arrays"), ("torch", "device arrays"))


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def _installed_cupy() -> str | None:
    """CuPy's distributions are named by CUDA version (cupy-cuda12x, ...)."""
    for dist in metadata.distributions():
        name = (dist.metadata["Name"] or "").lower()
        if name == "cupy" or name.startswith("cupy-cuda"):
            return f"{dist.version} ({name})"
    return None


def _blas() -> list:
    try:
        import numpy  # noqa: F401 - loads the BLAS that threadpoolctl reports
        import scipy.linalg  # noqa: F401
        from threadpoolctl import threadpool_info
        return [f"{lib.get('internal_api')} {lib.get('version')} ({lib.get('user_api')}, "
                f"{lib.get('num_threads')} threads, {os.path.basename(lib.get('filepath', ''))})"
                for lib in threadpool_info()]
    except Exception as exc:  # informative only
        return [f"unknown ({exc.__class__.__name__}: {exc})"]


def collect() -> dict:
    """Everything `show_config` prints, as plain data."""
    from . import __version__, backend as backends, config

    versions = {name: _version(name) for name, _ in DEPENDENCIES}
    optional = {name: (_installed_cupy() if name == "cupy" else _version(name))
                for name, _ in OPTIONAL}

    why = backends._cuda_unavailable_reason()
    gpu = backends.gpu_present()
    backend_rows = {"host": {"available": True, "why": None},
                    "cuda": {"available": why is None, "why": why}}
    auto = "cuda" if why is None else "host"
    devices = []
    for name in ("host", "cuda"):
        if not backend_rows[name]["available"]:
            continue
        try:
            device = backends.get_backend(name).device_name
        except Exception as exc:  # a device that fails at creation: say so, go on
            backend_rows[name] = {"available": False,
                                  "why": f"creating it failed ({exc.__class__.__name__}: {exc})"}
            auto = "host" if name == "cuda" else auto
            continue
        table = config.device_table(device)
        entries = [entry for entry in (config.get("tuning", {}) or {})
                   if entry != "default" and entry.lower() in device.lower()]
        devices.append({"backend": name, "device": device, "tuning_entries": ["default"] + entries,
                        "tuning": table})

    settings = {key: {"value": value, "source": source}
                for key, (value, source) in config.sources().items() if key != "tuning"}
    tuning_source = config.sources().get("tuning", (None, "default"))[1]
    return {
        "hybridla": __version__,
        "python": platform.python_version(),
        "platform": f"{platform.system()} {platform.machine()}",
        "cpu_cores": os.cpu_count(),
        "executable": sys.executable,
        "dependencies": versions,
        "optional": optional,
        "blas": _blas(),
        "gpu_present": gpu,
        "backends": backend_rows,
        "auto": auto,
        "devices": devices,
        "config": settings,
        "tuning_source": tuning_source,
        "config_files": [path for path, _ in getattr(config.config, "layers", {}).get("files", [])],
        "config_paths": list(config.config.paths),
    }


def _value(value) -> str:
    return "null" if value is None else str(value)


def format_text(info: dict) -> str:
    """The text `hybridla info` prints."""
    from .backend import CUDA_INSTALL_HINT

    lines = [f"hybridla {info['hybridla']}",
             f"Python {info['python']} on {info['platform']}, {info['cpu_cores']} CPU cores "
             f"({info['executable']})", "", "dependencies:"]
    notes = dict(DEPENDENCIES + OPTIONAL)
    for name, version in info["dependencies"].items():
        lines.append(f"  {name:15} {version or 'NOT INSTALLED'}"
                     + (f"   ({notes[name]})" if notes[name] else ""))
    for name, version in info["optional"].items():
        lines.append(f"  {name:15} {version or 'not installed'}   ({notes[name]})")
    lines += [f"  BLAS            {blas}" for blas in info["blas"]]

    lines += ["", "backends:"]
    for name, row in info["backends"].items():
        state = "available" if row["available"] else f"not available: {row['why']}"
        lines.append(f"  {name:6} {state}")
    cuda = info["backends"]["cuda"]
    if not cuda["available"]:
        if info["gpu_present"]:
            lines.append(f"         a GPU is present ({info['gpu_present']}); for GPU support: "
                         f"{CUDA_INSTALL_HINT}")
        else:
            lines.append("         no NVIDIA GPU found (no /dev/nvidia0, no nvidia-smi)")
    lines.append(f"  auto   -> {info['auto']}")

    for device in info["devices"]:
        lines += ["", f"device of the {device['backend']} backend: {device['device']}",
                  f"  tuning entry (hybridla.config.device_table; entries "
                  f"{' + '.join(device['tuning_entries'])}, from {info['tuning_source']}):"]
        table = dict(device["tuning"])
        provenance = table.pop("provenance", None)
        if provenance:
            lines.append(f"    provenance: {' '.join(str(provenance).split())}")
        lines += [f"    {key}: {_value(value)}" for key, value in table.items()]

    lines += ["", "configuration (effective value, and where it comes from: default = "
                  "hybridla/data/defaults.yaml, file, environment HYBRIDLA_*, config.set):"]
    width = max((len(key) for key in info["config"]), default=10)
    vwidth = min(max((len(_value(row["value"])) for row in info["config"].values()), default=5),
                 24)
    for key, row in info["config"].items():
        lines.append(f"  {key:{width}}  {_value(row['value']):{vwidth}}  {row['source']}")
    lines.append(f"  {'tuning':{width}}  {'(table)':{vwidth}}  {info['tuning_source']}")
    files = info["config_files"]
    lines.append(f"  files read: {', '.join(files) if files else 'none'} (searched: "
                 f"{', '.join(info['config_paths'])})")
    return "\n".join(lines)


def show_config(mode: str = "stdout"):
    """Show what hybridla runs with here: the same text as ``hybridla info``.

    Versions of hybridla and its dependencies, each backend's availability (and why not), the
    device and its tuning entry, and the effective configuration with where each value comes
    from.

    Parameters
    ----------
    mode : {"stdout", "text", "dicts"}, optional
        "stdout" (the default) prints the text (returns None); "text" returns it; "dicts"
        returns the information as a dict.

    Returns
    -------
    None or str or dict
        None for "stdout", the text for "text", the information as plain data for "dicts"
        (keys "hybridla", "dependencies", "backends", "auto", "devices", "config", ...).

    Raises
    ------
    ValueError
        mode is not "stdout", "text" or "dicts".

    Examples
    --------
    >>> import hybridla
    >>> hybridla.show_config()  # doctest: +ELLIPSIS
    hybridla ...
    backends:
      host   available
    ...
    >>> hybridla.show_config("text").startswith("hybridla ")
    True
    >>> info = hybridla.show_config("dicts")
    >>> info["backends"]["host"]["available"], info["auto"] in ("host", "cuda")
    (True, True)
    """
    if mode not in ("stdout", "text", "dicts"):
        raise ValueError(f"mode must be 'stdout', 'text' or 'dicts'; got mode={mode!r}")
    info = collect()
    if mode == "dicts":
        return info
    text = format_text(info)
    if mode == "text":
        return text
    print(text)
    return None
