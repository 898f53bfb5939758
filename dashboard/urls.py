"""The site's routes, grouped by page, in one list (one place shows every page's URL and name;
the API's are in streams/urls.py, the WebSockets' in streams/live/sockets.py). A view's function
name is its URL name.
"""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.templatetags.static import static
from django.urls import include, path, register_converter
from django.views.generic import RedirectView
from django.views.i18n import JavaScriptCatalog

from dashboard.project import switch_project
from dashboard.timezone import set_time_zone
from dashboard.views import (
    alerts,
    analytics,
    audit,
    channels,
    definitions,
    evaluators,
    experiments,
    exports,
    feedback,
    playground,
    projects,
    saved,
    shares,
    sign_in,
    streams,
    tokens,
)
from streams.access import identity_provider
from streams.serve import scrape


class SessionConverter:
    """A session name in a path, slashes and all, that a browser does not rewrite: a segment
    `.` or `..` (which browsers resolve away, even written `%2e`) or one starting with `~`
    gets a `~` in front, taken off again when the URL is read."""

    regex = ".+"

    def to_python(self, value):
        return "/".join(s[1:] if s.startswith("~") else s for s in value.split("/"))

    def to_url(self, value):
        return "/".join(
            "~" + s if s in (".", "..") or s.startswith("~") else s for s in value.split("/")
        )


register_converter(SessionConverter, "session")

# under /projects/<slug>/: a project's members, invitations and settings (docs/teams.md)
project_urls = [
    path("members/", projects.project_members, name="project_members"),
    path("members/add/", projects.project_member_add, name="project_member_add"),
    path("members/<int:user_id>/role/", projects.project_member_role,
         name="project_member_role"),
    path("members/<int:user_id>/remove/", projects.project_member_remove,
         name="project_member_remove"),
    path("leave/", projects.project_leave, name="project_leave"),
    path("invitations/new/", projects.project_invite, name="project_invite"),
    path("invitations/<int:invitation_id>/revoke/", projects.project_invitation_revoke,
         name="project_invitation_revoke"),
    path("settings/", projects.project_settings, name="project_settings"),
    path("settings/save/", projects.project_configure, name="project_configure"),
    path("score-types/", definitions.project_score_types, name="project_score_types"),
    path("score-types/new/", definitions.project_score_type_add, name="project_score_type_add"),
    path("score-types/<int:score_type_id>/", definitions.project_score_type_edit,
         name="project_score_type_edit"),
    path("score-types/<int:score_type_id>/delete/", definitions.project_score_type_delete,
         name="project_score_type_delete"),
    path("prices/", definitions.project_prices, name="project_prices"),
    path("prices/new/", definitions.project_price_add, name="project_price_add"),
    path("prices/<int:price_id>/", definitions.project_price_edit, name="project_price_edit"),
    path("prices/<int:price_id>/delete/", definitions.project_price_delete,
         name="project_price_delete"),
    path("rename/", projects.project_rename, name="project_rename"),
    path("delete/", projects.project_delete, name="project_delete"),
]  # fmt: skip

# under /playground/; what each does is in the table of dashboard/views/playground.py
playground_urls = [
    path("", playground.playground, name="playground"),
    path("send/", playground.playground_send, name="playground_send"),
    path("compare/", playground.playground_compare, name="playground_compare"),
    path("compare/send/", playground.playground_compare_send, name="playground_compare_send"),
    path("<int:conversation_id>/", playground.playground_conversation,
         name="playground_conversation"),
    path("<int:conversation_id>/send/", playground.playground_send, name="playground_send"),
    path("<int:conversation_id>/delete/", playground.playground_delete, name="playground_delete"),
    path("<int:conversation_id>/turns/<int:turn_id>/", playground.playground_turn,
         name="playground_turn"),
    path("<int:conversation_id>/turns/<int:turn_id>/retry/", playground.playground_retry,
         name="playground_retry"),
]  # fmt: skip

