"""Every python block of the README compiles as written (running them is issue work still open)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"
BLOCKS = re.findall(r"^```python\n(.*?)^```", README.read_text(), re.S | re.M)


@pytest.mark.parametrize("number", range(1, len(BLOCKS) + 1))
def test_a_readme_python_block_compiles(number: int) -> None:
    compile(BLOCKS[number - 1], f"README.md python block {number}", "exec")
