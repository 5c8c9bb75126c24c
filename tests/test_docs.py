"""The docs cannot drift from the software: every `imgtxt ...` command shown in README.md and docs/*.md uses
subcommands and options that exist; every extra they name is declared; CI runs README's test command; every
module has its row in docs/development.md; and the docs carry no issue numbers, machine paths or words about how
the work was organised."""
from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

import click
import pytest
from conftest import REPO

from imgtxt.cli.main import app

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    tomllib = None

README = REPO / "README.md"
DEVELOPMENT = REPO / "docs" / "development.md"
README_MAX_LINES = 300


def doc_files() -> list[Path]:
    return [README, *sorted((REPO / "docs").glob("*.md"))]


def doc_id(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else path.name


# --- finding the commands ----------------------------------------------------------------------------------------

FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.S | re.M)
SHELL_LANGUAGES = {"sh", "bash", "shell", "console", "zsh"}
INDENTED = re.compile(r"(?:^|\n)\n((?: {4}[^\n]*\n)+)")   # a markdown code block by indentation
INLINE = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
# `imgtxt`, `.venv/bin/imgtxt`, `python -m imgtxt` at the start of a command
COMMAND_WORD = re.compile(r"^(?:\S*bin/)?imgtxt$")
ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$")


def split_comment(line: str) -> tuple[str, str]:
    """(code, comment): a `#` that starts a word outside quotes starts the comment."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i], line[i + 1:]
    return line, ""


def words(text: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError:      # an unbalanced quote in prose: fall back to whitespace
        return text.split()


def imgtxt_args(segment: str) -> list[str] | None:
    """The arguments after `imgtxt` if this shell segment runs imgtxt, else None."""
    tokens = words(segment)
    while tokens and ASSIGNMENT.match(tokens[0]):
        tokens = tokens[1:]
    if tokens[:1] == ["nice"]:
        tokens = tokens[1:]
        while tokens and tokens[0].startswith("-"):
            tokens = tokens[1:]
        if tokens and tokens[0].isdigit():
            tokens = tokens[1:]
    if len(tokens) >= 3 and tokens[0].split("/")[-1].startswith("python") and tokens[1:3] == ["-m", "imgtxt"]:
        return tokens[3:]
    if tokens and COMMAND_WORD.match(tokens[0]):
        return tokens[1:]
    return None


def commands_in_shell(block: str, where: str) -> list[tuple[str, list[str]]]:
    """(where, args) for every imgtxt command of a shell block; `$NAME` set earlier in the block is expanded, and the
    options named in a command line's comment (e.g. `# [-n 10] [--json]`) are checked against that command too."""
    variables: dict[str, str] = {}
    found = []
    for number, line in enumerate(block.replace("\\\n", " ").splitlines(), 1):
        code, comment = split_comment(line)
        assigned = ASSIGNMENT.match(code.strip())
        if assigned and " " not in assigned.group(1):
            variables[assigned.group(1)] = " ".join(words(assigned.group(2)))
            continue
        for name, value in variables.items():
            code = re.sub(rf"\$\{{?{name}\b\}}?", value, code)
        commands = [args for segment in re.split(r"&&|\|\||;| \| ", code)
                    if (args := imgtxt_args(segment)) is not None]
        if len(commands) == 1 and comment:
            commands[0] = commands[0] + re.findall(r"(?<![\w-])(--?[A-Za-z0-9][\w-]*)", comment)
        found += [(f"{where}, line {number} of a shell block: {line.strip()}", args) for args in commands]
    return found


def commands_in(path: Path) -> list[tuple[str, list[str]]]:
    text = path.read_text(encoding="utf-8")
    found = []
    for match in FENCE.finditer(text):
        if match.group(1) in SHELL_LANGUAGES:
            found += commands_in_shell(match.group(2), doc_id(path))
    outside = FENCE.sub("", text)
    for block in INDENTED.findall(outside):
        found += commands_in_shell(re.sub(r"(?m)^ {4}", "", block), doc_id(path))
    for match in INLINE.finditer(outside):
        code = match.group(1).replace("\\|", "|")
        for segment in re.split(r"&&|;| \| ", code):
            args = imgtxt_args(segment)
            if args is not None:
                found.append((f"{doc_id(path)}: `{code}`", args))
    return found


# --- checking them against the click app -------------------------------------------------------------------------

def cli_commands() -> dict[str, click.Command]:
    ctx = click.Context(app)
    return {name: app.get_command(ctx, name) for name in app.list_commands(ctx)}


