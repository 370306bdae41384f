"""The batch dispatcher: creates the child jobs of admitted batches, a page at a time, fairly across tenants.

It runs in the document sensor's tick (defs/documents.py), never in a request. Each call gives every tenant with
an open batch one page of children from its oldest batch; a page's children and the batch's cursor commit in one
transaction, so a repeated or concurrent call never creates a child twice, and a cancel stops it between pages.
"""

from __future__ import annotations

import json

from evidence_pipeline.documents import Documents
from evidence_pipeline.documents.registry import operation
from evidence_pipeline.intake.admission import request_digest


def dispatch_batches(documents: Documents, page_size: int, actor: str) -> int:
    """Create up to one page of child jobs per tenant; returns how many were created."""
    policy = documents.runtime.settings.policy_version
    created, served = 0, set()
    for batch in documents.ledger.open_batches():
        if batch["tenant"] in served:
            continue  # one page per tenant per call: a tenant's big batch cannot starve another's
        served.add(batch["tenant"])
        manifest = json.loads(documents.store.get(batch["store_key"], expected_sha256=batch["manifest_sha256"]))
        children = [
            (spec["idempotency_key"],
             request_digest(batch["tenant"], operation(spec["operation"]), spec["inputs"], spec["options"], policy),
             spec["operation"], {"inputs": spec["inputs"], "options": spec["options"]})
            for spec in manifest[batch["dispatched"]:batch["dispatched"] + page_size]
        ]
        if documents.ledger.dispatch_batch_page(batch, children, policy, actor):
            created += len(children)
    return created
