"""Responses checked against the published OpenAPI contract."""

from __future__ import annotations

import httpx
from jsonschema import Draft202012Validator

from evidence_pipeline.intake.app import CONTRACT


def _inline(schema, contract: dict = CONTRACT):
    """The schema with the contract's component references replaced by the components (none is recursive)."""
    if isinstance(schema, dict):
        if set(schema) == {"$ref"}:
            return _inline(contract["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]], contract)
        return {key: _inline(value, contract) for key, value in schema.items()}
    if isinstance(schema, list):
        return [_inline(item, contract) for item in schema]
    return schema


def conforms(method: str, template: str, response: httpx.Response, contract: dict = CONTRACT) -> None:
    """The response is one ``contract`` (the tenant API's by default) declares for the operation: its status, its
    body and its headers."""
    declared = contract["paths"][template][method]["responses"]
    answer = declared.get(str(response.status_code))
    assert answer is not None, f"{method.upper()} {template} answered {response.status_code}: {response.text}"
    Draft202012Validator(_inline(answer["content"]["application/json"]["schema"], contract)).validate(response.json())
    for header in answer.get("headers", {}):
        assert header in response.headers
