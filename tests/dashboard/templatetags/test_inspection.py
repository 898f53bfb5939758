"""The stream pages' figures in the page's language."""

import pytest
from django.utils import translation

from dashboard.templatetags.inspection import THIN_SPACE, size


@pytest.mark.parametrize(
    ("language", "value", "shown"),
    [
        ("en", 1, "1\xa0byte"),
        ("en", 1015, f"1{THIN_SPACE}015\xa0bytes"),
        ("nl", 1015, f"1{THIN_SPACE}015\xa0bytes"),
        ("en", 1536, "1.5\xa0KB"),
        ("nl", 1536, "1,5\xa0KB"),
        ("en", None, "—"),
    ],
)
def test_a_size_is_grouped_as_every_count(language, value, shown):
    with translation.override(language):
        assert size(value) == shown
