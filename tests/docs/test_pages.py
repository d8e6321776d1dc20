"""The README and docs/ pages without a server: every example has a test, every link leads
somewhere, the set-up is what CI runs, and the examples that need no server run here.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from service.engine.groups.members import member_seed
from tests.docs.pages import ROOT, broken_links, claimed_output, doc_pages, marked_blocks

BLOCKS = marked_blocks()

RUN_BY = {
    "set-up": "test_pages.py",
    "serve": "test_examples.py",
    "first-rollout": "test_examples.py",
    "local-rollout": "test_examples.py",
    "opencode": "test_examples.py",
    "spec-file": "test_examples.py",
    "python": "test_examples.py",
    "session-python": "test_examples.py",
    "batch": "test_examples.py",
    "member-seed": "test_pages.py",
    "openenv-serve": "../openenv/test_docs.py",
    "openenv-run-rollout": "../openenv/test_docs.py",
    "openenv-terminal": "../openenv/test_docs.py",
    "verifiers-python": "../client/verifiers_runtime/test_session_runtime.py",
    "harbor-codex-config": "../harbor/test_environment.py",
}
"""Each marked example and the module whose tests run it."""


def test_every_marked_block_is_run_by_a_test() -> None:
    # A new example gets a marker and a test, or it can drift again.
    assert set(BLOCKS) == set(RUN_BY)
    for name, module in RUN_BY.items():
        source = (Path(__file__).parent / module).read_text()
        assert f'BLOCKS["{name}"]' in source, f"{module} does not use the example {name}"


def test_the_set_up_commands_are_the_readmes_and_the_ones_ci_and_the_tests_run() -> None:
    for name in ("set-up", "serve"):
        assert BLOCKS[name].page == ROOT / "README.md", f"{name} left the README"
    assert BLOCKS["set-up"].commands() == ["make run", "make test"]
    assert BLOCKS["serve"].commands() == ["make run"]
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^\s*make test$", ci, re.MULTILINE), "CI must run the README's test command"


def test_the_readme_says_how_to_change_make_runs_port() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "`ROLLOUT_LISTEN=127.0.0.1:50052 make run`" in readme
    # The variable reaches the server: `make run` sets no --listen that would win over it.
    ran = subprocess.run(["make", "-n", "run"], cwd=ROOT, capture_output=True, text=True)
    assert ran.returncode == 0, ran.stderr
    assert "-m service.server" in ran.stdout
    assert "--listen" not in ran.stdout


def test_the_testing_page_states_no_test_count_that_goes_stale() -> None:
    # Counts of the suite were stale within weeks; the page says how to count instead.
    testing = (ROOT / "docs" / "testing.md").read_text()
    assert not re.findall(r"\b\d,?\d{3} (?:tests|passed)", testing)
    assert "--collect-only -q" in testing


def test_the_layout_tree_shows_each_room_of_service_as_it_is() -> None:
    tree = (ROOT / "docs" / "layout.md").read_text().split("```")[1]
    entries = set(re.findall(r"^\s+(\S+)\s", tree, re.MULTILINE))
    service = ROOT / "service"
    modules = {f"{p.name}" for p in service.glob("*.py") if p.name != "__init__.py"}
    packages = {f"{p.name}/" for p in service.iterdir() if (p / "__init__.py").exists()}
    assert modules <= entries, modules - entries
    assert packages <= entries, packages - entries
    assert not {f"{m.removesuffix('.py')}/" for m in modules} & entries  # a module as a folder


def test_the_member_seed_example_derives_the_services_seed() -> None:
    block = BLOCKS["member-seed"]
    inputs = re.search(r"^group_seed, index = (\d+), (\d+)$", block.code, re.MULTILINE)
    assert inputs is not None, block.code

    ran = subprocess.run(
        [sys.executable, "-c", block.code], cwd=ROOT, capture_output=True, text=True, check=False
    )

    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == claimed_output(block)
    seed = int(ran.stdout.split()[-1])
    assert seed == member_seed(int(inputs[1]), int(inputs[2]))


@pytest.mark.parametrize("page", doc_pages(), ids=lambda page: page.name)
def test_every_relative_link_leads_to_a_file_and_heading_that_exist(page: Path) -> None:
    assert broken_links(page) == []


def test_a_link_to_a_missing_file_or_heading_is_found(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Other page\n\n## A `code` heading: yes\n")
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n\n[ok](other.md#a-code-heading-yes) [ok](#page) [web](https://example.com/x)\n"
        "[gone](missing.md) [bad anchor](other.md#nope) `[in code](missing.md)`\n"
        "```\n[in a fence](missing.md)\n```\n"
    )

    assert broken_links(page, root=tmp_path) == [
        "missing.md: no such file",
        "other.md#nope: no such heading in other.md",
    ]


def test_the_benchmarks_page_holds_current_figures_the_readme_quotes() -> None:
    page = (ROOT / "docs" / "benchmarks.md").read_text()
    # One current run per benchmark, with its baseline; superseded runs live in git.
    assert not re.search(r"\bearlier runs?\b|\ba second run\b", page, re.IGNORECASE)
    readme = (ROOT / "README.md").read_text()
    table = readme.split("## Figures", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| ") and "---" not in line]
    assert len(rows) > 1, "the README's figures table is gone"
    for row in rows[1:]:
        for number in re.findall(r"\d[\d,.]*\d|\d", row):
            assert number in page, f"README figure {number} ({row[:40]}...) not in benchmarks.md"
