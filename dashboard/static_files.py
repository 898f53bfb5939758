"""Static files, served by WhiteNoise: from STATIC_ROOT once `collectstatic` has filled it (a
deployment), else from the finders (`WHITENOISE_USE_FINDERS`: `make run`, tests), so one
command works on a fresh checkout."""

import os

from whitenoise.middleware import WhiteNoiseMiddleware


class StaticFilesMiddleware(WhiteNoiseMiddleware):
    """WhiteNoise, without its warning about a STATIC_ROOT that `collectstatic` has not made:
    while the finders serve every file, that directory's absence is no problem, yet WhiteNoise
    said "No directory at: …/staticfiles/" at every start."""

    def add_files(self, root, prefix=None):
        missing = not os.path.isdir(root)
        if missing and self.use_finders and root == self.static_root:
            return
        super().add_files(root, prefix)
