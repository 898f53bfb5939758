"""Static files, served by WhiteNoise: from STATIC_ROOT once `collectstatic` has filled it (a
deployment), else from the finders (`WHITENOISE_USE_FINDERS`: `make run`, tests), so one
command works on a fresh checkout."""

import os

from django.conf import settings
from whitenoise.middleware import WhiteNoiseMiddleware

# What the finders found, per process and per what the files' answers depend on. A server builds
# its middleware once; Django's test clients build it once per client, and each walked every
# static file again (about 30 ms; the access walker alone made 191 clients).
_from_finders = {}


class StaticFilesMiddleware(WhiteNoiseMiddleware):
    """WhiteNoise, without its warning about a STATIC_ROOT that `collectstatic` has not made:
    while the finders serve every file, that directory's absence is no problem, yet WhiteNoise
    said "No directory at: …/staticfiles/" at every start."""

    def add_files(self, root, prefix=None):
        missing = not os.path.isdir(root)
        if missing and self.use_finders and root == self.static_root:
            return
        super().add_files(root, prefix)

    def add_files_from_finders(self):
        key = (
            self.static_prefix,
            self.max_age,
            self.charset,
            self.allow_all_origins,
            tuple(str(d) for d in settings.STATICFILES_DIRS),
        )
        found = _from_finders.get(key)
        if found is None:
            kept, self.files = self.files, {}
            try:
                super().add_files_from_finders()
                found = _from_finders[key] = self.files
            finally:
                self.files = kept
        self.files.update(found)