def option_names(command: click.Command) -> set[str]:
    names = {"-h", "--help"}
    for param in command.params:
        if isinstance(param, click.Option):
            names.update(param.opts)
            names.update(param.secondary_opts)
    return names


OPTION = re.compile(r"^--?[A-Za-z0-9][\w-]*$")


def problems_of(args: list[str], commands: dict[str, click.Command]) -> list[str]:
    args = [arg.strip("[]()") for arg in args]
    top_level = {"--version", "-h", "--help"}
    while args and args[0] in top_level:
        args = args[1:]
    if not args:
        return []
    name, rest = args[0], args[1:]
    if name in ("...", "…"):   # `imgtxt …`: any command
        return []
    if name not in commands:
        return [f"no command {name!r} (imgtxt has {', '.join(commands)})"]
    known = option_names(commands[name])
    return [f"`imgtxt {name}` has no option {flag}" for arg in rest
            if OPTION.match(flag := arg.split("=", 1)[0]) and flag not in known]


REPO_PATH = re.compile(r"^(?:imgtxt|examples|bench|weights|tests|docs)/[\w./-]*$")


def missing_paths_of(args: list[str]) -> list[str]:
    """Repository paths a command names (a model folder, the example photos) that do not exist in the checkout."""
    paths = [arg.strip("[]()") for arg in args]
    return [f"no {path} in the repository" for path in paths if REPO_PATH.match(path) and not (REPO / path).exists()]


def command_problems(paths: list[Path]) -> list[str]:
    commands = cli_commands()
    return [f"{where}: {problem}" for path in paths for where, args in commands_in(path)
            for problem in problems_of(args, commands) + missing_paths_of(args)]


def test_the_docs_show_commands():
    """The extraction finds the commands it is meant to check (an empty list would pass everything)."""
    shown = [args for path in doc_files() for _, args in commands_in(path)]
    assert len(shown) >= 20
    assert {"index", "search", "caption", "similar", "status", "forget", "serve", "train", "eval"} <= {
        args[0] for args in shown if args}


def test_every_command_in_the_docs_exists():
    assert command_problems(doc_files()) == []


@pytest.mark.parametrize("planted, expected", [
    ("```sh\nimgtxt serch a dog\n```\n", "no command 'serch'"),
    ("```sh\nimgtxt search a dog --limit 3\n```\n", "has no option --limit"),
    ("```sh\nimgtxt index ~/Photos   # [--exclude GLOB] [--fast]\n```\n", "has no option --fast"),
    ("```sh\nC=\"--data-dir D --epoch 3\"\nimgtxt train flickr8k $C\n```\n", "has no option --epoch"),
    ("```sh\npip install . && .venv/bin/imgtxt status --jsn\n```\n", "has no option --jsn"),
    ("Run `imgtxt caption photo.jpg --top 3` to see.\n", "has no option --top"),
    ("| a | `imgtxt eval flickr8k --split val\\|test --metric thesis` |\n", "has no option --metric"),
    ("```sh\n.venv/bin/imgtxt export-cnn weights/nosuch\n```\n", "no weights/nosuch in the repository"),
    ("Export it once:\n\n    .venv/bin/imgtxt export-cnn weights/nosuch      # writes cnn.onnx\n\nThen", "no weights/nosuch"),
    ("On a cluster:\n\n    pip install 'imgtxt[ray]'\n    imgtxt index /mnt/photos --rays auto\n", "has no option --rays"),
])
def test_a_planted_bad_command_or_option_is_caught(tmp_path, planted, expected):
    doc = tmp_path / "planted.md"
    doc.write_text("# planted\n\n" + planted, encoding="utf-8")
    problems = command_problems([doc])
    assert any(expected in problem for problem in problems), problems


BENCH_SCRIPT = re.compile(r"\bbench/[\w-]+\.py\b")


def test_every_bench_script_named_in_the_docs_exists():
    named = {(doc_id(path), script) for path in doc_files()
             for script in BENCH_SCRIPT.findall(path.read_text(encoding="utf-8"))}
    assert named and sorted((where, script) for where, script in named if not (REPO / script).is_file()) == []


# --- words and paths ---------------------------------------------------------------------------------------------

FORBIDDEN = [
    (re.compile(r"\bissues?\s+#?\d+", re.I), "an issue number"),
    (re.compile(r"(?<![\w&/])#\d+\b"), "an issue number"),
    (re.compile(r"/(?:work|root|home)/"), "a machine's absolute path"),
    (re.compile(r"\bsessions?\b", re.I), "a word about how the work was organised"),
    (re.compile(r"\bhelpers?\b", re.I), "a word about how the work was organised"),
    (re.compile(r"\baudit(?:s|s'|'s|ed|ing|ors?)?\b", re.I), "a word about how the work was organised"),
]


