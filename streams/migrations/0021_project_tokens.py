"""Project tokens (docs/teams.md, "Tokens"): who made a token, its scopes, expiry, limits
(requests per minute, spend caps per UTC day and month) and what it spent; a project's
currency; the token a proxied stream came through. Tokens made before scopes keep every scope
(they could do everything). The scope names are frozen here as they were written."""

import importlib

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


SCOPES = ["proxy", "read", "write"]
# SQLite remakes the stream table to drop `token` (going back): the search index's view and
# triggers over it go first and come back after, as 0018 does for `project`.
_projects = importlib.import_module("streams.migrations.0018_projects")
_search_index_on, _search_index_off = _projects._search_index_on, _projects._search_index_off


def every_scope(apps, schema_editor):
    """Tokens made before scopes could do everything: they keep every scope."""
    apps.get_model("streams", "ApiToken").objects.update(scopes=SCOPES)


class Migration(migrations.Migration):

    dependencies = [
        ('streams', '0020_invitations'),  # (main's leaf at the merge: one chain)
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name='apitoken',
            name='created_by',
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL, verbose_name='created by'),
        ),
        migrations.AddField(
            model_name='apitoken',
            name='expires_at',
            field=models.DateTimeField(blank=True, null=True, verbose_name='expires at'),
        ),
        migrations.AddField(
            model_name='apitoken',
            name='requests_per_minute',
            field=models.PositiveIntegerField(blank=True, null=True, verbose_name='requests per minute'),
        ),
        migrations.AddField(
            model_name='apitoken',
            name='scopes',
            field=models.JSONField(blank=True, default=list, verbose_name='scopes'),
        ),
        migrations.AddField(
            model_name='apitoken',
            name='spend_cap_day_nanos',
            field=models.BigIntegerField(blank=True, null=True, verbose_name='spend cap per day'),
        ),
        migrations.AddField(
            model_name='apitoken',
            name='spend_cap_month_nanos',
            field=models.BigIntegerField(blank=True, null=True, verbose_name='spend cap per month'),
        ),
        migrations.AddField(
            model_name='apitoken',
            name='spent_day',
            field=models.DateField(blank=True, null=True, verbose_name='spend counted on'),
        ),
        migrations.AddField(
            model_name='apitoken',
            name='spent_day_nanos',
            field=models.BigIntegerField(default=0, verbose_name='spent that day'),
        ),
        migrations.AddField(
            model_name='apitoken',
            name='spent_month',
            field=models.DateField(blank=True, null=True, verbose_name='spend counted in month'),
        ),
        migrations.AddField(
            model_name='apitoken',
            name='spent_month_nanos',
            field=models.BigIntegerField(default=0, verbose_name='spent that month'),
        ),
        migrations.AddField(
            model_name='project',
            name='currency',
            field=models.CharField(choices=[('EUR', 'EUR'), ('USD', 'USD')], default='EUR', max_length=3, verbose_name='currency'),
        ),
        migrations.RunPython(migrations.RunPython.noop, _search_index_on),
        migrations.AddField(
            model_name='stream',
            name='token',
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='streams', to='streams.apitoken', verbose_name='token'),
        ),
        migrations.RunPython(migrations.RunPython.noop, _search_index_off),
        migrations.RunPython(every_scope, migrations.RunPython.noop, elidable=False),
    ]
