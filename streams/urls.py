"""The JSON API (included under /api/ by dashboard/urls.py)."""

from django.urls import path

from streams.serve import api, api_experiments, evaluators_api

urlpatterns = [
    path("streams/", api.api_streams, name="api_streams"),
    path("streams/<int:stream_id>/", api.api_stream, name="api_stream"),
    path("streams/<int:stream_id>/events/", api.api_stream_events, name="api_stream_events"),
    path("streams/<int:stream_id>/cancel/", api.api_stream_cancel, name="api_stream_cancel"),
    path("scores/", api.api_scores, name="api_scores"),
    path("comments/", api.api_comments, name="api_comments"),
    path("score-types/", api.api_score_types, name="api_score_types"),
    path("alerts/rules/", api.api_alert_rules, name="api_alert_rules"),
    path("alerts/rules/<int:rule_id>/", api.api_alert_rule, name="api_alert_rule"),
    path("alerts/silences/", api.api_alert_silences, name="api_alert_silences"),
    path("alerts/history/", api.api_alert_history, name="api_alert_history"),
    path("channels/", api.api_channels, name="api_channels"),
    path("channels/<int:channel_id>/", api.api_channel, name="api_channel"),
    path("channels/<int:channel_id>/delete/", api.api_channel_delete, name="api_channel_delete"),
    path("channels/<int:channel_id>/test/", api.api_channel_test, name="api_channel_test"),
    path(
        "channels/<int:channel_id>/deliveries/",
        api.api_channel_deliveries,
        name="api_channel_deliveries",
    ),
    # datasets and experiments (docs/experiments.md, "API")
    path("datasets/", api_experiments.api_datasets, name="api_datasets"),
    path(
        "datasets/<int:dataset_id>/items/",
        api_experiments.api_dataset_items,
        name="api_dataset_items",
    ),
    path("experiments/", api_experiments.api_experiments, name="api_experiments"),
    path(
        "experiments/<int:experiment_id>/runs/",
        api_experiments.api_experiment_runs,
        name="api_experiment_runs",
    ),
    path("runs/<int:run_id>/", api_experiments.api_run, name="api_run"),
    path("evaluators/", evaluators_api.api_evaluators, name="api_evaluators"),
    path("evaluators/<int:evaluator_id>/", evaluators_api.api_evaluator, name="api_evaluator"),
    path(
        "evaluators/<int:evaluator_id>/apply/",
        evaluators_api.api_evaluator_apply,
        name="api_evaluator_apply",
    ),
    path("online-rules/", evaluators_api.api_online_rules, name="api_online_rules"),
    path(
        "online-rules/<int:online_rule_id>/", evaluators_api.api_online_rule, name="api_online_rule"
    ),
]