def forbidden_in(text: str, where: str) -> list[str]:
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for pattern, what in FORBIDDEN:
            for match in pattern.finditer(line):
                found.append(f"{where}:{number}: {what}: {match.group(0)!r}")
    return found


@pytest.mark.parametrize("path", doc_files(), ids=doc_id)
def test_no_issue_numbers_machine_paths_or_words_about_the_work(path):
    assert forbidden_in(path.read_text(encoding="utf-8"), doc_id(path)) == []


# the machine paths are assembled, so that this file itself holds none
@pytest.mark.parametrize("planted", ["as issue 7 found", "see #12", "IMGTXT_CACHE_DIR=" + "/work" + "/cache imgtxt eval",
                                     "in " + "/root" + "/.cache", "measured in a later session", "another helper's job",
                                     "the first audits' attacks"])
def test_planted_forbidden_words_are_caught(planted):
    assert forbidden_in(f"fine text\n{planted}\n", "planted")


# --- extras, CI, length, modules ---------------------------------------------------------------------------------

EXTRA = re.compile(r"(?:\bimgtxt|(?<![\w/])\.)\[([A-Za-z0-9_,.-]+)\]")


def declared_extras() -> set[str]:
    text = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    if tomllib is not None:
        return set(tomllib.loads(text)["project"]["optional-dependencies"])
    section = text.split("[project.optional-dependencies]", 1)[1].split("\n[", 1)[0]  # pragma: no cover
    return set(re.findall(r"^([\w-]+)\s*=", section, re.M))  # pragma: no cover


def extras_named(text: str) -> set[str]:
    return {extra for group in EXTRA.findall(text) for extra in group.split(",")}


def test_every_extra_named_in_the_docs_is_declared():
    declared = declared_extras()
    named = {(doc_id(path), extra) for path in doc_files()
             for extra in extras_named(path.read_text(encoding="utf-8"))}
    assert {"serve", "test"} <= {extra for _, extra in named}   # the pattern finds what it should
    assert sorted((where, extra) for where, extra in named if extra not in declared) == []


def test_a_planted_unknown_extra_is_caught():
    named = extras_named("pip install -e '.[serve,gpu2]' or pip install 'imgtxt[nosuch]'")
    assert named - declared_extras() == {"gpu2", "nosuch"}


# imgtxt is on no package index: `pip install 'imgtxt[EXTRA]'` finds nothing. Extras are installed from a checkout
# (`'.[EXTRA]'`), next to a wheel (`'imgtxt-0.1.0-py3-none-any.whl[EXTRA]'`), or by their packages' names, as
# `imgtxt.errors.install_hint` words it.
FROM_AN_INDEX = re.compile(r"pip3? install\b[^`\n]*?(?<![\w./-])['\"]?imgtxt(?:\[|['\"`](?!s\b))")


def installs_from_an_index(text: str, where: str) -> list[str]:
    return [f"{where}:{number}: {line.strip()}" for number, line in enumerate(text.splitlines(), 1)
            if FROM_AN_INDEX.search(line)]


def test_no_install_asks_a_package_index_for_imgtxt():
    sources = [*doc_files(), *sorted((REPO / "imgtxt").rglob("*.py")), *sorted((REPO / "bench").glob("*.py"))]
    assert [found for path in sources
            for found in installs_from_an_index(path.read_text(encoding="utf-8"), doc_id(path))] == []


@pytest.mark.parametrize("planted, caught", [
    ("pip install 'imgtxt[ray]'", True), ("`pip install imgtxt[ray]` on every node", True),
    ('raise SystemExit("pip install -e \'imgtxt[devset]\'")', True), ("run `pip install imgtxt` first", True),
    ("pip install '.[ray]'", False), ("pip install 'imgtxt-0.1.0-py3-none-any.whl[serve]'", False),
    ("pip install dist/imgtxt-0.1.0-py3-none-any.whl", False), ("pip install 'ray>=2.9'", False)])
def test_a_planted_install_from_an_index_is_caught(planted, caught):
    assert bool(installs_from_an_index(planted, "planted")) == caught


def readme_test_command() -> str:
    for match in FENCE.finditer(README.read_text(encoding="utf-8")):
        if match.group(1) in SHELL_LANGUAGES:
            for line in match.group(2).splitlines():
                if "pytest" in line:
                    return line.strip()
    raise AssertionError("README shows no test command")


