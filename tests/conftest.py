from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from rest_framework.test import APIClient

from agentruns.tools.mcp.sessions import sessions
from tests.support import leaks

# SEC-15: what an operator who keeps the catalog holds, in the admin and over the API.
CATALOG_MODELS = (
    "provider",
    "configuration",
    "snippet",
    "skill",
    "mcpserver",
    "mcptool",
    "webhook",
)
CATALOG_PERMISSIONS = [
    f"{action}_{model}"
    for model in CATALOG_MODELS
    for action in ("add", "change", "delete", "view")
]


@pytest.fixture
def staff(django_user_model):
    """An operator: staff keeping the catalog (SEC-15), with the playground permission, so
    may force sources and dry-run (FS-5); approving still needs `approve_run`."""
    user = django_user_model.objects.create_user("staff", password="pw", is_staff=True)
    return grant(user, "use_playground", *CATALOG_PERMISSIONS)


@pytest.fixture
def member(django_user_model):
    return django_user_model.objects.create_user("member", password="pw")


@pytest.fixture
def api(staff) -> APIClient:
    client = APIClient()
    client.force_authenticate(staff)
    return client


def grant(user, *codenames: str):
    user.user_permissions.add(
        *Permission.objects.filter(content_type__app_label="agentruns", codename__in=codenames)
    )
    # Django caches permissions on the instance.
    for attr in ("_perm_cache", "_user_perm_cache"):
        if hasattr(user, attr):
            delattr(user, attr)
    return user


# The suite's own tools (TOOL-4's uncertain case, blocking and failing tools) register on
# import; child processes get them through AGENTRUNS_EXTRA_TOOL_MODULES.
import tests.support.tools  # noqa: E402, F401

# SEC-11: the variables the suite's providers name, allowed as a deployer would list them
# (tests/support/crash.child_env hands the list to child processes).
TEST_KEY_VARS = [
    "HITL_TEST_KEY",
    "TEST_PROVIDER_KEY",
    "UNIT_TEST_PROVIDER_KEY",
    "OPENISH_API_KEY",
    "I3_FAKE_OPENAI_KEY",
    "PLANTED_OPENAI_KEY",
    "HF_TOKEN",
]


@pytest.fixture(autouse=True)
def _test_key_vars(settings):
    settings.AGENTRUNS_PROVIDER_KEY_VARS = [*settings.AGENTRUNS_PROVIDER_KEY_VARS, *TEST_KEY_VARS]


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):
    # PBKDF2 costs ~0.4 s per user; the suite creates hundreds.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def _nothing_left_running():
    """A test whose fixtures left a thread or a child process running fails (its work
    would race the next test and the database flush). Set up after the wider-scoped
    fixtures (the browser, the live server), so what they keep running is not counted;
    torn down after the test's own fixtures and before pytest-django flushes."""
    before = leaks.running()
    yield
    left = leaks.left_running(before)
    if left:
        pytest.fail(f"still running after the test's teardown: {left.describe()}")


@pytest.fixture(autouse=True)
def _sessions_closed_before_the_leak_check():
    """INT-4: a worker keeps its MCP sessions (and stdio servers) open; a test's end is
    this process's end for them. Autouse fixtures of a scope are set up by name, so this
    one is torn down before `_nothing_left_running` looks."""
    yield
    sessions().close()


@pytest.fixture
def effects(tmp_path, monkeypatch):
    """Where `test.external_write` records its external effects, one line each."""
    path = tmp_path / "effects.log"
    monkeypatch.setenv("AGENTRUNS_TEST_EFFECT_FILE", str(path))
    return path


@pytest.fixture(autouse=True)
def _nothing_cached_across_tests():
    """Pinned MCP tools (MCP-2) and runtime configurations are cached per catalog
    generation; a rolled-back test takes the generation back and a sequence reset reuses
    ids, so each test starts from the tools registered in code and an empty cache."""
    yield
    forget_caches()


from agentruns.runtime.config import forget_caches  # noqa: E402
