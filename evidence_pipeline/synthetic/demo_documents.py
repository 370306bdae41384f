"""The demo's document jobs: lease contracts (clean and defective) for `contract-review`, rental applications for
`redact` under an approved template version, and a signed district agreement for `split` (its signature check
first, then four parts), submitted for each demo tenant through the front door's code
path (intake's admission: the same checks, document store, idempotency keys and ledger events as `evidence intake
serve`, without HTTP). Once the split has run, each part is reviewed under the district-agreement ruleset, which
rejects the data-processing addendum (it states no end date); once the reviews have run, the dev approver approves
the addendum by a signed `part.decide` with its reason, as `evidence part decide` does, and all four parts are
merged back into one agreement.

Each demo tenant gets one of two organizations' templates merged with one of two programs', submitted by the dev
operator and approved by the dev approver (demo_actors.py), signed as `evidence template submit` and `approve` sign
them. The jobs are filed
under the last complete month (``period``), so that the month's report, rendered after them, lists them in its
"Document jobs" section. The agreement is signed by a demo district's own development key, which no trust
policy lists (its signature check reports the signature intact but untrusted), once per home: the signed copy is
kept under EVIDENCE_HOME/demo-district. Everything is deterministic: a second demo submits the same documents
under the same keys and gets the same jobs back.
"""

from __future__ import annotations

from dataclasses import dataclass

from evidence_pipeline.actors.roles import Action
from evidence_pipeline.canonical import utc_iso
from evidence_pipeline.documents import templates
from evidence_pipeline.documents.decisions import approving_pin, decide_part
from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.intake.admission import PDF, store_document, submit_job
from evidence_pipeline.ledger.admission import Clock
from evidence_pipeline.ledger.rows import Document
from evidence_pipeline.runtime import Runtime
from evidence_pipeline.signing.keys import load_keyring
from evidence_pipeline.store import sha256_hex
from evidence_pipeline.store.local import LocalStore
from evidence_pipeline.synthetic import district_agreements
from evidence_pipeline.synthetic.demo_actors import APPROVER, OPERATOR, DemoActors
from evidence_pipeline.synthetic.lease_contracts import lease_contract
from evidence_pipeline.synthetic.rental_applications import application, organization_template, program_template

ACTOR = "evidence-demo"
ORGANIZATIONS = ("harbor-housing", "northgate-housing")
PROGRAMS = ("family-units", "senior-units")
# Each tenant's contracts cycle through the defects from these offsets (lease_contracts.DEFECTS): none,
# text_only, missing_landlord, term_too_long, missing_clause (two approved, three rejected with their reasons)
CONTRACT_DEFECTS = (0, 1, 3, 9, 12)
AGREEMENT = "district-agreement.pdf"
SPLIT_KEY = "demo-split-agreement"
ADDENDUM_REASON = "no end date: the addendum runs for as long as the provider holds student records"


@dataclass(frozen=True)
class DemoJob:
    tenant: str
    key: str  # the idempotency key
    job_id: str


