"""One editor's runs over disjoint record ranges of one benchmark file, scored together (not a test).

    python benchmarks/combine_runs.py <root>/smollm2-135m-qaedit-single-PROMPT <root2>/smollm2-135m-qaedit-single-PROMPT

A benchmark too long for one sitting runs in ranges of records (``--data.offset`` and ``--data.limit``;
real_editing.py's ``--offset`` and ``--limit``), each in a run folder of its own. This prints the macro mean of each
metric over the cases of all the runs, from each case's scores in its run's cases.jsonl, with the number of cases and
the ranges: a JSON line, then a Markdown row. A run's macro mean is the mean of its cases' scores, so the means of
disjoint ranges combine exactly; each run's own macro means are recomputed from its cases first, and a metric whose
results.json value is not that mean is refused. The runs must share every setting but the range and the folder (the
config each results.json records), and no record may be a case of two runs; otherwise the script stops in one line
that names the run and the setting or the record.
"""

import json
import math
from pathlib import Path
from typing import Any

from lightning_edit import tools
from lightning_edit.errors import ConfigError

#: settings that may differ between the runs: the range of records and where each run wrote
RANGE = {"data.init_args.offset", "data.init_args.limit", "trainer.default_root_dir"}


def flat(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a.b.c": value}`` of a nested config."""
    settings = {}
    for name, item in config.items():
        key = f"{prefix}{name}"
        settings |= flat(item, f"{key}.") if isinstance(item, dict) else {key: item}
    return settings


def read_run(folder: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A run folder's results.json and the cases of its cases.jsonl."""
    for name in ("results.json", "cases.jsonl"):
        if not (folder / name).is_file():
            raise ConfigError(f"{folder}: no {name}: give the folder of a finished run")
    results = json.loads((folder / "results.json").read_text())
    cases = [json.loads(line) for line in (folder / "cases.jsonl").read_text().splitlines() if line.strip()]
    return results, cases


def case_means(folder: Path, results: dict[str, Any], cases: list[dict[str, Any]]) -> dict[str, list[float]]:
    """Each macro metric's scores of the cases; refused if their mean is not the run's macro mean."""
    scores: dict[str, list[float]] = {}
    for name, metric in results["metrics"].items():
        if not isinstance(metric, dict) or "macro" not in metric:
            continue
        values = [case["scores"][name] for case in cases if name in case.get("scores", {})]
        if not values or not math.isclose(sum(values) / len(values), metric["macro"], rel_tol=1e-9, abs_tol=1e-12):
            raise ConfigError(f"{folder}: metric {name!r}: its macro mean is not the mean of the cases' scores in "
                              "cases.jsonl; it cannot be combined")  # fmt: skip
        scores[name] = values
    return scores


def combine(folders: list[Path]) -> dict[str, Any]:
    """The macro means over the cases of every run, their count and ranges; :class:`ConfigError` if the runs differ
    in a setting but the range or share a record."""
    first_settings: dict[str, Any] | None = None
    sources: dict[str, Path] = {}
    scores: dict[str, list[float]] = {}
    ranges = []
    for folder in folders:
        results, cases = read_run(folder)
        settings = flat(results["config"])
        if first_settings is None:
            first_settings = settings
        for key in sorted((settings.keys() | first_settings.keys()) - RANGE):
            if settings.get(key) != first_settings.get(key):
                raise ConfigError(f"{folder}: {key} is {settings.get(key)!r}, {first_settings.get(key)!r} in "
                                  f"{folders[0]}: only the range of records may differ")  # fmt: skip
        for case in cases:
            if case["source"] in sources:
                raise ConfigError(f"{folder}: record {case['source']} is a case of {sources[case['source']]} too")
            sources[case["source"]] = folder
        run_scores = case_means(folder, results, cases)
        if scores and run_scores.keys() != scores.keys():
            raise ConfigError(f"{folder}: metrics {sorted(run_scores)} differ from {folders[0]}'s {sorted(scores)}")
        for name, values in run_scores.items():
            scores.setdefault(name, []).extend(values)
        ranges.append([settings.get("data.init_args.offset"), settings.get("data.init_args.limit")])
    means = {name: sum(values) / len(values) for name, values in scores.items()}
    return {"cases": len(sources), "ranges (offset, limit)": ranges, "macro": means}


def main() -> None:
    parser = tools.ArgumentParser(description=__doc__)
    parser.add_argument("runs", nargs="+", type=Path, help="run folders (each with results.json and cases.jsonl)")
    parser.add_argument("--metrics", nargs="+", default=None, help="the Markdown row's columns (default: all)")
    args = parser.parse_args()
    combined = combine(args.runs)
    print(json.dumps(combined), flush=True)
    columns = args.metrics or list(combined["macro"])
    unknown = [name for name in columns if name not in combined["macro"]]
    if unknown:
        raise ConfigError(f"--metrics {' '.join(unknown)}: not metrics of the runs ({', '.join(combined['macro'])})")
    print(f"\n| cases | {' | '.join(columns)} |\n|{'---|' * (len(columns) + 1)}")
    values = " | ".join(f"{combined['macro'][name]:.2f}" for name in columns)
    print(f"| {combined['cases']} | {values} |")


if __name__ == "__main__":
    tools.run(main)
