"""Replace the tables of docs/validation.md with what `planner validate` prints today.

Usage: python benchmarks/refresh_validation_doc.py

The sections "### The table (training)" and "### The table (inference)" hold the command's markdown output
(group headings demoted by one level); everything else on the page is prose and stays as it is.
tests/validate/test_docs_in_step.py fails until this has been run after a change of the cost model.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "validation.md"


def table(only: str) -> str:
    out = subprocess.run([sys.executable, "-m", "planner", "validate", "--only", only, "--format", "markdown"],
                         capture_output=True, text=True, check=False).stdout
    return re.sub(r"^(#+) ", lambda m: "#" + m.group(1) + " ", out.strip(), flags=re.MULTILINE)


def main() -> None:
    text = DOC.read_text(encoding="utf-8")
    for only in ("training", "inference"):
        head = f"### The table ({only})"
        start = text.index(head)
        comment_end = text.index("-->", start) + len("-->")
        nxt = re.search(r"^## ", text[comment_end:], flags=re.MULTILINE)
        end = comment_end + nxt.start() if nxt else len(text)
        text = text[:comment_end] + "\n\n" + table(only) + "\n\n" + text[end:]
    DOC.write_text(text, encoding="utf-8")
    print(f"refreshed {DOC}")


if __name__ == "__main__":
    main()
