"""README is a newcomer's page: it fits on a few screens and every page it links to exists."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MAX_LINES = 250        # measured and dated material lives in docs/, which the benchmarks regenerate


def test_readme_fits_on_a_few_screens():
    lines = README.read_text().splitlines()
    assert len(lines) <= MAX_LINES, f"README.md has {len(lines)} lines (at most {MAX_LINES}): move detail to docs/"


def test_every_page_readme_links_to_exists():
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README.read_text())
    local = [t for t in targets if not re.match(r"[a-z]+://", t)]
    assert local, "README links to no page"
    missing = [t for t in local if not (ROOT / t).exists()]
    assert not missing, f"README links to pages that do not exist: {missing}"
