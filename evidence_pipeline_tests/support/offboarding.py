"""A tenant's offboarding asked for and approved, as the operators' signed requests do it."""

from __future__ import annotations

from evidence_pipeline.actors.roles import Action
from evidence_pipeline.operations.offboarding import offboard_tenant, pending_request, request_offboarding
from evidence_pipeline_tests.support.signers import signers_of


def ask(documents, tenant: str, reason: str, operator: str = "olga") -> dict:
    signers = signers_of(documents.ledger)
    return request_offboarding(
        documents, signers.gate, signers.sign(operator, Action.TENANT_OFFBOARD, {"reason": reason}, tenant=tenant)
    )


def approve(documents, tenant: str, approver: str = "bob") -> dict:
    """What `evidence tenant offboard TENANT --approve` does: approve the pending request, or converge."""
    signers = signers_of(documents.ledger)
    pending = pending_request(documents, tenant)
    return offboard_tenant(
        documents,
        signers.gate,
        signers.sign(
            approver, Action.TENANT_OFFBOARD_APPROVE, {"request": pending["event_id"] if pending else ""}, tenant=tenant
        ),
    )
