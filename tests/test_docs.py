"""The documentation stays true: every documented command resolves, and every page a file cites has the heading
it names.

Commands: each ``lightning-edit validate ...`` and ``lightning-edit fit ...`` of README.md, data/README.md and
docs/**/*.md, read when the tests are collected from shell code blocks (backslash continuations joined, comments and
what precedes ``lightning-edit`` on its line dropped) and from inline code spans. A placeholder becomes a shipped file
or a value of its kind (:data:`PLACEHOLDERS`), an elided value a complete one (:data:`ELIDED`), and the command is
resolved in process as ``--print_config`` resolves it: jsonargparse checks every config path, option and value, and
nothing is instantiated, so no model or data is loaded and no accelerator is needed.

References: a page cited as plain text (``docs/<page>.md`` with or without ``#<anchor>``, in the package, configs,
benchmarks, tests and the Markdown pages) and a Markdown link between pages (``[text](<page>.md#<anchor>)``) name a
file that exists and, with an anchor, one of its headings (GitHub's slugs).
"""

import contextlib
import io
import os
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from lightning_edit.cli import build_cli

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "fixtures"


def markdown_pages() -> list[Path]:
    return [ROOT / "README.md", ROOT / "data/README.md", *sorted((ROOT / "docs").rglob("*.md"))]


# ----------------------------------------------------------------------------------------------------------------
# Documented commands

COMMAND = re.compile(r"lightning-edit\s+(?:validate|fit)(?=\s|$)")
FENCE = re.compile(r"^\s*(```+|~~~+)\s*([^\s`]*)")  # the fence and its language (``{toctree}``: a directive)
SHELL_LANGUAGES = {"bash", "sh", "shell", "console", ""}
CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.DOTALL)
PLACEHOLDER = re.compile(r"<[^<>\s][^<>]*>")
#: What ends the command on its line.
SHELL_OPERATORS = {"&&", "||", ";", "|", ">", ">>", "2>", "&"}
#: A placeholder of the documented commands (a pattern) and what stands for it: a shipped file of the kind it names,
#: else a value of that kind (resolving a command opens no file: a path only has to be a string).
PLACEHOLDERS = {
    r"<model dir or hub id>": "builtin:models/tiny-gpt2",
    r"<[\w ]+>/counterfact[\w.-]*\.json": "builtin:data/counterfact-flat.json",  # a CounterFact split, flat
    r"<[\w ]+>/zsre[\w.-]*\.json": "builtin:data/zsre.json",
    r"<[\w ]+>/mend\.pt": "mend.pt",  # what lightning-edit fit of MEND writes
    r"<corpus>|\S+-samples\.jsonl": "builtin:data/toy/corpus.txt",  # what lightning_edit.stats.sample_corpus writes
    r"<file>": "builtin:data/counterfact-flat.json",  # a benchmark file, a pool of in-context demonstrations
    r"<method>": "rome",  # configs/methods/<method>.yaml
    r"<toy>": "toy-gpt2",  # configs/models/<toy>.yaml
    r"<η>": "2e-3",
    r"<layers>": "[1,2]",
}
#: What stands for an elided value (``--config ...``), by option; ``...`` right after the subcommand stands for
#: ``--config ...`` (the rest of a run), elsewhere (after the last option, in a list of a quoted value) it is dropped.
ELIDED = {
    "--config": str(ROOT / "configs/quickstart.yaml"),  # a complete run: ROME, the toy GPT-2, toy CounterFact
    "--data.train_path": str(FIXTURES / "data/counterfact-train-real-4.json"),
    "--data.val_path": str(FIXTURES / "data/counterfact-train-real-4.json"),
}


