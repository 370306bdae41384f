"""Results out: what a tenant's client downloads, read-only, from committed state only.

A job's outputs are the artifacts its commit recorded (the job row's outputs are written in the transaction of its
`document.published` event), so nothing of a job that has not committed is listed or served; a tenant-month's
evidence is its current publication (the head of its corrections chain), whose manifest is rebuilt from the
committed `bundle.published` event, byte for byte the one in the archive. Another tenant's job or month answers
404 as if it did not exist. Bytes are streamed from the archive a chunk at a time and checked against the digest
the commit recorded as they go (store.verified_chunks); on S3, ``EVIDENCE_DOWNLOAD_PRESIGN_SECONDS`` answers an
output with 303 See Other to a presigned URL instead.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from evidence_pipeline.audit.bundle_proof import bundle_log_files
from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.ledger.document_jobs import EVIDENCE
from evidence_pipeline.ledger.rows import DocumentJob, PublicationRecord
from evidence_pipeline.models import TenantMonth, validate_period
from evidence_pipeline.monthly.bundle import MANIFEST, REPORT, STATEMENT, build_manifest
from evidence_pipeline.monthly.bundle_file import BundleFile, Member
from evidence_pipeline.runtime import Runtime
from evidence_pipeline.signed_note import parse_vkey
from evidence_pipeline.signing.keys import MAX_KEY_BYTES
from evidence_pipeline.store import sha256_hex, verified_chunks
from evidence_pipeline.store.s3 import S3Store

BUNDLE_MEDIA_TYPE = "application/x-tar"
# by how an output's name ends; the first that matches
MEDIA_TYPES = ((".pdf", "application/pdf"), (".json", "application/json"), (".xml", "application/xml"))
OCTET_STREAM = "application/octet-stream"
KEYS = "keys"


def media_type(name: str) -> str:
    return next((media for suffix, media in MEDIA_TYPES if name.endswith(suffix)), OCTET_STREAM)


def _committed_job(rt: Runtime, tenant: str, job_id: str) -> DocumentJob:
    job = rt.document_jobs.job(tenant, job_id)
    if job is None:
        raise EvidenceError(ReasonCode.JOB_NOT_FOUND, "no such job")
    return job


def _artifacts(job: DocumentJob) -> list[dict]:
    """The artifacts the job's commit recorded; none before it committed (or for an evidence job, whose bundle is
    the tenant-month's evidence)."""
    return (job.outputs or {}).get("artifacts", []) if job.operation != EVIDENCE else []


def outputs_view(rt: Runtime, tenant: str, job_id: str) -> dict:
    job = _committed_job(rt, tenant, job_id)
    return {
        "job_id": job_id,
        "state": job.state,
        "committed": job.outputs is not None,
        "outputs": [
            {
                "name": a["name"],
                "artifact_id": a["key"],
                "sha256": a["sha256"],
                "bytes": a["bytes"],
                "media_type": media_type(a["name"]),
                "url": f"/v1/jobs/{job_id}/outputs/{a['name']}",
            }
            for a in _artifacts(job)
        ],
    }


def committed_output(rt: Runtime, tenant: str, job_id: str, name: str) -> dict:
    """The artifact named ``name`` of ``tenant``'s committed job (OUTPUT_NOT_FOUND otherwise); the name is looked
    up among what the commit recorded, never made into a key."""
    job = _committed_job(rt, tenant, job_id)
    found = next((a for a in _artifacts(job) if a["name"] == name), None)
    if found is None:
        raise EvidenceError(ReasonCode.OUTPUT_NOT_FOUND, "the job has no committed output of that name")
    return found


def opened(rt: Runtime, artifact: dict) -> Iterator[bytes]:
    """The artifact's verified stream, its first chunk read here: a store that cannot open it answers with its
    own error before a status line is sent."""
    stream = verified_chunks(rt.archive, artifact["key"], artifact["sha256"], artifact["bytes"])
    first = next(stream, b"")
    return _prepend(first, stream)


def _prepend(first: bytes, rest: Iterator[bytes]) -> Iterator[bytes]:
    yield first
    yield from rest


