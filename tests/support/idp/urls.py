from django.contrib.auth import views as auth_views
from django.urls import include, path

from tests.support.idp import views

urlpatterns = [
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("o/", include("oauth2_provider.urls", namespace="oauth2_provider")),
    path("_test/client/", views.client),
    path("_test/user/", views.user),
    path("_test/expire-codes/", views.expire_codes),
]
