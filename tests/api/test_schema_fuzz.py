"""SEC-3: schemathesis over every operation of the OpenAPI schema, in-process against the
WSGI app on the test database, as an operator keeping the catalog and as a staff colleague
without model permissions: no response is a 5xx, every response conforms to the schema
(positive and negative phases, stateful links), and no catalog write of the colleague's
succeeds (SEC-15). Two callers, not three: each doubles the run time, and a plain user
meets the same permission classes the colleague does."""

from __future__ import annotations

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.db import close_old_connections, transaction
from hypothesis import HealthCheck, settings
from rest_framework.authtoken.models import Token
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance

from config.wsgi import application
from tests.conftest import CATALOG_PERMISSIONS, grant
from tests.support.catalog import make_configuration, make_skill, make_snippet

schema = schemathesis.openapi.from_wsgi("/api/schema/", application)
schema.config.generation.update(max_examples=8, deterministic=True)

CHECKS = [not_a_server_error, response_schema_conformance]
CATALOG = ("providers", "configurations", "snippets", "skills", "webhooks", "mcp-servers")
CATALOG_PATHS = tuple(f"/api/{name}" for name in CATALOG)


def assert_no_catalog_write(role: str, method: str, path: str, status: int) -> None:
    """SEC-15: `is_staff` alone changes nothing in the catalog (and reads none of it)."""
    if role == "colleague" and path.startswith(CATALOG_PATHS):
        assert status >= 400, f"{method} {path} answered {status} to a colleague"


@pytest.fixture(autouse=True)
def _keep_the_test_transaction():
    """As Django's test client does: a request must not close the connection that holds
    the test's transaction."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture(params=["operator", "colleague"])
def role(request):
    return request.param


@pytest.fixture
def token(role, django_user_model):
    user = django_user_model.objects.create_user(f"fuzz-{role}", is_staff=True)
    if role == "operator":
        grant(user, *CATALOG_PERMISSIONS)
    make_configuration("fuzz")
    make_snippet("fuzz-snippet")
    make_skill("fuzz-skill")
    return Token.objects.create(user=user).key


@pytest.mark.django_db
@schema.parametrize()
@settings(suppress_health_check=list(HealthCheck), deadline=None)
def test_no_operation_answers_a_5xx_or_off_schema(case, role, token):
    response = case.call_and_validate(headers={"Authorization": f"Token {token}"}, checks=CHECKS)
    assert_no_catalog_write(role, case.method, case.formatted_path, response.status_code)


@pytest.mark.django_db
def test_stateful_sequences_over_inferred_links_answer_no_5xx(role, token):
    """Links inferred from the schema (create -> read/update/delete, run -> events ...):
    sequences of calls on the objects earlier calls created."""
    machine = schema.as_state_machine()

    class Authorised(machine):
        # Each scenario starts from the same rows, so Hypothesis can replay it.
        def setup(self):
            self.scenario = transaction.atomic()
            self.scenario.__enter__()

        def teardown(self):
            transaction.set_rollback(True)
            self.scenario.__exit__(None, None, None)

        def get_call_kwargs(self, case):
            return {"headers": {"Authorization": f"Token {token}"}}

        def validate_response(self, response, case, additional_checks=None, **kwargs):
            case.validate_response(response, checks=CHECKS, transport_kwargs=kwargs or None)
            assert_no_catalog_write(role, case.method, case.formatted_path, response.status_code)

    Authorised.run(
        settings=settings(
            max_examples=15,
            stateful_step_count=6,
            derandomize=True,
            deadline=None,
            suppress_health_check=list(HealthCheck),
        )
    )
