"""Where things are, for tests at any depth of tests/ (which mirrors the packages)."""

from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent
FIXTURES = TESTS / "fixtures"
CAPTURES = FIXTURES / "streams"  # recorded SSE captures
