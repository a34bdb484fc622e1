"""The 7B-shape GPU script's dry run: a small LLaMA shape on CPU, every editor, both dtypes (benchmarks/gpu_7b_shape.py;
the figures themselves come from a GPU, docs/editors/locate-then-edit.md#memory-budget)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_dry_run_prints_a_row_per_editor_and_dtype(tmp_path):
    command = [
        sys.executable, str(ROOT / "benchmarks/gpu_7b_shape.py"), "--shape", "small", "--device", "cpu",
        "--requests", "1", "--memit-requests", "2", "--documents", "8", "--document-words", "32",
        "--matmul-size", "256", "--root", str(tmp_path),
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=900, check=True)
    rows = [line.split("|")[1:-1] for line in done.stdout.splitlines() if line.startswith("| ") and "dtype" not in line]
    table = {(row[0].strip(), row[1].strip()) for row in rows}
    assert table == {(editor, dtype) for editor in ("ROME", "MEMIT", "AlphaEdit", "UltraEdit") for dtype in
                     ("bfloat16", "float32")}  # fmt: skip
    assert all(float(row[3]) > 0 and float(row[6]) > 0 for row in rows)  # seconds per edit, fraction of matmul rate
    assert not list(tmp_path.glob("*/model*.safetensors"))  # the weights are deleted after each dtype