@dataclass(frozen=True)
class DocumentedCommand:
    """A command as a page shows it (``text``, placeholders and elisions kept), and the line it starts on."""

    page: Path
    line: int
    text: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT) if self.page.is_relative_to(ROOT) else self.page}:{self.line}"

    def argv(self) -> list[str]:
        """The arguments after ``lightning-edit``: the subcommand first, with the placeholders and elisions filled."""
        text = self.text
        for placeholder, value in PLACEHOLDERS.items():
            text = re.sub(placeholder, value, text)
        unknown = PLACEHOLDER.findall(text)
        assert not unknown, f"{self.where}: placeholder {unknown} of `{self.text}` is not in PLACEHOLDERS"
        try:
            words = shlex.split(text, comments=True)[1:]  # the text starts at lightning-edit
        except ValueError as error:
            raise AssertionError(f"{self.where}: `{self.text}` is not a shell command: {error}") from None
        end = next((i for i, word in enumerate(words) if word in SHELL_OPERATORS), len(words))
        argv = []
        for word in words[:end]:
            if word == "...":
                if len(argv) == 1:
                    argv.append("--config")
                if argv[-1] in ELIDED:
                    argv.append(ELIDED[argv[-1]])
                continue
            argv.append(re.sub(r"\.\.\.\s*,\s*|,\s*\.\.\.\s*(?=[]}])", "", word))  # `{a: 0, ..., b: 1}`
        return argv


def documented_commands(page: Path) -> list[DocumentedCommand]:
    """The ``lightning-edit validate|fit`` commands of a Markdown page, in shell code blocks and inline code spans. A
    bare mention (``lightning-edit fit``, no argument) is not a command."""
    lines = page.read_text(encoding="utf-8").splitlines()
    prose = list(lines)  # the page with the lines of its code blocks blanked
    block: list[tuple[int, str]] = []  # (line number, line) of the shell code block being read
    fence, language = None, ""
    commands = []
    for number, line in enumerate(lines, start=1):
        opening = FENCE.match(line)
        if fence is None and not opening:
            continue
        prose[number - 1] = ""
        if fence is None:
            fence, language = opening.group(1), opening.group(2)
        elif line.strip().startswith(fence) and not line.strip().strip(fence[0]):
            commands += _block_commands(page, block) if language in SHELL_LANGUAGES else []
            fence, block = None, []
        else:
            block.append((number, line))
    commands += _inline_commands(page, prose)
    return sorted((command for command in commands if len(command.text.split()) > 2), key=lambda c: c.line)


def _block_commands(page: Path, block: list[tuple[int, str]]) -> list[DocumentedCommand]:
    """The commands of a shell code block, one per logical line (backslash continuations joined) that has one outside
    its comment."""
    commands = []
    logical, numbers = "", []  # the logical line so far; the line number at the start of each of its parts
    for number, line in block:
        numbers.append((len(logical), number))
        logical += line.rstrip()
        if logical.endswith("\\"):
            logical = logical[:-1] + " "
            continue
        found = COMMAND.search(logical)
        if found and not re.search(r"(^|\s)#", logical[: found.start()]):
            line_number = max(number for offset, number in numbers if offset <= found.start())
            commands.append(DocumentedCommand(page, line_number, " ".join(logical[found.start() :].split())))
        logical, numbers = "", []
    return commands


def _inline_commands(page: Path, prose: list[str]) -> list[DocumentedCommand]:
    """The commands of the inline code spans of the prose (a span may run over the lines of its paragraph)."""
    commands = []
    text = "\n".join(prose)
    for paragraph in re.finditer(r"(?:[^\n]+\n?)+", text):
        for span in CODE_SPAN.finditer(paragraph.group()):
            found = COMMAND.search(span.group(2))
            if found:
                line = text.count("\n", 0, paragraph.start() + span.start(2) + found.start()) + 1
                commands.append(DocumentedCommand(page, line, " ".join(span.group(2)[found.start() :].split())))
    return commands


