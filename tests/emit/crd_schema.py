"""Strict validation against a vendored CRD schema: what the API server keeps, nothing it would prune."""

from __future__ import annotations


def strict(schema):
    """An OpenAPI object schema that rejects unknown fields, as the API server prunes them (kubeconform's strict)."""
    if isinstance(schema, dict):
        out = {k: strict(v) for k, v in schema.items()}
        if "properties" in out and "additionalProperties" not in out \
                and not out.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [strict(v) for v in schema]
    return schema
