"""The toy world and what is built on it: its training text, the toy models' pretraining and recall, MEND edits.

- :mod:`.relations`, :mod:`.world`: the seeded world of fictional facts (:class:`ToyWorld`, :func:`load_toy_world`)
  and its benchmarks in the real file formats.
- :mod:`.corpus`: :class:`ToyCorpus`, the world's training text as a causal-LM DataModule.
- :mod:`.rule_corpus`: :class:`RuleCorpus`, the true rules of RULE-EDIT as one, for the toy rule model.
- :mod:`.judge_rules`: the toy judge's four rating rules and :class:`ToyRuleJudge`, the rules as a judge;
  :mod:`.judge_corpus`: :class:`JudgeCorpus`, ScEdit's judge templates answered by those rules, for the toy judge.
- :mod:`.pretraining`: :class:`CausalLMPretraining`, which trains the toy models on it.
- :mod:`.recall`: how many facts a model recalls, forward and inverse.
- :mod:`.mend_edits`: :class:`ToyEditTraining`, MEND training edits of the world's facts.
"""

from lightning_edit.toy.corpus import ToyCorpus
from lightning_edit.toy.judge_corpus import JudgeCorpus
from lightning_edit.toy.judge_rules import ToyRuleJudge
from lightning_edit.toy.mend_edits import ToyEditTraining
from lightning_edit.toy.pretraining import CausalLMPretraining
from lightning_edit.toy.rule_corpus import RuleCorpus
from lightning_edit.toy.world import ToyWorld, load_toy_world

__all__ = [
    "CausalLMPretraining",
    "JudgeCorpus",
    "RuleCorpus",
    "ToyCorpus",
    "ToyEditTraining",
    "ToyRuleJudge",
    "ToyWorld",
    "load_toy_world",
]
