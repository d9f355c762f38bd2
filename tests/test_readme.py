"""The README's promises that a new user meets first."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _code_blocks_after(heading: str) -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split(heading, 1)[1]
    return re.findall(r"```bash\n(.*?)\n```", section, flags=re.S)


def test_ci_runs_the_readme_test_command():
    test_command = _code_blocks_after("Run the tests")[0].strip()
    ci_lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert test_command in ci_lines


def test_readme_install_commands_pin_torch_and_take_the_cpu_build_from_pytorchs_index():
    install = _code_blocks_after("## Install")
    assert all("torch==2.13.0" in block for block in install[:4])  # this project's two, the CPU's, the GPU's
    without_gpu = install[2].splitlines()
    assert without_gpu[0] == "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu"


def test_the_readme_stays_short_and_every_link_in_the_docs_resolves():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 250  # the manual lives in docs/
    pages = [ROOT / name for name in ("README.md", "EXPERIMENTS.md", "CONTRIBUTING.md", "CHANGELOG.md")]
    pages += sorted((ROOT / "docs").glob("*.md"))
    broken = []
    for page in pages:
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", page.read_text()):
            if not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert not broken


def _github_anchor(title: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


def test_experiments_open_with_contents_that_list_every_entry_newest_first():
    text = (ROOT / "EXPERIMENTS.md").read_text()
    entries = [title for title in re.findall(r"^## (.+)$", text, flags=re.M) if title != "Contents"]
    contents = text.split("## Contents", 1)[1].split("\n## ", 1)[0]
    assert text.index("## Contents") < text.index(f"## {entries[0]}")
    assert re.findall(r"^- \[(.+)\]\(#([^)]+)\)$", contents, flags=re.M) == [
        (title, _github_anchor(title)) for title in entries]
    dates = [re.findall(r"\d{4}-\d\d-\d\d", title)[-1] for title in entries]  # the last date of each entry
    assert dates == sorted(dates, reverse=True)
