from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from agentruns.api.docs import RedocView
from agentruns.api.metrics import metrics_view
from playground.views import PasswordReset, SignIn, SignOut

urlpatterns = [
    path("admin/", admin.site.urls),
    path("metrics", metrics_view, name="metrics"),
    path("accounts/login/", SignIn.as_view(), name="login"),
    path("accounts/logout/", SignOut.as_view(), name="logout"),
    path("accounts/password_reset/", PasswordReset.as_view(), name="password_reset"),
    path("accounts/", include("django.contrib.auth.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
    path("api/redoc/", RedocView.as_view(url_name="schema"), name="api-redoc"),
    path("api/", include("agentruns.api.urls")),
    path("", include("playground.urls")),
]
