"""How a benchmark reports: where and when a table was made (UTC date, device, git commit,
baseline, the command), its cells (time, TFLOP/s, backward error, ratios, spreads, "parity"
where the spreads of two alternating measurements overlap) and markdown tables. The clocks and
the alternation that produce the measurements are harness.py's."""
from __future__ import annotations

import datetime
import os
import platform
import shlex
import shutil
import subprocess
import sys
from typing import Optional

from .harness import Measurement, cupy, cupy_has_gpu, loaded


def spreads_overlap(a: Measurement, b: Measurement) -> bool:
    """Whether the [fastest, slowest] ranges of two measurements' repetitions overlap."""
    sa, sb = a.spread, b.spread
    return sa is not None and sb is not None and sa[0] <= sb[1] and sb[0] <= sa[1]


def compare(base: Optional[Measurement], this: Optional[Measurement]) -> str:
    """A ratio cell: base's median / this one's ("1.10x": this is faster), followed by
    " (parity)" where the two spreads overlap (the difference is inside the run-to-run noise,
    so it is not called faster or slower); "–" without a baseline, "n/a" without a time."""
    if this is None or this.seconds is None:
        return "n/a"
    if base is None or base.seconds is None:
        return "–"
    text = f"{base.seconds / this.seconds:.2f}x"
    return text + " (parity)" if spreads_overlap(base, this) else text


def spread_cell(m: Optional[Measurement]) -> str:
    """"fastest-slowest" seconds of a measurement's repetitions, "n/a" without any."""
    spread = None if m is None else m.spread
    return "n/a" if spread is None else f"{spread[0]:.4g}-{spread[1]:.4g}"



# -- where and when --------------------------------------------------------------------------

def device_name() -> str:
    """The GPU's name (through PyTorch, CuPy or PyCUDA, whichever is here), else the host's."""
    torch = loaded("torch")
    try:
        if torch is not None and torch.cuda.is_available():
            return torch.cuda.get_device_name()
    except Exception:
        pass
    if cupy_has_gpu():
        try:
            cp = cupy()
            name = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["name"]
            return name.decode() if isinstance(name, bytes) else str(name)
        except Exception:
            pass
    try:
        import pycuda.driver as drv     # does not create a context
        drv.init()
        if drv.Device.count() > 0:
            return drv.Device(0).name()
    except Exception:
        pass
    return f"no GPU (host {platform.machine()}, {os.cpu_count()} CPUs)"


def nvidia_smi_name(device_id: int) -> Optional[str]:
    """nvidia-smi's "name, memory.total, driver_version" of the device, or None."""
    if not shutil.which("nvidia-smi"):
        return None
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--id={device_id}",
             "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20, check=True).stdout.strip()
        return out or None
    except Exception:
        return None


def utc_now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def git_commit() -> str:
    """The short commit of the source tree hybridla is imported from (``git rev-parse --short
    HEAD`` there), "unknown" where that fails (an installed wheel, no git)."""
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=here,
                             capture_output=True, text=True, timeout=10, check=True)
        return out.stdout.strip() or "unknown"
    except Exception:
        return "unknown"


def provenance(device: str, baseline: str) -> str:
    """The line every table and summary carries: UTC date, device, commit and baseline."""
    return f"{utc_now()}; device: {device}; commit {git_commit()}; baseline: {baseline}"


def command_line(argv, script: str) -> str:
    """The command that made a table: the process's own (argv None), else `script` (a script's
    path or a command's words) with argv."""
    if argv is None:
        return shlex.join(getattr(sys, "orig_argv", [sys.executable] + sys.argv))
    return shlex.join([*script.split(), *argv])


# -- markdown tables ---------------------------------------------------------------------------

def fmt(x: Optional[float], spec: str, default: str = "n/a") -> str:
    return default if x is None else format(x, spec)


def ratio(base: Optional[float], t: Optional[float]) -> str:
    """A baseline's time over this one's ("1.10x": this is faster), "–" without a baseline."""
    return "n/a" if t is None else ("–" if base is None else f"{base / t:.2f}x")


def rate(flop: Optional[float], t: Optional[float], unit: float = 1e12) -> str:
    """flop / t in units of `unit` (TFLOP/s by default)."""
    return "n/a" if t is None or flop is None else f"{flop / t / unit:.3g}"


def error_cell(berr: Optional[float], estimated: bool = False) -> str:
    """A backward error, marked ~ where it is a random-vector estimate."""
    return "n/a" if berr is None else ("~" if estimated else "") + f"{berr:.2e}"


class MarkdownTable:
    """Prints markdown lines as they come; with a path also appends them to that file."""

    def __init__(self, path: Optional[str], columns=(), right=()):
        self.path = path
        self.columns = tuple(columns)
        self.right = tuple(right)     # right-aligned columns

    def emit(self, line: str, stdout: bool = True) -> None:
        if stdout:
            print(line, flush=True)
        if self.path:
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(line + "\n")

    def start(self, title: str, command: str, notes=()) -> None:
        """The preamble (a ### title, the command in backquotes, the notes) and the header."""
        for line in ["", f"### {title}", "", f"`{command}`", "", *notes, "",
                     "| " + " | ".join(self.columns) + " |",
                     "|" + "|".join("---:" if c in self.right else "---"
                                    for c in self.columns) + "|"]:
            self.emit(line)

    @staticmethod
    def format_row(cells) -> str:
        return "| " + " | ".join(str(c) for c in cells) + " |"