def resolve(command: DocumentedCommand) -> None:
    """Resolve ``command`` as ``--print_config`` does (or print the help it asks for: ``--help``, ``--model.help
    ROME``); an AssertionError names the page, the line, the command and what jsonargparse or the config files
    reject."""
    argv = command.argv()
    if not any(word in ("-h", "--help", "--print_config") or word.endswith(".help") for word in argv):
        argv.append("--print_config")
    output = io.StringIO()
    try:
        with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
            build_cli(argv, exit_on_error=False)
    except SystemExit as exit_info:
        if exit_info.code in (0, None):
            return
        error = f"exit status {exit_info.code}: {output.getvalue().strip()[-2000:]}"
    except Exception as rejected:  # ArgumentError, a preset's ConfigError, ...: its message says what is wrong
        error = f"{type(rejected).__name__}: {rejected}"
    else:
        error = "it ran instead of resolving"
    raise AssertionError(f"{command.where}: `{command.text}` does not resolve\n{error}")


DOCUMENTED_COMMANDS = [command for page in markdown_pages() for command in documented_commands(page)]


@pytest.fixture
def in_repo(monkeypatch):
    """Commands as a clone runs them: paths relative to the repository, the test runner's flags not in ``sys.argv``."""
    monkeypatch.setattr(sys, "argv", ["lightning-edit"])
    monkeypatch.chdir(ROOT)


@pytest.mark.usefixtures("in_repo")
@pytest.mark.parametrize("command", DOCUMENTED_COMMANDS, ids=lambda command: command.where)
def test_documented_command_resolves(command):
    resolve(command)


TYPO_PAGE = """\
# Commands with mistakes

```bash
pip install -e . && lightning-edit validate --config configs/quickstart.yaml \\
    --data.limt 5   # a misspelt option
lightning-edit validate --config configs/methods/rmoe.yaml --config configs/models/toy-gpt2.yaml
lightning-edit validate --config configs/quickstart.yaml --model.protocol sequentail
```

Then `lightning-edit fit --config
configs/toy/gpt2.yaml --model.num_layer 8` trains.
"""


@pytest.mark.usefixtures("in_repo")
@pytest.mark.parametrize(
    ("line", "rejected"),
    [(4, "Option 'limt' is not accepted"), (6, "rmoe.yaml"), (7, "sequentail"), (10, "Option 'num_layer'")],
)
def test_a_mistake_in_a_documented_command_fails_naming_page_line_and_command(tmp_path, line, rejected):
    page = tmp_path / "page.md"
    page.write_text(TYPO_PAGE, encoding="utf-8")
    command = next(command for command in documented_commands(page) if command.line == line)
    with pytest.raises(AssertionError) as failure:
        resolve(command)
    message = str(failure.value)
    assert message.startswith(f"{page}:{line}: `{command.text}` does not resolve") and rejected in message


def test_commands_are_read_from_code_blocks_and_code_spans(tmp_path):
    """Continuations joined; a shell prefix, an environment, a comment and an elision dropped or filled; a mention
    without arguments and a command in a comment or in a block of another language are not commands."""
    page = tmp_path / "page.md"
    page.write_text(
        "`lightning-edit fit` trains, `lightning-edit fit|validate --config ...` runs.\n"
        "```bash\n"
        "# srun --ntasks-per-node 8 lightning-edit validate --config x.yaml\n"
        "MASTER_PORT=29500 \\\n"
        "    lightning-edit validate --config ... --data.path <dir>/counterfact-val.json  # the split\n"
        "cd runs && torchrun lightning-edit fit --config configs/toy/gpt2.yaml && echo done\n"
        "```\n"
        "```yaml\n"
        "# lightning-edit validate --config configs/quickstart.yaml\n"
        "```\n"
        "With `lightning-edit validate --config\n"
        "configs/quickstart.yaml ...` and ``lightning-edit validate --model.lm.device_map '{a: 0, ..., b: 1}'``.\n",
        encoding="utf-8",
    )
    assert [(command.line, command.argv()) for command in documented_commands(page)] == [
        (5, ["validate", "--config", ELIDED["--config"], "--data.path", "builtin:data/counterfact-flat.json"]),
        (6, ["fit", "--config", "configs/toy/gpt2.yaml"]),
        (11, ["validate", "--config", "configs/quickstart.yaml"]),
        (12, ["validate", "--model.lm.device_map", "{a: 0, b: 1}"]),
    ]


