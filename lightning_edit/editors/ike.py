"""IKE (Zheng et al., 2023) and PROMPT: editing by in-context learning alone.

See docs/editors/ike-prompt.md#ike-and-prompt. The edit lives in the prompt (:mod:`lightning_edit.editors.in_context`);
no weight changes. With 0 demonstrations this is PROMPT, the new fact alone before the question.
"""

from __future__ import annotations

from lightning_edit.editors.in_context import InContext
from lightning_edit.editors.no_edit import NoEdit
from lightning_edit.models.loading import ModelSource


class IKE(NoEdit):
    """In-context knowledge editing: the edit lives in the prompt, no weight changes (PROMPT with 0 demonstrations).

    Args:
        lm: the causal language model.
        in_context: the demonstrations and their retrieval (default: none, i.e. PROMPT).
        **kwargs: protocol, scoring, ... (see EditorModule).
    """

    def __init__(self, lm: ModelSource, in_context: InContext | None = None, **kwargs):
        super().__init__(lm, in_context=in_context or InContext(), **kwargs)
