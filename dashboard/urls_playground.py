"""The chat playground's URLs, included under /playground/ (see dashboard/views_playground.py)."""

from django.urls import path

from dashboard import views_playground as views

urlpatterns = [
    path("", views.playground, name="playground"),
    path("send/", views.playground_send, name="playground_send"),
    path("<int:conversation_id>/", views.playground_conversation, name="playground_conversation"),
    path("<int:conversation_id>/send/", views.playground_send, name="playground_send"),
    path("<int:conversation_id>/delete/", views.playground_delete, name="playground_delete"),
    path(
        "<int:conversation_id>/turns/<int:turn_id>/",
        views.playground_turn,
        name="playground_turn",
    ),
    path(
        "<int:conversation_id>/turns/<int:turn_id>/retry/",
        views.playground_retry,
        name="playground_retry",
    ),
]
