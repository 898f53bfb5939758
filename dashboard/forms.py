from django import forms
from django.conf import settings

from streams.importer import CaptureError, read_capture

MB = 1024 * 1024


def _mb(n):
    return f"{n / MB:.1f}"


class CaptureUploadForm(forms.Form):
    """A captured stream to import: a raw SSE body or a HAR export. Validating it parses it, so
    `cleaned_data["captures"]` holds what the view stores (the file is read once)."""

    file = forms.FileField()
    model = forms.CharField(
        max_length=100,
        required=False,
        help_text="The model the request asked for (e.g. auto), when the file does not say.",
    )

    def clean_file(self):
        upload = self.cleaned_data["file"]
        limit = settings.STREAMSCOPE["UPLOAD_MAX_BYTES"]
        if upload.size > limit:
            raise forms.ValidationError(
                f"File too large: {_mb(upload.size)} MB (limit {_mb(limit)} MB)",
                code="too_large",
            )
        content = upload.read()
        try:
            self.cleaned_data["captures"] = read_capture(content, upload.name)
        except CaptureError as exc:
            raise forms.ValidationError(
                f"Cannot import {upload.name}: {exc}", code="not_a_capture"
            ) from None
        return upload