urlpatterns = [
    path("login/", sign_in.Login.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("favicon.ico", RedirectView.as_view(url=static("favicon.svg"), permanent=True)),
    path("api/", include("streams.urls")),
    # Prometheus scrapes `metrics_path: /metrics` (no slash, its default); bearer token or staff
    path("metrics", scrape.metrics, name="metrics"),
    # the language switcher's POST (Django's set_language) and the scripts' Dutch strings
    path("i18n/", include("django.conf.urls.i18n")),
    path("i18n/time-zone/", set_time_zone, name="set_time_zone"),
    path("projects/switch/", switch_project, name="switch_project"),
    path("projects/", projects.project_list, name="project_list"),
    path("projects/new/", projects.project_create, name="project_create"),
    path("projects/<slug:project_slug>/", include(project_urls)),
    # an invitation's link (its key is the credential) and its "Join" button
    path("invitations/<str:key>/", projects.invitation, name="invitation"),
    path("invitations/<str:key>/accept/", projects.invitation_accept, name="invitation_accept"),
    path("jsi18n/", JavaScriptCatalog.as_view(packages=["dashboard"]), name="javascript_catalog"),
    # the streams pages
    path("", streams.stream_list, name="stream_list"),
    path("streams.csv", exports.stream_list_csv, name="stream_list_csv"),
    path("streams/upload/", streams.stream_upload, name="stream_upload"),
    path("imports/<int:job_id>/", streams.import_job, name="import_job"),
    path("imports/<int:job_id>/cancel/", streams.import_cancel, name="import_cancel"),
    path("streams/<int:stream_id>/", streams.stream_detail, name="stream_detail"),
    path("streams/<int:stream_id>/events/", streams.stream_events, name="stream_events"),
    path("streams/<int:stream_id>/events/<int:index>/", streams.stream_event, name="stream_event"),
    path("streams/<int:stream_id>/timing.json", streams.stream_timing, name="stream_timing"),
    path("streams/<int:stream_id>/replay.json", streams.stream_replay, name="stream_replay"),
    path("streams/<int:stream_id>.sse", streams.stream_sse, name="stream_sse"),
    path("streams/<int:stream_id>.json", streams.stream_json, name="stream_json"),
    path("streams/compare/", streams.stream_compare_pick, name="stream_compare_pick"),
    path("streams/<int:stream_id>/score/", feedback.stream_score, name="stream_score"),
    path("streams/<int:stream_id>/comment/", feedback.stream_comment, name="stream_comment"),
    path(
        "streams/<int:stream_id>/scores/<int:score_id>/withdraw/",
        feedback.stream_score_withdraw,
        name="stream_score_withdraw",
    ),
    path("views/", saved.saved_view_list, name="saved_views"),
    path("views/<int:view_id>/delete/", saved.saved_view_delete, name="saved_view_delete"),
    path(
        "streams/<int:stream_id>/compare/", streams.stream_compare_with, name="stream_compare_with"
    ),
    path(
        "streams/<int:stream_id>/compare/<int:other_id>/",
        streams.stream_compare,
        name="stream_compare",
    ),  # fmt: skip
    # a session name is the client's own (X-Streamscope-Session): any text, slashes included
    path("sessions/<session:session>/", streams.session_detail, name="session_detail"),
    # share links: making and revoking them, and the links themselves (docs/sharing.md)
    path("shares/", shares.share_list, name="share_list"),
    path("shares/new/", shares.share_create, name="share_create"),
    path("shares/<int:link_id>/revoke/", shares.share_revoke, name="share_revoke"),
    path("s/<str:secret>/", shares.shared, name="shared"),
    path("s/<str:secret>/streams/<int:stream_id>/", shares.shared_stream, name="shared_stream"),
    path(
        "s/<str:secret>/streams/<int:stream_id>/events/",
        shares.shared_stream_events,
        name="shared_stream_events",
    ),
    path(
        "s/<str:secret>/streams/<int:stream_id>/events/<int:index>/",
        shares.shared_stream_event,
        name="shared_stream_event",
    ),
    path(
        "s/<str:secret>/streams/<int:stream_id>/timing.json",
        shares.shared_stream_timing,
        name="shared_stream_timing",
    ),
    path(
        "s/<str:secret>/streams/<int:stream_id>/replay.json",
        shares.shared_stream_replay,
        name="shared_stream_replay",
    ),
    # the project's tokens (docs/teams.md, "Tokens")
    path("tokens/", tokens.token_list, name="token_list"),
    path("tokens/<int:token_id>/revoke/", tokens.token_revoke, name="token_revoke"),
    # notification channels (docs/alerts.md): a project's admins manage them
    path("channels/", channels.channel_list, name="channel_list"),
    path("channels/<int:channel_id>/", channels.channel_detail, name="channel_detail"),
    path("channels/<int:channel_id>/test/", channels.channel_test, name="channel_test"),
    path("channels/<int:channel_id>/delete/", channels.channel_delete, name="channel_delete"),
    # evaluators and the online rules that apply them (docs/experiments.md, "Evaluators")
    path("evaluators/", evaluators.evaluator_list, name="evaluator_list"),
    path("evaluators/new/", evaluators.evaluator_new, name="evaluator_new"),
    path("evaluators/<int:evaluator_id>/", evaluators.evaluator_detail, name="evaluator_detail"),
    path("evaluators/<int:evaluator_id>/try/", evaluators.evaluator_try, name="evaluator_try"),
    path(
        "evaluators/<int:evaluator_id>/delete/",
        evaluators.evaluator_delete,
        name="evaluator_delete",
    ),
    path("evaluators/rules/", evaluators.online_rule_list, name="online_rule_list"),
    path(
        "evaluators/rules/<int:online_rule_id>/",
        evaluators.online_rule_detail,
        name="online_rule_detail",
    ),
    path(
        "evaluators/rules/<int:online_rule_id>/delete/",
        evaluators.online_rule_delete,
        name="online_rule_delete",
    ),
    # analytics
    path("latency/", analytics.latency, name="latency"),
    path("routing/", analytics.routing, name="routing"),
    path("usage/", analytics.usage, name="usage"),
    path("usage/export.csv", analytics.usage_export, name="usage_export"),
    path("analytics/", analytics.admin_analytics, name="admin_analytics"),
    # alert rules (dashboard/views/alerts.py; docs/alerts.md)
    path("alerts/", alerts.alerts, name="alerts"),
    path("alerts/new/", alerts.alert_rule_new, name="alert_rule_new"),
    path("alerts/backtest/", alerts.alert_backtest, name="alert_backtest"),
    path("alerts/history/", alerts.alert_history, name="alert_history"),
    path("alerts/silences/", alerts.alert_silences, name="alert_silences"),
    path(
        "alerts/silences/<int:silence_id>/end/", alerts.alert_silence_end, name="alert_silence_end"
    ),
    path("alerts/<int:rule_id>/", alerts.alert_rule, name="alert_rule"),
    path("alerts/<int:rule_id>/delete/", alerts.alert_rule_delete, name="alert_rule_delete"),
    # who changed what (a project's admins: their project's; staff: every project's)
    path("audit/", audit.audit, name="audit"),
    path("playground/", include(playground_urls)),
    # datasets, experiments and their runs (docs/experiments.md)
    path("datasets/", experiments.dataset_list, name="dataset_list"),
    path("datasets/<int:dataset_id>/", experiments.dataset_detail, name="dataset_detail"),
    path("datasets/<int:dataset_id>/upload/", experiments.dataset_upload, name="dataset_upload"),
    path(
        "streams/add-to-dataset/",
        experiments.streams_add_to_dataset,
        name="streams_add_to_dataset",
    ),
    path(
        "streams/<int:stream_id>/add-to-dataset/",
        experiments.stream_add_to_dataset,
        name="stream_add_to_dataset",
    ),
    path("experiments/", experiments.experiment_list, name="experiment_list"),
    path(
        "experiments/<int:experiment_id>/",
        experiments.experiment_detail,
        name="experiment_detail",
    ),
    path("experiments/<int:experiment_id>/run/", experiments.experiment_run, name="experiment_run"),
    path("runs/<int:run_id>/", experiments.run_detail, name="run_detail"),
    path("runs/<int:run_id>/cancel/", experiments.run_cancel, name="run_cancel"),
    path("runs/<int:run_id>/resume/", experiments.run_resume, name="run_resume"),
    path(
        "runs/<int:run_id>/against/<int:other_run_id>/",
        experiments.run_compare,
        name="run_compare",
    ),
    path("runs/<int:run_id>/export.csv", experiments.run_export_csv, name="run_export_csv"),
    path("runs/<int:run_id>/export.json", experiments.run_export_json, name="run_export_json"),
]
# the identity provider's routes, only when one is configured (docs/sign-in.md; the route
# walkers add them: tests/support/provider_urls.py)
provider_routes = [path("oidc/", include(sign_in.provider_urls))]
if identity_provider.current() is not None:
    urlpatterns += provider_routes
