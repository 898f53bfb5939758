from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.templatetags.static import static
from django.urls import include, path
from django.views.generic import RedirectView

from dashboard import views, views_analytics

urlpatterns = [
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("favicon.ico", RedirectView.as_view(url=static("favicon.svg"), permanent=True)),
    path("api/", include("streams.urls")),
    path("", views.stream_list, name="stream_list"),
    path("streams/upload/", views.stream_upload, name="stream_upload"),
    path("latency/", views_analytics.latency, name="latency"),
    path("routing/", views_analytics.routing, name="routing"),
    path("analytics/", views_analytics.admin_analytics, name="admin_analytics"),
    path("streams/<int:stream_id>/", views.stream_detail, name="stream_detail"),
    path("streams/<int:stream_id>/events/", views.stream_events, name="stream_events"),
    path("streams/<int:stream_id>/events/<int:index>/", views.stream_event, name="stream_event"),
    path("streams/<int:stream_id>/timing.json", views.stream_timing, name="stream_timing"),
    path("streams/<int:stream_id>/replay.json", views.stream_replay, name="stream_replay"),
    path("streams/<int:stream_id>.sse", views.stream_sse, name="stream_sse"),
    path("streams/<int:stream_id>.json", views.stream_json, name="stream_json"),
    path("playground/", include("dashboard.urls_playground")),
]
