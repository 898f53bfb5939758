from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from dashboard import views

urlpatterns = [
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("api/", include("streams.urls")),
    path("streams/upload/", views.stream_upload, name="stream_upload"),
    path("streams/<int:stream_id>.sse", views.stream_sse, name="stream_sse"),
    path("streams/<int:stream_id>.json", views.stream_json, name="stream_json"),
    path("playground/", include("dashboard.urls_playground")),
]