def test_ci_runs_readmes_test_command():
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert readme_test_command() in ci.splitlines()


def said_to_be_what_ci_runs(text: str) -> list[str]:
    """The commands a doc says are what `.ci/run` does, without their `.venv/bin/` and comment."""
    return [line.split("#")[0].strip().replace(".venv/bin/", "") for line in text.splitlines()
            if "what .ci/run does" in line and "#" in line]


def test_what_the_docs_call_cis_test_command_is_it():
    claims = [(doc_id(path), claim) for path in doc_files()
              for claim in said_to_be_what_ci_runs(path.read_text(encoding="utf-8"))]
    assert ("docs/development.md", "pytest -q -n auto") in claims
    assert [(where, claim) for where, claim in claims if not readme_test_command().endswith(claim)] == []


def test_a_wrong_claim_about_cis_test_command_is_caught():
    claim = said_to_be_what_ci_runs(".venv/bin/pytest -q       # everything (what .ci/run does)")
    assert claim == ["pytest -q"] and not readme_test_command().endswith(claim[0])


def test_readme_is_for_a_user_and_short():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; move details into docs/"


def module_paths() -> list[str]:
    package = REPO / "imgtxt"
    return sorted(str(path.relative_to(REPO)) for path in package.rglob("*.py")
                  if path.name != "__init__.py" and "__pycache__" not in path.parts)


def package_paths() -> list[str]:
    package = REPO / "imgtxt"
    return sorted(str(path.parent.relative_to(REPO)) + "/" for path in package.rglob("__init__.py"))


def table_rows(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("|")]


def test_every_module_and_package_has_a_row_in_the_development_guide():
    rows = "\n".join(table_rows(DEVELOPMENT.read_text(encoding="utf-8")))
    missing = [path for path in module_paths() + package_paths() if f"`{path}`" not in rows]
    assert missing == [], "docs/development.md's module table has no row for these; add one"


def test_the_development_guide_names_no_module_that_is_gone():
    rows = "\n".join(table_rows(DEVELOPMENT.read_text(encoding="utf-8")))
    named = re.findall(r"`(imgtxt/[\w/]+(?:\.py|/))`", rows)
    assert named and [path for path in named if not (REPO / path).exists()] == []


# --- the reliability guarantees and their tests ------------------------------------------------------------------

RELIABILITY = REPO / "docs" / "reliability.md"


def sources_of_tests() -> dict[str, str]:
    """tests/*.py -> their source, for the names a doc cites."""
    return {path.name: path.read_text(encoding="utf-8") for path in (REPO / "tests").glob("*.py")}


def missing_tests(text: str, sources: dict[str, str]) -> list[str]:
    """The tests and test files `text` cites (`test_x.py`, `test_x.py::test_y`, `test_y`) that do not exist."""
    missing = [f"{name}.py" for name in re.findall(r"\b(test_\w+)\.py\b", text) if f"{name}.py" not in sources]
    for file, name in re.findall(r"\b(test_\w+\.py)::(test_\w+)", text):
        if not re.search(rf"^def {name}\(", sources.get(file, ""), re.M):
            missing.append(f"{file}::{name}")
    for name in re.findall(r"(?<![\w.:])(test_\w+)(?![\w.])", text):
        if not any(re.search(rf"^def {name}\(", source, re.M) for source in sources.values()):
            missing.append(name)
    return missing


def test_every_test_the_reliability_guide_cites_exists():
    text = RELIABILITY.read_text(encoding="utf-8")
    assert len(re.findall(r"\btest_\w+", text)) > 50
    assert missing_tests(text, sources_of_tests()) == [], "docs/reliability.md cites tests that do not exist"


@pytest.mark.parametrize("planted", ["`test_gone.py`", "`test_docs.py::test_gone`", "`test_no_such_guarantee`",
                                     "`test_docs.py::test_planted_x`"])
def test_a_planted_missing_test_is_caught(planted):
    assert missing_tests(f"| **a guarantee** | how | {planted} |", sources_of_tests())


def test_the_guarantees_table_is_one_table():
    """A blank line inside a Markdown table ends it: the rows after it would show as plain text."""
    section = RELIABILITY.read_text(encoding="utf-8").split("## Guarantees", 1)[1].split("\n## ", 1)[0]
    lines = section.strip().splitlines()
    assert lines and all(line.startswith("| ") for line in lines), [line for line in lines if not line.startswith("|")]
