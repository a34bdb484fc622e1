"""What a benchmark declares before it reads a case: the metrics of each of its prompt groups
(:class:`DeclaredGroup`), from which :func:`declared_metrics` derives the list of every metric it reports.

A group's metrics are of two sorts, reported in this order: those read off the model's scores of given text (teacher
forcing, probability comparison, multiple choice) and those of text the model generates (generated answers, GE,
judged scripts). The list holds, in report order: each group's ``<group>_filtered`` (kind ``filtered``, for a group
with a pre-edit filter) and metrics of the first sort, then the ``<metric>_pre`` of the groups scored before editing
(``pre_edit``), then each group's metrics of generated text, then the benchmark's derived metrics (kind ``derived``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from lightning_edit.cases import PromptGroup


@dataclass(frozen=True)
class DeclaredGroup:
    """The metrics one prompt group of a benchmark reports, known from the settings alone.

    Args:
        metrics: score kind -> reported name, for the metrics read off the model's scores of given text.
        generated: score kind -> reported name, for the metrics of text the model generates.
        pre_edit_filter: the group's prompts are filtered before editing (:class:`~lightning_edit.cases.PromptGroup`).
        pre_edit: the group is also scored before editing, its metrics reported as ``<metric>_pre``.
    """

    metrics: dict[str, str] = field(default_factory=dict)
    generated: dict[str, str] = field(default_factory=dict)
    pre_edit_filter: bool = False
    pre_edit: bool = False

    @property
    def reported(self) -> dict[str, str]:
        """Every metric of the group, score kind -> reported name: its prompt group's ``metrics``."""
        return self.metrics | self.generated

    def shared_answer(
        self,
        prompts: list[str] | tuple[str, ...],
        expected: str,
        alternative: str | None = None,
        record_field: str | None = None,
    ) -> PromptGroup:
        """The prompt group of ``prompts``, all with one expected answer (and one alternative), reporting these
        metrics with these options (:meth:`PromptGroup.shared_answer`)."""
        return PromptGroup.shared_answer(
            prompts, expected, alternative, self.pre_edit_filter, self.pre_edit, record_field, **self.reported
        )


def declared_metrics(groups: dict[str, DeclaredGroup], derived: Iterable[str] = ()) -> dict[str, str]:
    """Every metric of ``groups`` (group name -> its metrics, in report order) and the ``derived`` ones, name -> score
    kind, in report order (see the module)."""
    metrics: dict[str, str] = {}
    for name, group in groups.items():
        if group.pre_edit_filter:
            metrics[f"{name}_filtered"] = "filtered"
        metrics |= {metric: kind for kind, metric in group.metrics.items()}
    for group in groups.values():
        if group.pre_edit:
            metrics |= {f"{metric}_pre": kind for kind, metric in group.reported.items()}
    for group in groups.values():
        metrics |= {metric: kind for kind, metric in group.generated.items()}
    return metrics | dict.fromkeys(derived, "derived")
