"""lightning-edit: knowledge editing of causal language models on the Lightning stack."""

__version__ = "0.1.0"
