"""The pages' forms per language: Django's format modules (settings.FORMAT_MODULE_PATH), read
before Django's own for the language. See dashboard/dates.py for the moments' forms."""
