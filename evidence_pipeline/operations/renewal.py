"""Renewal of B-LTA bundles' document time stamps (`evidence timestamps renew`).

A B-LTA report validates long-term for as long as the certificate of the TSA that made its newest document time
stamp is valid. Before then, a new document time stamp over the report and over the old stamp's validation material
(its TSA chain and the current revocation information, added to the DSS) carries that to the new TSA certificate's
expiry (ETSI EN 319 142-1 archive time stamps). The renewed report is a new object beside the old one
(monthly/bundle.py, RENEWALS): the published `report.pdf`, its statement and its manifest stay as published, and each
renewal begins with the exact bytes of the file before it. The ledger records each renewal
(`bundle.timestamp_renewed`) after the renewal is stored; a run that finds a stored renewal without its event records
it first, so a crash between the two converges on the next run.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from evidence_pipeline.audit.verify import SIGNATURE_ALLOWANCE, trust_root
from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.models import EventType, TenantMonth
from evidence_pipeline.monthly.bundle import bundle_prefix, newest_report, renewal_key
from evidence_pipeline.runtime import Runtime
from evidence_pipeline.signing.pades import (
    extends_with_timestamp,
    newest_document_timestamp,
    renew_document_timestamp,
    verify_pdf_signature,
)
from evidence_pipeline.store import sha256_hex

# The default horizon: a year leaves room for a TSA outage or a certificate rotation before anything expires.
DEFAULT_HORIZON = timedelta(days=365)
RENEWED, CURRENT, FAILED = "renewed", "current", "failed"


@dataclass(frozen=True)
class Renewal:
    """What a run did to one bundle: renewed it, left it (its newest time stamp's TSA certificate outlives the
    date), or failed with a reason code (nothing was stored)."""

    bundle: str
    outcome: str
    renewal: int  # the number of the bundle's newest renewal afterwards (0: the report as published)
    tsa_not_after: datetime | None  # when its newest document time stamp's TSA certificate expires
    code: str | None = None
    message: str = ""

    def as_dict(self) -> dict:
        return {
            "bundle": self.bundle,
            "outcome": self.outcome,
            "renewal": self.renewal,
            "code": self.code,
            "tsa_not_after": self.tsa_not_after.isoformat() if self.tsa_not_after else None,
            "message": self.message,
        }


def renew_timestamps(runtime: Runtime, before: datetime, actor: str, tenant: str | None = None) -> list[Renewal]:
    """Renew every published B-LTA bundle (of ``tenant``, when given) whose newest document time stamp's TSA
    certificate expires before ``before``. A bundle that cannot be renewed now is reported with its reason code, and
    the others still are."""
    tsa_url = runtime.settings.tsa_url
    if not tsa_url:
        raise EvidenceError(
            ReasonCode.CONFIG_INVALID, "renewing time stamps needs a time stamp authority: set EVIDENCE_TSA_URL"
        )
    results = []
    for body in runtime.ledger.events_of_type(EventType.BUNDLE_PUBLISHED, tenant):
        details = body["details"]
        if details.get("pades_level") != "B-LTA":
            continue  # below B-LTA there is no document time stamp to renew
        prefix = bundle_prefix(TenantMonth(details["tenant"], details["period"]), details["identity"])
        try:
            results.append(_renew(runtime, prefix, details=details, before=before, tsa_url=tsa_url, actor=actor))
        except EvidenceError as error:
            results.append(
                Renewal(prefix, FAILED, newest_report(runtime.archive, prefix)[1], None, error.code, error.message)
            )
    return results


def _renew(rt: Runtime, prefix: str, *, details: dict, before: datetime, tsa_url: str, actor: str) -> Renewal:
    number, previous, current = _newest(rt, prefix, details)
    if number and not rt.ledger.events_about(EventType.BUNDLE_TIMESTAMP_RENEWED, sha256_hex(current)):
        _record(
            rt, prefix, details=details, number=number, previous=previous, renewed=current, actor=actor
        )  # stored by a run that stopped before this
    stamp = newest_document_timestamp(current)
    if stamp.tsa_not_after >= before:
        return Renewal(prefix, CURRENT, number, stamp.tsa_not_after)
    root = trust_root(rt.archive, str(details["trust_root_id"]), frozenset())
    tsa_root = trust_root(rt.archive, str(details["tsa_root_id"]), frozenset())
    renewed = renew_document_timestamp(current, root, tsa_root, tsa_url)
    renewed_stamp = newest_document_timestamp(renewed)
    if renewed_stamp.tsa_not_after <= stamp.tsa_not_after:
        raise EvidenceError(
            ReasonCode.RENEWAL_FUTILE,
            "the time stamp authority's certificate expires "
            f"{renewed_stamp.tsa_not_after.date()}, no later than the one it would renew",
        )
    # Judged as `evidence verify` will judge it, before anything is stored.
    verify_pdf_signature(renewed, root, level="B-LTA", tsa_root_pem=tsa_root)
    rt.archive.put_once(renewal_key(prefix, number + 1), renewed)
    _record(rt, prefix, details=details, number=number + 1, previous=current, renewed=renewed, actor=actor)
    return Renewal(prefix, RENEWED, number + 1, renewed_stamp.tsa_not_after)


def _newest(rt: Runtime, prefix: str, details: dict) -> tuple[int, bytes | None, bytes]:
    """(the newest renewal's number, the file before it, the newest file): `report.pdf` as published (its digest
    the one its `bundle.published` event committed) or its newest renewal, which must begin with it."""
    report = rt.archive.get(renewal_key(prefix, 0), expected_sha256=details["report_sha256"])
    key, number = newest_report(rt.archive, prefix)
    if not number:
        return 0, None, report
    limit = len(report) + number * SIGNATURE_ALLOWANCE
    current = rt.archive.get(key, max_bytes=limit)
    previous = rt.archive.get(renewal_key(prefix, number - 1), max_bytes=limit) if number > 1 else report
    if not (extends_with_timestamp(current, previous) and previous.startswith(report)):
        raise EvidenceError(
            ReasonCode.RENEWAL_INVALID,
            f"renewal {number} does not extend the file it renews "
            "and the published report with a new document time stamp",
        )
    return number, previous, current


def _record(
    rt: Runtime, prefix: str, *, details: dict, number: int, previous: bytes, renewed: bytes, actor: str
) -> None:
    stamp, before = newest_document_timestamp(renewed), newest_document_timestamp(previous)
    rt.ledger.record(
        TenantMonth(details["tenant"], details["period"]),
        EventType.BUNDLE_TIMESTAMP_RENEWED,
        sha256_hex(renewed),
        actor,
        identity=details["identity"],
        renewal=number,
        previous={
            "key": renewal_key(prefix, number - 1),
            "sha256": sha256_hex(previous),
            "size": len(previous),
            "tsa_not_after": before.tsa_not_after.isoformat(),
        },
        renewed={
            "key": renewal_key(prefix, number),
            "sha256": sha256_hex(renewed),
            "size": len(renewed),
            "tsa_not_after": stamp.tsa_not_after.isoformat(),
        },
        stamped_at=stamp.stamped.isoformat(),
    )
