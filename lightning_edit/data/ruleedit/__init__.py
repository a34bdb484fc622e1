"""RULE-EDIT and RuleEdit-200 (editing mathematical rules): the benchmark's loader, files, rule table and generator.

- :mod:`.datamodule`: :class:`RuleEdit`, its cases, metrics and judged kinds, and its source ``ruleedit-200``;
- :mod:`.files`: how RuleEdit-200's files are laid out and written, read as they are;
- :mod:`.rules`: the paper's 79 rules, read from ``lightning_edit/assets/tables/ruleedit_rules.json``;
- :mod:`.generator`: writes the records from the rule table (``python -m lightning_edit.data.ruleedit.generator``);
  nothing imports it;
- ``templates/``: its LLM judges' templates, ``rule_edit`` and ``rule_edit_ab``, found by name
  (:mod:`lightning_edit.judges.template_files`).
"""

from lightning_edit.data.ruleedit.datamodule import RuleEdit

__all__ = ["RuleEdit"]
