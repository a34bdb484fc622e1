"""Held-out toy edits, the development sets the toy presets' values were chosen on (not tests).

    python benchmarks/toy_heldout.py /tmp/toy_dev     # writes bake_dev.json (517 edits), counterfact_dev.json (200),
                                                      # ruleedit_dev/ (rule edits for the toy rule model)
    lightning-edit validate --config configs/methods/rome.yaml --config configs/models/toy-llama.yaml \\
        --config configs/benchmarks/bake.yaml --data.path /tmp/toy_dev/bake_dev.json

Edits of the shipped toy world drawn as the shipped files were, with other seeds, and none of a (subject, relation)
pair of the shipped BAKE or CounterFact files, so no shipped test edit is tuned on:

- ``bake_dev.json``: ``bake_records`` with the seeds ``world.seed + k``, k = 1 ... 59, keeping the first
  edit of each (subject, relation, new object);
- ``counterfact_dev.json``: the first 100 records of ``counterfact_records`` with the seed
  ``world.seed + 1000``, then the first 100 with ``world.seed + 2000`` of a pair not drawn yet.

The toy rule model knows only the 79 rules, so its held-out set (``ruleedit_dev/``, the RuleEdit-200 format) edits
the same prompts towards other targets: each rule's formula becomes the next rule of its shape's right-hand side under
its own left-hand symbol ("A = x * y." -> "A = 2 * (x + y)."), its description that rule's description; no edit is
the shipped counterfactual. Only Rel, Gen and Loc of this set mean anything (IP and RU keep the shipped targets).
"""

import json
from dataclasses import replace
from pathlib import Path

from lightning_edit import tools
from lightning_edit.data.records import read_records
from lightning_edit.resources import resolve_path
from lightning_edit.toy.benchmark_records import bake_records, counterfact_records
from lightning_edit.toy.world import ToyWorld, load_toy_world

SHIPPED = ("builtin:data/toy/bake_qa.json", "builtin:data/toy/counterfact.json")


def pair(record: dict) -> tuple[str, str]:
    """(subject, relation) of a ROME-format record."""
    return record["requested_rewrite"]["subject"], record["requested_rewrite"]["relation_id"]


def heldout_bake(world: ToyWorld, taken: set[tuple[str, str]], draws: int = 59) -> list[dict]:
    """The first edit of each (subject, relation, new object) of ``draws`` BAKE draws, none of a ``taken`` pair."""
    records, seen = [], set()
    for k in range(1, draws + 1):
        for record in bake_records(replace(world, seed=world.seed + k), len(world.facts)):
            edit = (*pair(record), record["requested_rewrite"]["target_new"]["str"])
            if pair(record) not in taken and edit not in seen:
                seen.add(edit)
                records.append({**record, "case_id": len(records)})
    return records


def heldout_counterfact(world: ToyWorld, taken: set[tuple[str, str]], per_draw: int = 100) -> list[dict]:
    """The first ``per_draw`` CounterFact edits of the seeds + 1000 and + 2000 of a pair neither taken nor drawn."""
    taken, records = set(taken), []
    for offset in (1000, 2000):
        drawn = counterfact_records(replace(world, seed=world.seed + offset), len(world.facts))
        for record in [r for r in drawn if pair(r) not in taken][:per_draw]:
            taken.add(pair(record))
            records.append({**record, "case_id": len(records)})
    return records


def heldout_ruleedit(out: Path, shipped: str = "builtin:data/ruleedit") -> int:
    """Write ``out/<rule>/f_d.json`` and ``ins.json``: the shipped rule records with held-out formula and description
    targets (see the module); returns the number of rules written."""
    folders = sorted((f for f in resolve_path(shipped).iterdir() if f.name.isdigit()), key=lambda f: int(f.name))
    records = {f: json.loads((f / "f_d.json").read_text(encoding="utf-8")) for f in folders}
    by_shape: dict[str, list[Path]] = {}
    for folder in folders:
        by_shape.setdefault(records[folder][0]["subject"], []).append(folder)
    written = 0
    for shape, members in by_shape.items():
        for i, folder in enumerate(members[:-1] if len(members) == 2 else members):
            other = records[members[(i + 1) % len(members)]]
            formula, description = records[folder]
            symbol = formula["ground_truth"][0].split("=")[0].strip()
            targets = (
                f"{symbol} = {other[0]['ground_truth'][0].split('=', 1)[1].strip()}",
                other[1]["ground_truth"][0],
            )
            edited = []
            for record, target in zip((formula, description), targets):
                if target in (record["target_new"], record["ground_truth"][0]):
                    break
                edited.append({**record, "target_new": target})
            if len(edited) < 2 or len(members) < 2:
                continue
            (out / folder.name).mkdir(parents=True, exist_ok=True)
            (out / folder.name / "f_d.json").write_text(json.dumps(edited, indent=1), encoding="utf-8")
            (out / folder.name / "ins.json").write_text((folder / "ins.json").read_text(encoding="utf-8"), "utf-8")
            written += 1
    return written


def main() -> None:
    parser = tools.ArgumentParser(description=__doc__)
    parser.add_argument("out", type=Path, help="the directory to write the files to")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    world = load_toy_world("builtin:data/toy/world.json")
    shipped = {pair(record) for path in SHIPPED for record in read_records(path)}
    files = {"bake_dev.json": heldout_bake(world, shipped), "counterfact_dev.json": heldout_counterfact(world, shipped)}
    for name, records in files.items():
        (args.out / name).write_text(json.dumps(records, indent=1), encoding="utf-8")
        print(f"{len(records)} held-out toy edits -> {args.out / name}")
    print(f"{heldout_ruleedit(args.out / 'ruleedit_dev')} held-out toy rules -> {args.out / 'ruleedit_dev'}")


if __name__ == "__main__":
    tools.run(main)
