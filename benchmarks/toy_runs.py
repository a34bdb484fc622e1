"""What the toy benchmark scripts share: the editors' toy flags and one in-process ``lightning-edit validate`` run.

Imported by ``toy_bake.py``, ``toy_editing.py``, ``toy_ruleedit.py`` and ``toy_scedit.py`` (Python puts the script's
folder on the path).
"""

import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers is imported
os.environ.setdefault("WANDB_MODE", "offline")

ROOT = Path(__file__).resolve().parents[1]

#: row name -> (method config, composes with a model preset, the toy flags; docs/toy-presets.md says where each is from)
METHODS = {
    "unedited": ("no_edit", False, []),
    "ROME": ("rome", True, []),
    "r-ROME": ("rome", True, ["--model.key=prompt"]),
    "MEMIT": ("memit", True, []),
    "AlphaEdit": ("alphaedit", True, ["--model.nullspace_threshold=0.5", "--model.l2=1"]),
    "GRACE": ("grace", True, ["--model.eps=3"]),
    "WISE": ("wise", True, ["--model.template_lengths=[[10,5],[15,5]]"]),
    "FT": ("ft", True, []),
    "FT-L": ("ft_l", True, ["--model.norm_constraint=1e-2"]),
    "FT-M": ("ft_m", True, []),
    "LoRA": ("lora", True, ["--model.num_steps=20", "--model.early_stop_loss=1e-2", "--model.lr=1e-3"]),
    "RECT": ("rect", True, []),
    "UltraEdit": ("ultraedit", True, ["--model.lr=5e-4"]),
    "MEND": ("mend", True, ["--model.layers=[2,3]"]),  # configs/toy/mend.yaml's; a run adds ckpt_path
    "PROMPT": ("prompt", False, []),
    "IKE": ("ike", False, []),
}
#: the editors' protocols (EditorModule's ``protocol``)
PROTOCOLS = ("single", "batch", "sequential")
#: model -> row name -> flags that replace the toy-gpt2 values above (docs/toy-presets.md)
MODEL_FLAGS = {"toy-llama": {"GRACE": ["--model.eps=9"], "UltraEdit": ["--model.lr=2e-3"]}}


def validate(
    method: str,
    model: str,
    benchmark: str,
    directory: Path,
    flags: list[str],
    protocol: str = "single",
    edit_batch_size: int | None = None,
) -> tuple[dict, float]:
    """Run one row, ``METHODS[method]`` on ``configs/models/<model>.yaml`` (a preset, or the bare model for editors
    that take none) and ``configs/benchmarks/<benchmark>.yaml`` under ``protocol`` (``edit_batch_size`` cases per
    editor call; None: the method config's), then ``flags``; print its command on stderr. The toy flags apply to the
    toy models only (``toy-*``).

    Returns the run's metrics (results.json's) and its wall-clock seconds. A rejected option raises ``ArgumentError``
    (one line under ``tools.run``), as ``lightning-edit`` prints it."""
    from lightning_edit.cli import build_cli  # the scripts check their own options first, without Lightning

    config, composes, toy_flags = METHODS[method]
    toy_flags = toy_flags + MODEL_FLAGS.get(model, {}).get(method, [])  # the later flag wins
    if not model.startswith("toy-"):
        toy_flags = []  # a real model: its preset's values
    if method != "unedited":
        per_call = [] if edit_batch_size is None else [f"--model.edit_batch_size={edit_batch_size}"]
        toy_flags = [f"--model.protocol={protocol}", *per_call, *toy_flags]
    args = [f"--config={ROOT / 'configs/methods' / config}.yaml"]
    args += (
        [f"--config={ROOT / 'configs/models' / model}.yaml"]
        if composes or not model.startswith("toy-")  # a real model: its preset gives every editor its lm
        else [f"--model.lm.path=builtin:models/{model}"]
    )
    args += [
        f"--config={ROOT / 'configs/benchmarks' / benchmark}.yaml",
        f"--trainer.default_root_dir={directory}",
        "--trainer.logger=false",
        "--trainer.enable_progress_bar=false",
        *toy_flags,
        *flags,
    ]
    print("lightning-edit validate " + " ".join(args), file=sys.stderr)
    start = time.perf_counter()
    cli = build_cli(["validate", *args], exit_on_error=False)
    return cli.model.metrics.results, time.perf_counter() - start