# ----------------------------------------------------------------------------------------------------------------
# References to pages and their headings

#: ``docs/<page>.md`` or ``docs/<page>.md#<anchor>`` as plain text; an anchor broken over two lines after a hyphen
#: (``#stream-`` then ``health`` on the next line of a docstring or comment) is read whole.
REFERENCE = re.compile(r"(?<![\w/.-])(docs/[\w/.-]+?\.md)(?![\w/])(?:#([\w-]+-\n[ \t]*(?:#[ \t]*)?[\w-]+|[\w-]+))?")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)(?:\s+#+)?\s*$")
EXPLICIT_ANCHOR = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"|^\(([\w-]+)\)=\s*$", re.MULTILINE)
#: Where pages are cited: folders (their text files) and single files, relative to the repository.
CITING = ["lightning_edit", "configs", "benchmarks", "tests", "scripts", "notebooks", "docs", "data", "README.md"]
CITING_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".toml", ".ipynb"}
#: The deepest heading level that has an anchor on the site (MyST's ``myst_heading_anchors``, docs/conf.py).
ANCHORED_LEVELS = int(re.search(r"^myst_heading_anchors = (\d)", (ROOT / "docs/conf.py").read_text(), re.M).group(1))


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: its text as shown (inline code, emphasis and links reduced to their text),
    lowercase, punctuation but ``-`` and ``_`` dropped, each space a ``-``."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def code_blanked(text: str) -> str:
    """``text`` (Markdown) with the lines of its fenced code blocks blanked, so line numbers stay."""
    lines = text.splitlines()
    fence = None
    for number, line in enumerate(lines):
        opening = FENCE.match(line)
        if fence is None and not opening:
            continue
        if fence is None:
            fence = opening.group(1)
        elif line.strip().startswith(fence) and not line.strip().strip(fence[0]):
            fence = None
        lines[number] = ""
    return "\n".join(lines)


def anchors(page: Path) -> set[str]:
    """The anchors of a Markdown page: the slugs of its headings down to :data:`ANCHORED_LEVELS` (a repeated one
    numbered ``-1``, ``-2``, as GitHub and MyST do) and the explicit ones (``<a id="...">``, MyST's ``(label)=``)."""
    text = code_blanked(page.read_text(encoding="utf-8"))
    found: set[str] = set()
    for line in text.splitlines():
        heading = HEADING.match(line)
        if heading and len(heading.group(1)) <= ANCHORED_LEVELS:
            anchor = base = slug(heading.group(2))
            repeat = 0
            while anchor in found:
                repeat += 1
                anchor = f"{base}-{repeat}"
            found.add(anchor)
    return found | {match.group(1) or match.group(2) for match in EXPLICIT_ANCHOR.finditer(text)}


def citing_files(root: Path) -> list[Path]:
    files = []
    for name in CITING:
        path = root / name
        candidates = sorted(path.rglob("*")) if path.is_dir() else [path]
        files += [file for file in candidates if file.is_file() and file.suffix in CITING_SUFFIXES]
    return files


def broken_target(root: Path, target: Path, anchor: str | None) -> str | None:
    """Why ``target#anchor`` does not name an existing file and heading, or None."""
    if not target.exists():
        return "no such file"
    if anchor and target.suffix == ".md" and anchor not in anchors(target):
        return f"{target.relative_to(root)} has no heading #{anchor}"
    return None


def broken_references(root: Path) -> list[str]:
    """``<file>:<line>: docs/<page>.md#<anchor>: <why>`` for every plain-text page reference under ``root`` that names
    no existing page or heading."""
    broken = []
    for file in citing_files(root):
        text = file.read_text(encoding="utf-8", errors="replace")
        for match in REFERENCE.finditer(text):
            anchor = re.sub(r"\n[ \t]*(?:#[ \t]*)?", "", match.group(2) or "")
            why = broken_target(root, root / match.group(1), anchor)
            if why:
                line = text.count("\n", 0, match.start()) + 1
                reference = match.group(1) + (f"#{anchor}" if anchor else "")
                broken.append(f"{file.relative_to(root)}:{line}: {reference}: {why}")
    return broken


