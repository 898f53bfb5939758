from django.apps import AppConfig


class StreamsConfig(AppConfig):
    name = "streams"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        # the rollups' and the scores' delete receivers and the price table's change receiver
        # (each connected where it is defined)
        from streams.core import usage, warmup
        from streams.evaluate import online  # noqa: F401  (its periodic job)
        from streams.experiments import runs  # noqa: F401  (its periodic job)
        from streams.observe import telemetry  # noqa: F401  (its score and comment counters)

        # the background jobs every long-lived process runs (streams/run/periodic.py)
        from streams.run import compaction, deletions  # noqa: F401  (packing; projects deleted)
        from streams.store import aggregates, audit, known_secrets, prices, scores  # noqa: F401

        # the audit log's receivers, and who a management command's changes are
        audit.connect()
        audit.watch_commands()

        # log lines are an exit too: every record, whichever logger makes it, loses any secret
        known_secrets.redact_every_record()
        # what the hot path would load at its first use, loaded as a server starts instead
        # (streams/core/warmup.py)
        warmup.add("the usage tokenizer", usage.warm)
        warmup.add("the maintained price list", prices.warm)
        warmup.add("the sealed pass-through keys' cipher", known_secrets.warm)
        # the background jobs: the alert rules' evaluation (streams/alerts/evaluate.py), the
        # notifications' delivery and the channels' secrets to the gate (streams/notify/)
        from streams.alerts import evaluate  # noqa: F401
        from streams.notify import channels, deliver  # noqa: F401

        _check_group_roles()


def _check_group_roles():
    """A group → role mapping that cannot be read stops the process at start, not at the first
    sign-in (its roles are the models', so it is read once the apps are)."""
    from django.core.exceptions import ImproperlyConfigured

    from streams.access import group_roles, identity_provider

    provider = identity_provider.current()
    if provider is not None:
        try:
            group_roles.parse(provider.groups)
        except ValueError as exc:
            raise ImproperlyConfigured(f"STREAMSCOPE_OIDC_GROUPS: {exc}") from None
