from django.apps import AppConfig


class AgentrunsConfig(AppConfig):
    name = "agentruns"
    verbose_name = "Agent runs"

    def ready(self) -> None:
        from django.conf import settings

        from agentruns import signals  # noqa: F401  (connects the catalog generation bump)
        from agentruns.tools import builtin  # noqa: F401  (registers the built-in tools)

        if settings.AGENTRUNS_TEST_TOOLS:
            from agentruns.tools.testing_tools import register_test_tools

            register_test_tools()