def broken_links(root: Path, pages: list[Path]) -> list[str]:
    """``<page>:<line>: <target>: <why>`` for every relative Markdown link of ``pages`` (outside code) that names no
    existing file or, into a page, no heading of it."""
    broken = []
    for page in pages:
        text = code_blanked(page.read_text(encoding="utf-8"))
        text = re.sub(r"(`+)(?!`).+?\1", lambda span: " " * len(span.group()), text)  # inline code is no link
        for match in LINK.finditer(text):
            target = match.group(1)
            if re.match(r"[a-z][\w+.-]*:", target) or target.startswith("/"):
                continue  # a URL, mailto:, an absolute path
            path, _, anchor = target.partition("#")
            why = broken_target(root, Path(os.path.normpath(page.parent / path)) if path else page, anchor)
            if why:
                broken.append(f"{page.relative_to(root)}:{text.count(chr(10), 0, match.start()) + 1}: {target}: {why}")
    return broken


def test_page_references_name_existing_pages_and_headings():
    broken = broken_references(ROOT)
    assert not broken, f"{len(broken)} references to no page or heading:\n" + "\n".join(broken)


def test_links_between_pages_name_existing_pages_and_headings():
    broken = broken_links(ROOT, markdown_pages())
    assert not broken, f"{len(broken)} links to no file or heading:\n" + "\n".join(broken)


def test_slugs_follow_github():
    assert slug("Memory budget") == "memory-budget"
    assert slug("FT, FT-L and FT-M") == "ft-ft-l-and-ft-m"
    assert slug("`mc_*` multiple choice") == "mc_-multiple-choice"
    assert slug("Where this differs from DMLE's code") == "where-this-differs-from-dmles-code"
    assert slug("Edit training data (MEND)") == "edit-training-data-mend"
    assert slug("Weights & Biases") == "weights--biases"  # the & dropped, each space kept
    assert slug("[SmolLM2-135M](https://huggingface.co/x) on 2× CPU") == "smollm2-135m-on-2-cpu"


def test_a_reference_to_a_missing_page_or_heading_is_reported(tmp_path):
    cited = "docs" + "/page.md"  # kept whole, this file would cite a page that does not exist
    (tmp_path / "docs").mkdir()
    (tmp_path / cited).write_text("# Page\n\n## Memory budget\n\n```bash\n# not a heading\n```\n\n#### Too deep\n")
    (tmp_path / "README.md").write_text(
        f"See {cited}#memory-budget, {cited}#not-a-heading and {cited.replace('page', 'gone')}.\n"
        f"[here]({cited}#memory-budget), [there]({cited}#memory), [code](`x`), [web](https://example.com/x.md#y).\n"
        f"[deep]({cited}#too-deep)\n"
    )
    (tmp_path / "lightning_edit").mkdir()
    (tmp_path / "lightning_edit/module.py").write_text(f'"""Wrapped ({cited}#memory-\n    budget)."""\n')
    assert broken_references(tmp_path) == [
        f"README.md:1: {cited}#not-a-heading: {cited} has no heading #not-a-heading",
        f"README.md:1: {cited.replace('page', 'gone')}: no such file",
        f"README.md:2: {cited}#memory: {cited} has no heading #memory",
        f"README.md:3: {cited}#too-deep: {cited} has no heading #too-deep",
    ]
    assert broken_links(tmp_path, [tmp_path / "README.md"]) == [
        f"README.md:2: {cited}#memory: {cited} has no heading #memory",
        f"README.md:3: {cited}#too-deep: {cited} has no heading #too-deep",  # deeper than MyST's anchored levels
    ]
