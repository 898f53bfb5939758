"""Django's makemessages, with the page scripts' own translation functions as keywords.

static/js/i18n.js exports `t(text)` (gettext) and `tn(singular, plural, n)` (ngettext), which
xgettext does not know; for the `djangojs` domain they are added to its keywords, so that

    python manage.py makemessages -d djangojs -l nl -i .venv -i node_modules -i static/vendor

extracts them into dashboard/locale/nl/LC_MESSAGES/djangojs.po (settings.LOCALE_PATHS: the
scripts live in the project's static/, outside any app). The `django` domain is unchanged.
"""

from django.core.management.commands import makemessages

JS_KEYWORDS = ["--keyword=t", "--keyword=tn:1,2"]


class Command(makemessages.Command):
    def handle(self, *args, **options):
        if options.get("domain") == "djangojs":
            self.xgettext_options = [*makemessages.Command.xgettext_options, *JS_KEYWORDS]
        return super().handle(*args, **options)
