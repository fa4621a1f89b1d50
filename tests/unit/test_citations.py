"""The project carries its own contract: no file cites a document the repository does not hold."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# The documents the project was built from, not shipped with it: the API contract and the
# style guide (docs/reference/api.md and docs/design.md are the project's own).
OUTSIDE = re.compile(r"\b(?:API|STYLE)\.md\b")


def test_no_file_cites_a_document_outside_the_repository() -> None:
    listed = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    citing = []
    for name in listed:
        path = ROOT / name
        if path == Path(__file__).resolve() or not path.is_file():
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue  # a binary file
        citing += [f"{name}: {doc}" for doc in sorted(set(OUTSIDE.findall(text)))]
    assert citing == []
