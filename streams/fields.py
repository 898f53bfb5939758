"""The text fields every model of `streams` and `dashboard` declares: Django's, each write
passing `streams.core.storable` where the value enters SQL (`get_db_prep_save`, what every
INSERT and UPDATE of the ORM calls: `save`, `create`, `update`, `bulk_create`,
`bulk_update`, and the row module's raw UPDATE). A writer cannot store a value too long for
its column or a NUL, whichever path it takes; a saved instance holds what was stored
(`pre_save`); lookups are left alone (a filter compares what it is given).

They deconstruct as Django's own fields: how a value is written is not the schema, so the
migrations neither change nor depend on this module."""

from django.db import models

from streams.core.storable import storable, storable_json


class _Storable:
    def _storable(self, value):
        return storable(value, self.max_length) if isinstance(value, str) else value

    def pre_save(self, model_instance, add):
        value = super().pre_save(model_instance, add)
        stored = self._storable(value)
        if stored is not value:
            setattr(model_instance, self.attname, stored)
        return stored

    def get_db_prep_save(self, value, connection):
        return super().get_db_prep_save(self._storable(value), connection)

    def deconstruct(self):
        name, _path, args, kwargs = super().deconstruct()
        return name, f"django.db.models.{self.django.__name__}", args, kwargs


class CharField(_Storable, models.CharField):
    django = models.CharField


class EmailField(_Storable, models.EmailField):
    django = models.EmailField


class SlugField(_Storable, models.SlugField):
    django = models.SlugField


class TextField(_Storable, models.TextField):
    django = models.TextField


class JSONField(_Storable, models.JSONField):
    django = models.JSONField

    def _storable(self, value):
        if value is None or hasattr(value, "as_sql"):  # (SQL NULL, an expression)
            return value
        return storable_json(value, self.encoder)
