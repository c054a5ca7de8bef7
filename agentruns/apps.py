from django.apps import AppConfig


class AgentrunsConfig(AppConfig):
    name = "agentruns"
    verbose_name = "Agent runs"

    def ready(self) -> None:
        from agentruns import signals  # noqa: F401  (connects the catalog generation bump)