def submit_demo_documents(rt: Runtime, actors: DemoActors, tenant: str, index: int, period: str) -> list[DemoJob]:
    """Upload and submit the demo tenant ``index``'s documents, filed under ``period``; returns its jobs."""
    organization = organization_template(ORGANIZATIONS[index % 2])
    program = program_template(PROGRAMS[index // 2 % 2])
    vid = templates.version_id(
        templates.merge(templates.parse(organization, "organization"), templates.parse(program, "program"))
    )
    effective = utc_iso(timespec="seconds")
    templates.submit(
        actors.gate,
        actors.sign(OPERATOR, Action.TEMPLATE_SUBMIT, {"version_id": vid, "effective_at": effective}, tenant=tenant),
        organization,
        program,
    )
    templates.approve(actors.gate, actors.sign(APPROVER, Action.TEMPLATE_APPROVE, {"version_id": vid}, tenant=tenant))
    requests = [
        (f"demo-review-{n}", "contract-review", lease_contract(n).pdf, {})
        for n in (index * 14 + offset for offset in CONTRACT_DEFECTS)
    ] + [
        # an application with every kind of planted value; a lease, where the template finds nothing (no_matches)
        ("demo-redact-application", "redact", application(), {"active_content": "flag"}),
        ("demo-redact-lease", "redact", lease_contract(index * 14).pdf, {}),
        (
            SPLIT_KEY,
            "split",
            _signed_agreement(rt),
            {"parts": [{"name": part.name, "pages": part.pages} for part in district_agreements.PARTS]},
        ),
    ]
    return [
        _submit(
            rt,
            tenant,
            key,
            {"operation": operation, "options": options, "inputs": [_upload(rt, tenant, pdf).document_id]},
            period,
        )
        for key, operation, pdf, options in requests
    ]


def submit_part_reviews(rt: Runtime, jobs: list[DemoJob], period: str) -> list[DemoJob]:
    """After the splits have run: a contract review of each part of each tenant's agreement, under the district
    ruleset. A split that did not succeed gets none (its state and reason are the demo's report)."""
    reviews = []
    for tenant, parts in _agreement_parts(rt, jobs).items():
        for name, artifact_id in parts.items():
            reviews.append(
                _submit(
                    rt,
                    tenant,
                    f"demo-review-{name}",
                    {
                        "operation": "contract-review",
                        "inputs": [artifact_id],
                        "options": {"ruleset": district_agreements.RULESET},
                    },
                    period,
                )
            )
    return reviews


def merge_agreements(rt: Runtime, actors: DemoActors, jobs: list[DemoJob], period: str) -> list[DemoJob]:
    """After the reviews have run: the dev approver approves each part the ruleset rejected (the addendum), by a
    signed `part.decide` with its reason, unless an earlier demo did; then the four parts are merged. A tenant whose
    reviews have not all finished (a concurrent demo still works one) is left to the demo that works it."""
    merges = []
    for tenant, parts in _agreement_parts(rt, jobs).items():
        reviews = {artifact_id: rt.document_jobs.latest_review(tenant, artifact_id) for artifact_id in parts.values()}
        if None in reviews.values():
            continue
        for artifact_id, review in reviews.items():
            if review.state == "rejected" and not _approved(rt, tenant, artifact_id):
                decide_part(
                    actors.gate,
                    rt,
                    actors.sign(
                        APPROVER,
                        Action.PART_DECIDE,
                        {"artifact_id": artifact_id, "decision": "approved", "reason": ADDENDUM_REASON},
                        tenant=tenant,
                    ),
                )
        merges.append(
            _submit(rt, tenant, "demo-merge-agreement", {"operation": "merge", "inputs": list(parts.values())}, period)
        )
    return merges


def _approved(rt: Runtime, tenant: str, artifact_id: str) -> bool:
    try:
        approving_pin(rt, tenant, artifact_id)
    except EvidenceError as error:
        if error.code != ReasonCode.MERGE_INPUT_NOT_APPROVED:
            raise
        return False
    return True


def _agreement_parts(rt: Runtime, jobs: list[DemoJob]) -> dict[str, dict[str, str]]:
    """Each tenant whose agreement split succeeded -> its parts' artifact ids by name, in the agreement's order."""
    found = {}
    for demo_job in jobs:
        job = rt.document_jobs.job(demo_job.tenant, demo_job.job_id)
        if demo_job.key != SPLIT_KEY or job.state != "succeeded":
            continue
        keys = [artifact["key"] for artifact in job.outputs["artifacts"]]
        found[demo_job.tenant] = {
            part.name: next(key for key in keys if key.endswith(f"/{part.name}.pdf"))
            for part in district_agreements.PARTS
        }
    return found


def _submit(rt: Runtime, tenant: str, key: str, body: dict, period: str) -> DemoJob:
    job, _ = submit_job(rt, tenant, idempotency_key=key, body=body, actor=ACTOR, clock=Clock(None, period))
    return DemoJob(tenant, key, job.job_id)


def _signed_agreement(rt: Runtime) -> bytes:
    """Signed once per home and kept: a signature carries its signing time, so signing again would make another
    upload under the same idempotency key (concurrent demos converge on whichever copy was stored first)."""
    folder = rt.settings.home / "demo-district"
    kept = LocalStore(folder / "agreement", scheme="demo", file_mode=0o400)
    if not kept.exists(AGREEMENT):
        signed = district_agreements.sign(
            district_agreements.district_agreement(), load_keyring(folder / "keys", generate=True)
        )
        try:
            kept.put_once(AGREEMENT, signed)
        except EvidenceError as error:
            if error.code != ReasonCode.STORE_CONFLICT:
                raise
    return kept.get(AGREEMENT)


def _upload(rt: Runtime, tenant: str, pdf: bytes) -> Document:
    """What `POST /v1/documents` stores: the bytes in a spool of the document store, then put once and admitted."""
    with rt.document_store.spool(rt.settings.work_dir) as spool:
        spool.write(pdf)
        spool.flush()
        row, _ = store_document(
            rt,
            tenant,
            spool=spool,
            sha256=sha256_hex(pdf),
            size=len(pdf),
            media_type=PDF,
            actor=ACTOR,
            clock=Clock(None),
        )
    return row
