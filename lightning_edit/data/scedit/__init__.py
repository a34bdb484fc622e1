"""ScEdit (does an edit reach the how-to scripts a model writes?): the benchmark's loader, score kind, figure,
record builders and judge templates.

- :mod:`.datamodule`: :class:`ScEdit`, its cases and metrics (token and text level), and its sources ``scedit-cf``
  and ``scedit-t``;
- :mod:`.bleedover`: S-BO's score kind;
- :mod:`.spearman`: the Spearman heatmap of its metrics over the cases;
- :mod:`.records`: ScEdit-style records built from a fact and its scripts (:func:`scedit_cf_record`,
  :func:`script_cloze`);
- ``templates/``: the four text-level judge templates (``scedit_*``), found by name
  (:mod:`lightning_edit.judges.template_files`).
"""

from lightning_edit.data.scedit.datamodule import ScEdit
from lightning_edit.data.scedit.records import scedit_cf_record, script_cloze

__all__ = ["ScEdit", "scedit_cf_record", "script_cloze"]
