"""Dataset generators: the programs that write benchmark files, beside the loaders of :mod:`lightning_edit.data`.

- :mod:`~lightning_edit.generators.ruleedit`: RULE-EDIT's records from the rule table (``builtin:data/ruleedit``);
- :mod:`~lightning_edit.generators.caseedit`: CaseEdit's records from seeds, through an LLM (the paper's pipeline).

Each runs as ``python -m lightning_edit.generators.<name>``; no loader imports them.
"""
