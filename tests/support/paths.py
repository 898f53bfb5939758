"""Where things are, for tests at any depth of tests/ (which mirrors the packages)."""

from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent
CAPTURES = TESTS / "fixtures" / "streams"  # recorded SSE captures
