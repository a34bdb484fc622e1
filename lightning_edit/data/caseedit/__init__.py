"""CaseEdit (household commonsense edits scored by five-option multiple choice): the benchmark's loader, score kinds
and generation pipeline.

- :mod:`.datamodule`: :class:`CaseEdit`, its record schema, cases, metrics and figure;
- :mod:`.multiple_choice`: its score kinds, a prompt's distribution over its five options (letter or cloze);
- :mod:`.generator`: the paper's generation pipeline on a chat LLM, ``python -m
  lightning_edit.data.caseedit.generator``, its prompts in ``lightning_edit/assets/caseedit_prompts/``; nothing
  imports it.
"""

from lightning_edit.data.caseedit.datamodule import QUESTIONS, CaseEdit

__all__ = ["QUESTIONS", "CaseEdit"]
