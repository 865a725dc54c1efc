"""docs/validation.md shows the tables `planner validate` prints today: every case row and every group summary
line of the command's markdown output stands in the page, character for character.

When the cost model moves a number, rerun `planner validate --only training --format markdown` (and
`--only inference`) and paste the output under "The table" sections of docs/validation.md.
"""

from __future__ import annotations

import pytest
from conftest import REPO

DOC = (REPO / "docs" / "validation.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("only", ["training", "inference"])
def test_validation_tables_match_the_command(run_cli, only):
    printed = run_cli("validate", "--only", only, "--format", "markdown").stdout
    rows = [line for line in printed.splitlines() if line.startswith("| ") and not line.startswith("| case ")]
    summaries = [line for line in printed.splitlines() if "within tolerance; median" in line]
    assert rows and summaries
    doc_lines = set(DOC.splitlines())
    stale = [line for line in rows + summaries if line not in doc_lines]
    assert not stale, (
        f"{len(stale)} of {len(rows) + len(summaries)} lines of 'planner validate --only {only} --format markdown' "
        f"are not in docs/validation.md, e.g.:\n" + "\n".join(stale[:5])
    )


README = (REPO / "README.md").read_text(encoding="utf-8")
# The README's "How right is it" quotes these figures of `planner validate`: each phrase is followed by the
# group's largest |error| (or its median, where the phrase says so), to one decimal, as the command computes it;
# {*} stands for any other figure of the phrase.
README_FIGURES = [
    ("step time is within {}% of every row of\nNarayanan et al. 2021 Table 1", "Narayanan et al. 2021, Table 1 (A100, Selene)", "max"),
    ("within {}% of every row of the Megatron-LM 2024 H100 table", "Megatron-LM README 2024, H100 weak scaling", "max"),
    ("Megatron-LM 2024 H100 table (median\n{}%)", "Megatron-LM README 2024, H100 weak scaling", "median"),
    ("within {}% of every NeMo 24.07 FP8 row", "NeMo 24.07 DGX-H100 FP8 (modern)", "max"),
    ("H800, DualPipe) is predicted {}% fast", "DeepSeek-V3 training (2,048 H800)", "max"),
    ("six NeMo AutoModel rows within {}%", "NeMo AutoModel performance summary (H100 BF16)", "max"),
    ("AutoModel rows within {*}% (median {}%)", "NeMo AutoModel performance summary (H100 BF16)", "median"),
]


@pytest.mark.parametrize(("phrase", "group", "stat"), README_FIGURES, ids=[f[0][:40] for f in README_FIGURES])
def test_readme_accuracy_figures_match_the_command(run_cli, phrase, group, stat):
    import json
    import re
    import statistics

    cases = json.loads(run_cli("validate", "--only", "training", "--format", "json").stdout)["cases"]
    errors = [abs(c["error"]) * 100 for c in cases if c["group"] == group]
    assert errors, f"no validation group named {group!r}"
    want = f"{(max(errors) if stat == 'max' else statistics.median(errors)):.1f}"
    pattern = (re.escape(phrase).replace(re.escape("{*}"), r"[0-9.]+").replace(re.escape("{}"), r"([0-9.]+)")
               .replace(r"\n", r"\s+").replace(r"\ ", r"\s+"))
    found = re.search(pattern, README)
    assert found, f"README.md no longer says {phrase!r}"
    assert found.group(1) == want, f"README.md quotes {found.group(1)}% for {group} ({stat}); planner validate gives {want}%"
