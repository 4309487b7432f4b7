"""schemathesis fuzzes the OpenAPI document the server publishes against the
real server, valid and invalid requests alike: no 5xx (issue 10 step 6).

The cases come from schemathesis' strategies and run under a plain
Hypothesis ``@given`` (its pytest plugin does not run on this pytest)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

schemathesis = pytest.importorskip("schemathesis")


@pytest.mark.slow
def test_no_5xx_on_any_operation(serve):
    served = serve(max_model_len=48, num_kv_blocks=64)
    schema = schemathesis.openapi.from_url(served.base_url + "/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert {op.path for op in operations} >= {"/v1/completions", "/v1/chat/completions",
                                              "/v1/models", "/health", "/metrics", "/version"}
    for operation in operations:
        _fuzz(operation, schemathesis.GenerationMode.POSITIVE)
        if operation.method.upper() == "POST":  # only a body can be made invalid
            _fuzz(operation, schemathesis.GenerationMode.NEGATIVE)


def _fuzz(operation, mode) -> None:
    @given(case=operation.as_strategy(mode))
    @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck),
              database=None)
    def check(case) -> None:
        response = case.call(timeout=120)
        assert response.status_code < 500, (case.method, case.path, case.body, response.text)
        if response.status_code >= 400:
            assert response.json()["error"]["message"]

    check()
