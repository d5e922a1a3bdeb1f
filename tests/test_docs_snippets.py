"""Every snippet of README.md and docs/*.md runs as written: ```python blocks on the mock, shell commands here or in CI.

The fence's info string says what a block is (CONTRIBUTING.md, "Snippets in the documentation"):

* ```` ```python ```` runs here, in a fresh namespace, on the CPU backends; ```` ```python continued ```` runs in the
  namespace the previous Python block of the same page left;
* ```` ```bash ```` holds commands, one per line (``\\`` continues a line, ``&&`` chains, ``#`` starts a comment):
  each must be in :data:`RUN_HERE` (run by this file, in a directory that mirrors the checkout so that files they
  write land elsewhere), :data:`RUN_BY_CI` (run by ``.ci/run``) or :data:`RUN_BY_TESTS` (run by another test with a
  stand-in), so a new command nobody runs fails here;
* ```` ```python npu ```` / ```` ```bash npu ```` need an Ascend NPU and are not run;
* any other language (``c``, ``text``) is not code to run.

The Python blocks and the cheap commands run in the default test run; the accuracy suite's script is ``slow`` and
the example models are ``e2e`` (they need transformers).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.built_library import library_or_skip

ROOT = Path(__file__).resolve().parent.parent
PAGES = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
FENCE = re.compile(r"^\s*```(\S*)[ \t]*(.*?)\s*$")  # a fence may be indented (inside a list item)
#: Languages whose blocks are code this file runs or accounts for; the tags a fence may carry after them.
RUN_LANGUAGES = ("python", "bash")
OTHER_LANGUAGES = ("c", "text")
TAGS = {"python": ("npu", "continued"), "bash": ("npu",), "c": (), "text": ()}

#: Commands run by ``.ci/run`` (each must appear in it literally).
RUN_BY_CI = (
    "bash compile.sh --setup",
    "bash compile.sh --setup --all",
    "python -m pytest -q",
    'pip install -e ".[e2e]"',
    "python -m pytest -q -m e2e",
)

#: Commands another test runs with a stand-in for what it may not touch here, and the strings that test must hold
#: (``--setup`` with a CPU index: our machines reach one package index, so a stand-in answers for pip).
RUN_BY_TESTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "PA_KIT_TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu bash compile.sh --setup": (
        "tests/test_setup_torch_index.py", ("PA_KIT_TORCH_INDEX_URL", "https://download.pytorch.org/whl/cpu")),
}

#: Commands run by this file, with their marker: "" (default run), "slow" or "e2e".  Exit codes other than 0
#: that a command may legitimately end with are in ALLOWED_CODES.
RUN_HERE: dict[str, str] = {
    "python test_pa_accuracy.py": "slow",
    "python test_pa_accuracy.py --backend sim -k gqa5": "",
    "python examples/continuous_batching.py --check": "",
    "python bench_pa_performance.py --predict --batch 1 --ctx 2048 --heads 16 --baselines none --iters 1": "",
    "python bench_pa_performance.py --batch 2 --ctx 512 --baselines none --iters 3": "",
    "python bench_pa_performance.py --batch 2 --ctx 512 --dtype bf16 --iters 3": "slow",
    "python bench_pa_performance.py --batch 2 --ctx 512 --q-len 2 --window-left 127 --sinks --lse --iters 3": "slow",
    "python bench_pa_performance.py --mla --heads 16 --batch 2 --ctx 512 --iters 3": "slow",
    "python bench_pa_performance.py --shapes features --list-shapes": "",
    "python bench_pa_performance.py --backend sim --batch 1 --ctx 1024 --baselines none --iters 1": "slow",
    "python bench_pa_performance.py --batch 2 --ctx 512 --iters 3 --json run.json --plot run.png": "slow",
    "python bench_pa_performance.py --batch 2 --ctx 512 --baselines none --iters 5 --json baseline.json": "slow",
    "python bench_pa_performance.py --batch 2 --ctx 512 --baselines none --iters 5 --compare baseline.json "
    "--tolerance 100": "slow",
    "python examples/llama_decode.py": "e2e",
    "python examples/paged_gptoss.py": "e2e",
    "python examples/paged_deepseek.py": "e2e",
    "python examples/llama_tp.py --ranks 2": "e2e",
    "python examples/decode_cp.py --ranks 3": "e2e",
}
#: The gate on a shared CPU: exit 1 (a shape slower than the tolerance) is a verdict, not a broken command.
ALLOWED_CODES = {
    "python bench_pa_performance.py --batch 2 --ctx 512 --baselines none --iters 5 --compare baseline.json "
    "--tolerance 100": (0, 1),
}
MARK_ORDER = ("", "slow", "e2e")
#: The namespace each page's last Python block left, for a ``continued`` block after it.
_NAMESPACES: dict[Path, dict[str, object]] = {}


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # of the opening fence, 1-based
    language: str
    tags: tuple[str, ...]
    text: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def parse_blocks(page: Path, text: str | None = None) -> list[Block]:
    """The fenced blocks of ``page``; an unknown language or tag is a ValueError (a typo must not skip a block)."""
    lines = (page.read_text() if text is None else text).splitlines()
    blocks, i = [], 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        language, tags = match.group(1), tuple(match.group(2).split())
        if not language:
            raise ValueError(f"{page.name}:{i + 1}: a fence without a language (use one of {sorted(TAGS)})")
        if language not in TAGS or any(tag not in TAGS[language] for tag in tags):
            raise ValueError(f"{page.name}:{i + 1}: unknown fence '{language} {' '.join(tags)}' (languages and "
                             f"tags: {TAGS})")
        end = i + 1
        while end < len(lines) and not lines[end].lstrip().startswith("```"):
            end += 1
        if end == len(lines):
            raise ValueError(f"{page.name}:{i + 1}: the block is never closed")
        blocks.append(Block(page, i + 1, language, tags, textwrap.dedent("\n".join(lines[i + 1:end]))))
        i = end + 1
    return blocks


def shell_commands(text: str) -> list[str]:
    """The commands of a bash block: continuation lines joined, comments dropped, ``&&`` chains split,
    whitespace normalised."""
    joined = re.sub(r"\\\n\s*", " ", text)
    commands = []
    for line in joined.splitlines():
        line = re.sub(r"(^|\s)#.*$", "", line).strip()
        commands.extend(" ".join(part.split()) for part in line.split("&&") if part.strip())
    return commands


def unlisted(commands: list[str]) -> list[str]:
    """Commands neither this file nor CI runs."""
    return [command for command in commands
            if command not in RUN_HERE and command not in RUN_BY_CI and command not in RUN_BY_TESTS]


def all_blocks() -> list[Block]:
    return [block for page in PAGES for block in parse_blocks(page)]


def _run_blocks(language: str) -> list[Block]:
    return [block for block in all_blocks() if block.language == language and "npu" not in block.tags]


def _block_mark(block: Block) -> str:
    marks = [RUN_HERE[command] for command in shell_commands(block.text) if command in RUN_HERE]
    return max(marks, key=MARK_ORDER.index, default="")


def _param(block: Block, mark: str = "") -> object:
    marks = [getattr(pytest.mark, mark)] if mark else []
    return pytest.param(block, id=block.where, marks=marks)


def _needs_libraries(text: str) -> None:
    if "--predict" in text or re.search(r"\bsim\b", text):
        library_or_skip("libpa_sim.so")


# ---- the conventions hold ------------------------------------------------------------------------------------
def test_every_page_parses_and_has_runnable_blocks() -> None:
    blocks = all_blocks()
    assert any(block.page.name == "README.md" and block.language == "python" for block in blocks)
    assert {block.page.name for block in blocks} >= {"README.md", "API.md", "BENCHMARK.md", "NPU.md"}


def test_every_shell_command_outside_npu_blocks_is_run_here_or_by_ci() -> None:
    missing = {block.where: unlisted(shell_commands(block.text)) for block in _run_blocks("bash")}
    missing = {where: commands for where, commands in missing.items() if commands}
    assert not missing, (f"commands no test runs (add each to RUN_HERE in {Path(__file__).name}, or tag the block "
                         f"'bash npu' if it needs an NPU): {missing}")


def test_the_tables_name_only_commands_the_pages_show_and_ci_runs() -> None:
    shown = {command for block in _run_blocks("bash") for command in shell_commands(block.text)}
    assert not (set(RUN_HERE) - shown), f"RUN_HERE lists commands no page shows: {set(RUN_HERE) - shown}"
    ci = (ROOT / ".ci" / "run").read_text()
    assert all(command in ci for command in RUN_BY_CI), "RUN_BY_CI names a command .ci/run does not run"
    for command, (test, needles) in RUN_BY_TESTS.items():
        assert command in shown, f"RUN_BY_TESTS lists a command no page shows: {command}"
        text = (ROOT / test).read_text()
        assert all(needle in text for needle in needles), f"{test} no longer runs `{command}` ({needles})"


def test_negative_controls_a_new_command_an_unknown_tag_an_unclosed_block() -> None:
    page = ROOT / "docs" / "EXAMPLE.md"
    text = ("```bash\nbash compile.sh --setup  # set up\n"
            "python bench_pa_performance.py --shapes pr \\\n  --iters 2\n```\n")
    (block,) = parse_blocks(page, text)
    assert shell_commands(block.text) == ["bash compile.sh --setup", "python bench_pa_performance.py --shapes pr "
                                          "--iters 2"]
    assert unlisted(shell_commands(block.text)) == ["python bench_pa_performance.py --shapes pr --iters 2"]
    for wrong in ("```python NPU\nx = 1\n```\n", "```\nls\n```\n", "```bash\nls\n"):
        with pytest.raises(ValueError):
            parse_blocks(page, wrong)


# ---- the snippets run ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("block", [_param(block) for block in _run_blocks("python")])
def test_python_block_runs_on_the_cpu(block: Block) -> None:
    _needs_libraries(block.text)
    namespace = _NAMESPACES.get(block.page) if "continued" in block.tags else None
    if namespace is None:
        namespace = {"__name__": "__main__"}
    exec(compile(block.text, block.where, "exec"), namespace)
    _NAMESPACES[block.page] = namespace


@pytest.fixture(scope="module")
def mirror(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory whose entries are links to the checkout's: commands see the repository, and what they write
    (``run.json``, ``baseline.json``) lands here."""
    where = tmp_path_factory.mktemp("checkout")
    for entry in ROOT.iterdir():
        if entry.name != ".git":
            (where / entry.name).symlink_to(entry)
    return where


@pytest.mark.parametrize("block", [_param(block, _block_mark(block)) for block in _run_blocks("bash")
                                   if any(command in RUN_HERE for command in shell_commands(block.text))])
def test_shell_block_runs(block: Block, mirror: Path) -> None:
    _needs_libraries(block.text)
    env = {**os.environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0", "PYTHONPATH": str(ROOT)}
    for command in shell_commands(block.text):
        if command not in RUN_HERE:
            continue  # run by CI (the test above holds every command to one of the two)
        argv = command.split()
        if argv[0] == "python":
            argv[0] = sys.executable
        done = subprocess.run(argv, cwd=mirror, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode in ALLOWED_CODES.get(command, (0,)), (
            f"{block.where}: `{command}` exited {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