# Reads for the bodies being sent, off the event loop, in a pool of their own. Not anyio's (run_in_threadpool): its
# capacity limiter, cancel scope and queue on every 1 MB chunk's hop cost the server 24.5–28 ms of CPU per 10 MB
# download against 18–23 ms with this pool (the floor server of bench/downloads.py: 14), and slow archive reads here
# cannot take the threads that other requests' token and job reads wait for.
READERS = ThreadPoolExecutor(max_workers=16, thread_name_prefix="download-read")


async def read_ahead(chunks: Iterator[bytes]) -> AsyncIterator[bytes]:
    """``chunks`` (blocking reads) as the response's body, the next chunk read and hashed in a READERS thread while
    the current one is sent: uvicorn waits for the socket to drain after each chunk, so without it the disk, the
    hash and the network would take turns (a third of the throughput, measured by bench/downloads.py)."""
    loop = asyncio.get_running_loop()

    def following() -> bytes | None:
        return next(chunks, None)

    def settle(done: asyncio.Future) -> None:
        if not done.cancelled():
            done.exception()  # retrieved: a stream the client left has nothing to report
        chunks.close()

    pending = loop.run_in_executor(READERS, following)
    try:
        while (chunk := await pending) is not None:
            pending = loop.run_in_executor(READERS, following)
            yield chunk
    finally:
        pending.add_done_callback(settle)  # the generator is closed once no thread is inside it


@dataclass(frozen=True)
class Evidence:
    """A tenant-month's current bundle, as its committed publication records it."""

    publication: PublicationRecord
    manifest: bytes
    chain: list[dict]  # the bundles it supersedes, the newest first: {identity, reason, published_at}
    file: BundleFile

    @property
    def etag(self) -> str:
        """Names the bundle file's bytes, which are a pure function of its members (their keys, digests, sizes and
        versions) and its date: not the file's sha256, which would need all of it read before the first byte."""
        layout = "".join(f"{m.key} {m.sha256} {m.size} {m.version_id or '-'}\n" for m in self.file.members)
        return sha256_hex(f"{self.file.mtime}\n{layout}".encode())

    def view(self) -> dict:
        manifest = json.loads(self.manifest)
        return {
            "tenant": manifest["tenant"],
            "period": manifest["period"],
            "identity": manifest["identity"],
            "published_at": manifest["ledger"]["published_at"],
            "manifest": manifest,
            "supersedes": self.chain,
            "bundle": {
                "url": f"/v1/evidence/{manifest['period']}/bundle",
                "bytes": self.file.size,
                "media_type": BUNDLE_MEDIA_TYPE,
                "etag": f'"{self.etag}"',
            },
        }


def current_evidence(rt: Runtime, tenant: str, period: str) -> Evidence:
    """``tenant``'s current bundle of ``period`` (EVIDENCE_NOT_FOUND when none is committed)."""
    publication = rt.ledger.current_publication(TenantMonth(tenant, validate_period(period)))
    if publication is None:
        raise EvidenceError(ReasonCode.EVIDENCE_NOT_FOUND, "the month has no published evidence bundle")
    event = rt.ledger.event(publication.event_seq)
    details, manifest = event.body["details"], build_manifest(event)
    prefix = publication.bundle_key
    members = [
        Member(
            f"{prefix}/{REPORT}", details["report_sha256"], details["report_size"], details.get("report_version_id")
        ),
        Member(
            f"{prefix}/{STATEMENT}",
            details["statement_sha256"],
            details["statement_size"],
            details.get("statement_version_id"),
        ),
        Member(f"{prefix}/{MANIFEST}", sha256_hex(manifest), len(manifest), data=manifest),
    ]
    for key in rt.archive.list(KEYS):  # public keys and keyring documents: small, read whole
        data = rt.archive.get(key, max_bytes=MAX_KEY_BYTES)
        members.append(Member(key, sha256_hex(data), len(data), data=data))
    witnesses = tuple(parse_vkey(vkey) for _, vkey in rt.settings.witnesses)
    for key, data in bundle_log_files(rt, event, prefix, witnesses).items():  # its tlog proof, once checkpointed
        members.append(Member(key, sha256_hex(data), len(data), data=data))
    published = int(datetime.fromisoformat(event.body["recorded_at"]).timestamp())
    return Evidence(publication, manifest, _chain(rt.ledger, details), BundleFile(tuple(members), published))


