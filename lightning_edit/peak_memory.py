"""The run's peak memory, on the host and on each GPU it uses, and the phase of the run that set each.

A run passes through phases: ``loading`` (everything before the first mark: imports, the model, a GGUF conversion),
``statistics`` (the key statistics pass), ``editing`` (editor calls: the v*/z optimisation, the solves),
``scoring`` (the scoring forwards, generation and judges) and, after a fit, ``exporting``. The protocol marks where
each begins (:meth:`PeakMemory.enter`); at every mark the peaks of the phase that ends are read: the host's peak
resident set (``VmHWM``, which only grows: a phase that raised it set the peak so far) and each CUDA device's
``torch.cuda.max_memory_allocated``, whose counter is then reset, so that the next phase's peak is its own. results.json
reports them under ``memory`` and each ``stream`` checkpoint carries them (docs/metrics.md#memory).
"""

from __future__ import annotations

import resource
import sys
from pathlib import Path
from typing import Any

import torch
from torch import nn


def host_peak_bytes() -> int:
    """The process's peak resident set so far, in bytes: Linux's ``VmHWM`` (of this program: ``ru_maxrss`` would
    start from the parent's size when a large process forks it, as Lightning launches its processes), else
    ``ru_maxrss`` (bytes on macOS)."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if sys.platform == "darwin" else peak * 1024
    kib = next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:"))
    return int(kib) * 1024


class PeakMemory:
    """Peaks of one process: the host's and each CUDA device's, with the phase in which each was set."""

    def __init__(self) -> None:
        self.phase = "loading"
        self.host: tuple[int, str] = (0, "loading")  # (bytes, phase)
        self.gpus: dict[str, tuple[int, str]] = {}  # device -> (bytes, phase)
        self.target_budget: int | None = None  # the largest v*/z memory budget in force (editors/graph_budget.py)

    def enter(self, phase: str, model: nn.Module) -> None:
        """End the current phase (its peaks read on the host and on ``model``'s CUDA devices) and begin ``phase``."""
        self.read(model)
        self.phase = phase

    def read(self, model: nn.Module) -> None:
        """Take the current phase's peaks into account (the GPU counters reset)."""
        host = host_peak_bytes()
        if host > self.host[0]:
            self.host = (host, self.phase)
        for device in sorted({str(p.device) for p in model.parameters() if p.device.type == "cuda"}):
            peak = torch.cuda.max_memory_allocated(device)
            if peak > self.gpus.get(device, (0, ""))[0]:
                self.gpus[device] = (peak, self.phase)
            torch.cuda.reset_peak_memory_stats(device)

    def note_budget(self, budget: int) -> None:
        """Keep the largest memory budget a v*/z optimisation of the run had."""
        self.target_budget = max(budget, self.target_budget or 0)

    def record(self, model: nn.Module) -> dict[str, Any]:
        """The peaks so far: ``host_peak_bytes``/``host_peak_phase``, ``gpu_peak_bytes``/``gpu_peak_phase`` by device
        (when the model is on a GPU), ``target_budget_bytes`` (when a v*/z optimisation ran)."""
        self.read(model)
        record: dict[str, Any] = {"host_peak_bytes": self.host[0], "host_peak_phase": self.host[1]}
        if self.gpus:
            record["gpu_peak_bytes"] = {device: peak for device, (peak, _) in self.gpus.items()}
            record["gpu_peak_phase"] = {device: phase for device, (_, phase) in self.gpus.items()}
        if self.target_budget is not None:
            record["target_budget_bytes"] = self.target_budget
        return record
