"""The audit log (docs/teams.md, "Audit log"): who changed what, when, from where."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('streams', '0021_project_tokens'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='AuditEntry',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('actor_name', models.CharField(blank=True, max_length=150, verbose_name="actor's name")),
                ('at', models.DateTimeField(verbose_name='at')),
                ('address', models.CharField(blank=True, max_length=100, verbose_name='from')),
                ('action', models.CharField(max_length=40, verbose_name='action')),
                ('target_type', models.CharField(blank=True, max_length=40, verbose_name='target type')),
                ('target_id', models.CharField(blank=True, max_length=64, verbose_name='target id')),
                ('target_label', models.CharField(blank=True, max_length=200, verbose_name='target')),
                ('changes', models.JSONField(blank=True, default=dict, verbose_name='changes')),
                ('actor', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL, verbose_name='actor')),
                ('project', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='audit_entries', to='streams.project', verbose_name='project')),
            ],
            options={
                'verbose_name': 'audit entry',
                'verbose_name_plural': 'audit entries',
                'indexes': [models.Index(fields=['project', '-at'], name='audit_project_at'), models.Index(fields=['-at'], name='audit_at')],
            },
        ),
    ]