def _chain(ledger, details: dict) -> list[dict]:
    """The bundles the current one supersedes, back to the month's first: each with why its successor replaced it."""
    chain, link = [], details.get("supersedes")
    while link is not None:
        earlier = ledger.publication(link["identity"])
        body = ledger.event(earlier.event_seq).body
        chain.append({"identity": link["identity"], "reason": link["reason"], "published_at": body["recorded_at"]})
        link = body["details"].get("supersedes")
    return chain


def _entity_tag(sha256: str) -> str:
    return f'"{sha256}"'


def _unchanged(request: Request, tag: str) -> bool:
    """If-None-Match names ``tag`` (weakly compared, as RFC 9110 asks of If-None-Match) or is ``*``."""
    header = request.headers.get("if-none-match")
    if header is None:
        return False
    listed = {item.strip().removeprefix("W/") for item in header.split(",")}
    return "*" in listed or tag in listed


def _validators(tag: str) -> dict[str, str]:
    return {"ETag": tag, "Cache-Control": "private, no-cache"}


def routes(rt: Runtime, tenant_of, checked) -> list[Route]:
    """The download routes, over the app's bearer-token check (``tenant_of``) and its check of text from the
    client (``checked``: no NUL, no lone surrogate)."""
    settings = rt.settings
    archive = rt.archive
    presign = settings.download_presign_seconds if isinstance(archive, S3Store) else None

    async def list_outputs(request: Request) -> JSONResponse:
        tenant = await tenant_of(request)
        view = await run_in_threadpool(outputs_view, rt, tenant, checked(request.path_params["job_id"]))
        return JSONResponse(view)

    async def get_output(request: Request) -> Response:
        tenant = await tenant_of(request)
        artifact = await run_in_threadpool(
            committed_output, rt, tenant, checked(request.path_params["job_id"]), checked(request.path_params["name"])
        )
        tag = _entity_tag(artifact["sha256"])
        if _unchanged(request, tag):
            return Response(status_code=304, headers=_validators(tag))
        if presign is not None:
            url = await run_in_threadpool(archive.presigned_url, artifact["key"], presign, artifact["name"])
            return Response(status_code=303, headers={"Location": url, "Cache-Control": "no-store"})
        headers = _validators(tag) | {
            "Content-Length": str(artifact["bytes"]),
            "Repr-Digest": "sha-256=:" + base64.b64encode(bytes.fromhex(artifact["sha256"])).decode() + ":",
            "Content-Disposition": f'attachment; filename="{artifact["name"]}"',
            "X-Content-Type-Options": "nosniff",
        }
        if request.method == "HEAD":
            return Response(headers=headers, media_type=media_type(artifact["name"]))
        body = await run_in_threadpool(opened, rt, artifact)
        return StreamingResponse(read_ahead(body), headers=headers, media_type=media_type(artifact["name"]))

    async def get_evidence(request: Request) -> JSONResponse:
        tenant = await tenant_of(request)
        evidence = await run_in_threadpool(current_evidence, rt, tenant, checked(request.path_params["period"]))
        return JSONResponse(evidence.view(), headers={"Cache-Control": "private, no-cache"})

    async def get_bundle(request: Request) -> Response:
        tenant = await tenant_of(request)
        evidence = await run_in_threadpool(current_evidence, rt, tenant, checked(request.path_params["period"]))
        tag = _entity_tag(evidence.etag)
        if _unchanged(request, tag):
            return Response(status_code=304, headers=_validators(tag))
        name = f"evidence-{tenant}-{evidence.publication.period}-{evidence.publication.identity[:12]}.tar"
        headers = _validators(tag) | {
            "Content-Length": str(evidence.file.size),
            "Content-Disposition": f'attachment; filename="{name}"',
            "X-Content-Type-Options": "nosniff",
        }
        if request.method == "HEAD":
            return Response(headers=headers, media_type=BUNDLE_MEDIA_TYPE)
        body = read_ahead(evidence.file.stream(archive))
        return StreamingResponse(body, headers=headers, media_type=BUNDLE_MEDIA_TYPE)

    return [
        Route("/v1/jobs/{job_id}/outputs", list_outputs, methods=["GET"]),
        Route("/v1/jobs/{job_id}/outputs/{name}", get_output, methods=["GET"]),
        Route("/v1/evidence/{period}", get_evidence, methods=["GET"]),
        Route("/v1/evidence/{period}/bundle", get_bundle, methods=["GET"]),
    ]
