"""Model plumbing: architecture registry, forward-hook tracing and weight snapshots."""

from lightning_edit.models.hooks import Trace, hidden_states, replace_hidden_states
from lightning_edit.models.registry import (
    ARCHITECTURES,
    ArchitectureSpec,
    ModelArchitecture,
    UnsupportedArchitectureError,
    WeightLayout,
    from_linear,
    get_module,
    resolve_architecture,
    to_linear,
    weight_layout,
)
from lightning_edit.models.snapshot import WeightSnapshot

__all__ = [
    "ARCHITECTURES",
    "ArchitectureSpec",
    "ModelArchitecture",
    "UnsupportedArchitectureError",
    "WeightLayout",
    "from_linear",
    "get_module",
    "resolve_architecture",
    "to_linear",
    "weight_layout",
    "Trace",
    "hidden_states",
    "replace_hidden_states",
    "WeightSnapshot",
]
