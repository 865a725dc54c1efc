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
