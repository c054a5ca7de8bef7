import importlib

from django.apps import AppConfig


class AgentrunsConfig(AppConfig):
    name = "agentruns"
    verbose_name = "Agent runs"

    def ready(self) -> None:
        from django.conf import settings

        from agentruns import signals  # noqa: F401  (connects the catalog generation bump)
        from agentruns.cluster import (
            admin,  # noqa: F401  (the cluster's page in the admin)
            startup,  # noqa: F401  (the cluster's line at start)
        )
        from agentruns.tools import builtin  # noqa: F401  (registers the built-in tools)

        # Tools that are not the product's (the test suite's) register on import.
        for module in settings.AGENTRUNS_EXTRA_TOOL_MODULES:
            importlib.import_module(module)

        # OPS-7: traces when OTEL_EXPORTER_OTLP_ENDPOINT is set; before the first request
        # builds the middleware chain, so the Django instrumentation is in it.
        from agentruns import tracing

        tracing.configure()
