"""Peak memory by phase (docs/metrics.md#memory): the host's peak resident set and each GPU's, and who set them."""

import json
import subprocess
import sys
from types import SimpleNamespace

import torch

from lightning_edit.peak_memory import PeakMemory


def test_the_phase_that_allocated_most_holds_the_host_peak():
    """Also when a larger process starts it (Lightning launches its processes so): the child's peak is its own."""
    parent = torch.ones(3 * 2**26)  # 768 MiB, touched
    script = (
        "import torch; from torch import nn; from lightning_edit.peak_memory import PeakMemory\n"
        "model, memory = nn.Linear(2, 2), PeakMemory()\n"
        "memory.enter('editing', model); big = torch.ones(2**27); del big\n"  # 512 MiB, touched
        "memory.enter('scoring', model); small = torch.ones(2**20)\n"
        "import json; print(json.dumps(memory.record(model)))\n"
    )
    output = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    del parent
    record = json.loads(output)
    assert record["host_peak_phase"] == "editing" and record["host_peak_bytes"] > 2**29
    assert "gpu_peak_bytes" not in record and "target_budget_bytes" not in record


def test_each_gpu_keeps_its_highest_phase(monkeypatch):
    peaks = {"cuda:0": [100, 300, 50], "cuda:1": [10, 20, 30]}
    resets = []
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device: peaks[device].pop(0))
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", resets.append)
    model = SimpleNamespace(parameters=lambda: [SimpleNamespace(device=torch.device("cuda", i)) for i in (0, 1, 1)])
    memory = PeakMemory()
    memory.enter("statistics", model)  # loading: 100 and 10
    memory.enter("editing", model)  # statistics: 300 and 20
    memory.note_budget(7)
    memory.note_budget(5)
    record = memory.record(model)  # editing: 50 and 30
    assert record["gpu_peak_bytes"] == {"cuda:0": 300, "cuda:1": 30}
    assert record["gpu_peak_phase"] == {"cuda:0": "statistics", "cuda:1": "editing"}
    assert record["target_budget_bytes"] == 7
    assert resets == ["cuda:0", "cuda:1"] * 3  # each phase's counter is its own
