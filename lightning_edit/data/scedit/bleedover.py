"""ScEdit's S-BO score kind: how much probability a neighbour's own object lost through the edit (ScEdit-T)."""

from __future__ import annotations

import math

from lightning_edit.scoring.kinds import ScoreKind, Target


class Bleedover(ScoreKind):
    """ScEdit's S-BO: how much probability a neighbour's own object lost through the edit (0 if none)."""

    name = "bleedover"
    label = "probability drop"
    higher_is_better = False
    convention = (
        "max(P_pre(o) - P_post(o), 0) with P = exp(-mean per-token NLL) of the expected (the neighbour's own) "
        "object after the prompt, before and after editing (ScEdit S-BO; lower is better)"
    )

    def requests(self, item, config):
        return [Target(item.prompt, item.expected)]

    def reference_requests(self, item, config):
        return [Target(item.bare_prompt, item.expected)]

    def value(self, item, current, unedited):
        return max(math.exp(-unedited[0].nll) - math.exp(-current[0].nll), 0.0)
