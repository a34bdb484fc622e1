"""The benchmark scripts and the ``python -m`` tools: one-line errors before any model loads (lightning_edit.tools)."""

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tqdm.auto import tqdm

from lightning_edit import cli, tools
from lightning_edit.cli import build_cli
from lightning_edit.errors import ConfigError
from lightning_edit.stats.sample_corpus import main as sample_corpus

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted((ROOT / "benchmarks").glob("*.py"))
MAIN = '\nif __name__ == "__main__":\n'
MISSING = "/nonexistent/model"  # a model that would fail to load: the errors below come before loading it


def run_tool(*args: str, cwd: Path = ROOT, stdout: bool = False) -> tuple[int, list[str]]:
    """(exit status, lines of stderr, or of stdout) of ``python <args>``."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("LIGHTNING_EDIT_DEBUG", None)
    done = subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=120)
    return done.returncode, (done.stdout if stdout else done.stderr).strip().splitlines()


@pytest.mark.parametrize(
    "option, value",
    [("--documents-per-forward", "0"), ("--max-new-tokens", "0"), ("--documents", "-5"), ("--documents", "many")],
)
def test_sample_corpus_refuses_a_bad_count_before_loading(option, value, tmp_path):
    out = tmp_path / "samples.jsonl"
    status, err = run_tool("-m", "lightning_edit.stats.sample_corpus", "--model", MISSING, option, value,
                           "--out", str(out))  # fmt: skip
    assert status == 2 and len(err) == 1, err
    assert err[0].startswith("python -m lightning_edit.stats.sample_corpus: error: argument")
    assert option in err[0] and f"expected a positive integer, got '{value}'" in err[0]
    assert not out.exists()


@pytest.mark.parametrize("where", ["under a file", "a folder"])
def test_sample_corpus_refuses_an_unwritable_out_before_loading(where, tmp_path):
    (tmp_path / "file").write_text("x")
    out = tmp_path / "file" / "samples.jsonl" if where == "under a file" else tmp_path
    status, err = run_tool("-m", "lightning_edit.stats.sample_corpus", "--model", MISSING, "--out", str(out))
    assert status == 1 and len(err) == 1, err
    assert f"--out {str(out)!r}: cannot write there" in err[0]


def test_sample_corpus_names_a_missing_model_in_one_line(tmp_path):
    out = tmp_path / "samples.jsonl"
    status, err = run_tool("-m", "lightning_edit.stats.sample_corpus", "--model", MISSING, "--out", str(out))
    assert status == 1 and len(err) == 1, err
    assert err[0].startswith("python -m lightning_edit.stats.sample_corpus: error:") and MISSING in err[0]
    assert not list(tmp_path.iterdir())  # no corpus, no temporary file


def test_sample_corpus_shows_progress_and_replaces_the_out_file_only_when_done(tmp_path, capsys):
    out = tmp_path / "samples.jsonl"
    out.write_text('{"text": "the previous corpus"}\n')
    sample_corpus(["--model", "builtin:models/tiny-gpt2", "--documents", "3", "--max-new-tokens", "4",
                   "--documents-per-forward", "2", "--out", str(out)])  # fmt: skip
    err = capsys.readouterr().err
    assert "sampling" in err and "3/3" in err, err
    assert len(out.read_text().splitlines()) == 3 and [path.name for path in tmp_path.iterdir()] == [out.name]


@pytest.mark.parametrize(
    "script, args, option, words",
    [
        ("lifelong_stream.py", ["--edits", "-5"], "--edits", "expected a positive integer, got '-5'"),
        ("causal_trace.py", ["--model", MISSING, "--data", "x.json", "--out", "x", "--facts", "0"], "--facts",
         "expected a positive integer, got '0'"),
        ("toy_editing.py", ["--protocols", "singel"], "--protocols", "invalid choice: 'singel'"),
    ],
)  # fmt: skip
def test_a_benchmark_script_refuses_a_bad_option_in_one_line(script, args, option, words, tmp_path):
    status, err = run_tool(str(ROOT / "benchmarks" / script), *args, "--root", str(tmp_path), cwd=tmp_path)
    assert status == 2 and len(err) == 1, err
    assert err[0].startswith(f"{script}: error: argument {option}") and words in err[0]
    assert err[0].endswith(f"({script} --help lists the options)")
    assert not list(tmp_path.iterdir())  # nothing ran


def entry_points() -> list[Path]:
    """Every benchmark script and every package module with a ``__main__`` block."""
    found = [*SCRIPTS, *(ROOT / "lightning_edit").rglob("*.py")]
    return [path for path in found if MAIN in path.read_text() and path.name != "__main__.py"]


@pytest.mark.parametrize("path", entry_points(), ids=lambda path: str(path.relative_to(ROOT)))
def test_every_tool_parses_and_fails_through_the_shared_helper(path):
    """A class check: the parser is tools.ArgumentParser and ``__main__`` calls ``tools.run(main)``; counts that must
    be positive use tools.positive_int."""
    tree = ast.parse(path.read_text())
    calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call)]
    names = [ast.unparse(call.func) for call in calls]
    assert "argparse.ArgumentParser" not in names and "tools.ArgumentParser" in names
    main_block = next(node for node in tree.body if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test))
    assert ast.unparse(main_block.body[-1]) == "tools.run(main)"
    for call in calls:
        if names[calls.index(call)].endswith("add_argument"):
            kinds = {keyword.arg: ast.unparse(keyword.value) for keyword in call.keywords}
            assert kinds.get("type") != "int" or ast.unparse(call.args[0]) in INTEGERS, ast.unparse(call)


#: integer options that may be zero or negative on purpose
INTEGERS = {"'--seed'", "'--seeds'", "'--batch'"}


def test_a_rejected_option_of_an_in_process_run_is_one_line(tmp_path):
    """toy_runs.validate runs `lightning-edit validate` in the script's process: a rejected option is one line
    (jsonargparse printed the whole usage of validate, 62 lines)."""
    code = (
        "import sys; sys.path.insert(0, 'benchmarks'); from lightning_edit import tools; "
        "from toy_runs import validate; "
        f"tools.run(lambda: validate('ROME', 'toy-gpt2', 'counterfact', __import__('pathlib').Path({str(tmp_path)!r}), "
        "['--data.limit=1'], protocol='singel'))"
    )
    status, err = run_tool("-c", code)
    assert status == 2 and len(err) == 2, err  # the command line of the run, then the error
    assert "protocol" in err[1] and "singel" in err[1]


@pytest.mark.parametrize("runner", ["lightning-edit", "tool"])
def test_an_error_inside_a_loop_prints_its_line_after_the_loops_bar_not_at_its_end(runner, monkeypatch, capsys):
    """A run that stops or fails in a loop whose tqdm bar something else holds (Lightning's TQDMProgressBar holds its
    validation bar; here the loop's frame, which the exception keeps) leaves the bar open, on a line with no end: the
    error's one line is printed on a line of its own, after the bar's."""

    def fails_in_a_loop(*args: object, **kwargs: object) -> None:
        bar = tqdm(total=10, desc="edits", file=sys.stderr)
        bar.update(3)
        raise ConfigError("--model.x=1: out of range")

    if runner == "lightning-edit":
        monkeypatch.setattr(cli, "build_cli", fails_in_a_loop)
        monkeypatch.setattr(cli.signal, "signal", lambda *args: None)  # main's SIGTERM handler stays the test's
        monkeypatch.delenv("LIGHTNING_EDIT_DEBUG", raising=False)
        with pytest.raises(SystemExit):
            cli.main(["validate"])
    else:
        monkeypatch.setattr(tools.signal, "signal", lambda *args: None)
        with pytest.raises(SystemExit):
            tools.run(fails_in_a_loop)
    bar, error = capsys.readouterr().err.rsplit("\n", 2)[:2]
    assert "edits:" in bar and error.endswith("error: --model.x=1: out of range"), (bar, error)
    assert error.startswith("lightning-edit:" if runner == "lightning-edit" else tools.tool_name())


def test_causal_tracing_stops_on_sigterm_between_facts_and_keeps_what_it_traced(tmp_path, monkeypatch, capsys):
    """SIGTERM during the first fact: that fact is finished, written to the JSON and the figure, and the tool exits
    with 143 in one line saying so; the remaining facts are not traced."""
    import importlib.util
    import json
    import signal

    from lightning_edit import tools

    spec = importlib.util.spec_from_file_location("causal_trace", ROOT / "benchmarks" / "causal_trace.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    traced = []

    def trace_then_signal(*args, **kwargs):
        traced.append(args[3])
        if len(traced) == 1:
            os.kill(os.getpid(), signal.SIGTERM)  # the handler tools.run installs records it
        return script_trace_fact(*args, **kwargs)

    script_trace_fact = script.trace_fact
    monkeypatch.setattr(script, "trace_fact", trace_then_signal)
    out = tmp_path / "trace"
    monkeypatch.setattr(sys, "argv", ["causal_trace.py", "--model", "builtin:models/toy-gpt2", "--data",
                                      "builtin:data/toy/counterfact.json", "--facts", "3", "--samples", "1",
                                      "--kinds", "hidden", "--out", str(out)])  # fmt: skip
    handler = signal.getsignal(signal.SIGTERM)
    try:
        with pytest.raises(SystemExit) as stop:
            tools.run(script.main)
    finally:
        signal.signal(signal.SIGTERM, handler)
    assert stop.value.code == 143 and len(traced) == 1
    err = [line for line in capsys.readouterr().err.splitlines() if "error" in line]  # (the loader's progress bar)
    assert len(err) == 1 and ": error: causal tracing stopped by signal 15 after 1 of 3 facts;" in err[0]
    summary = json.loads((tmp_path / "trace.json").read_text())
    assert summary["facts"] == 1 and summary["stopped"] == "signal 15 after 1 of 3 facts"
    assert (tmp_path / "trace.png").stat().st_size > 0


def test_runs_over_disjoint_ranges_combine_to_the_run_over_all_and_overlaps_are_refused(tmp_path, monkeypatch):
    """combine_runs.py: NoEdit's runs over records 0-1 and 2-4 of the bundled CounterFact file give, together, the macro
    means of one run over 0-4; overlapping ranges, or runs that differ in a setting, are refused in one line."""
    monkeypatch.setattr(sys, "argv", ["lightning-edit"])
    monkeypatch.chdir(tmp_path)

    def run(name: str, offset: int, limit: int, *flags: str) -> Path:
        build_cli(["validate", "--model=NoEdit", "--model.lm.path=builtin:models/tiny-gpt2", "--data=CounterFact",
                   "--data.path=builtin:data/counterfact-flat.json", f"--data.offset={offset}",
                   f"--data.limit={limit}", "--trainer.logger=false", "--trainer.enable_progress_bar=false",
                   f"--trainer.default_root_dir={tmp_path / name}", *flags])  # fmt: skip
        return tmp_path / name

    head, tail, whole = run("head", 0, 2), run("tail", 2, 3), run("whole", 0, 5)
    status, out = run_tool(str(ROOT / "benchmarks/combine_runs.py"), str(head), str(tail), "--metrics", "ES", "NS",
                           stdout=True)  # fmt: skip
    assert status == 0, out
    combined = json.loads(out[0])
    expected = json.loads((whole / "results.json").read_text())["metrics"]
    assert combined["cases"] == 5 and combined["ranges (offset, limit)"] == [[0, 2], [2, 3]]
    assert combined["macro"].keys() == {name for name, value in expected.items() if "macro" in value}
    for name, mean in combined["macro"].items():
        assert mean == pytest.approx(expected[name]["macro"], rel=1e-12, abs=1e-12), name
    assert out[-1] == f"| 5 | {expected['ES']['macro']:.2f} | {expected['NS']['macro']:.2f} |"

    status, err = run_tool(str(ROOT / "benchmarks/combine_runs.py"), str(head), str(whole))
    assert status == 1 and len(err) == 1, err
    assert err[0].startswith(f"combine_runs.py: error: {whole}: record ") and f"is a case of {head} too" in err[0]
    other = run("other", 2, 3, "--seed_everything=1")
    status, err = run_tool(str(ROOT / "benchmarks/combine_runs.py"), str(head), str(other))
    assert status == 1 and len(err) == 1, err
    assert err[0] == (f"combine_runs.py: error: {other}: seed_everything is 1, 0 in {head}: only the range of records "
                      "may differ")  # fmt: skip
