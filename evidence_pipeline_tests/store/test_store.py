import io
import os
import stat
from concurrent.futures import ThreadPoolExecutor

import pytest

from evidence_pipeline.errors import EvidenceError
from evidence_pipeline.store import sha256_hex
from evidence_pipeline.store.local import LocalStore


@pytest.fixture
def store(tmp_path):
    return LocalStore(tmp_path / "archive")


def test_put_once_is_idempotent_for_identical_bytes(store):
    first = store.put_once("bundles/a/b.pdf", b"data")
    second = store.put_once("bundles/a/b.pdf", b"data")
    assert first.created and not second.created and first.sha256 == second.sha256 == sha256_hex(b"data")
    assert stat.S_IMODE((store.root / "bundles/a/b.pdf").stat().st_mode) == 0o444
    assert store.get("bundles/a/b.pdf", expected_sha256=first.sha256) == b"data"
    assert store.list("bundles") == ["bundles/a/b.pdf"] and store.uri("bundles/a") == "archive://bundles/a"


def test_different_bytes_under_an_existing_key_conflict(store):
    store.put_once("k/x", b"one")
    with pytest.raises(EvidenceError) as error:
        store.put_once("k/x", b"two")
    assert error.value.code == "STORE_CONFLICT" and store.get("k/x") == b"one"


def test_racing_puts_have_exactly_one_winner(store):
    def put(i):
        try:
            return store.put_once("race/obj", str(i).encode()).created
        except EvidenceError as error:
            return error.code

    results = list(ThreadPoolExecutor(8).map(put, range(32)))
    assert results.count(True) == 1 and set(results) == {True, "STORE_CONFLICT"}
    assert [p.name for p in (store.root / "race").iterdir()] == ["obj"]  # no temp files left behind


def test_read_checks_digest_and_missing(store):
    store.put_once("k/x", b"one")
    with pytest.raises(EvidenceError) as error:
        store.get("k/x", expected_sha256=sha256_hex(b"two"))
    assert error.value.code == "STORE_DIGEST_MISMATCH"
    with pytest.raises(EvidenceError) as error:
        store.get("k/missing")
    assert error.value.code == "STORE_NOT_FOUND"


@pytest.mark.parametrize("key", ["../escape", "/abs", "a//b", "A/b", "a/b c", "a|b", "", "a/.."])
def test_keys_outside_the_alphabet_are_refused(store, key):
    with pytest.raises(EvidenceError) as error:
        store.put_once(key, b"x")
    assert error.value.code == "STORE_KEY_INVALID"


def test_streamed_put_and_get_on_both_backends(runtime, tmp_path):
    """put_file/get_file: put-once from a file, identical re-puts converge, reads are hashed while written."""
    store = runtime.archive
    data = bytes(range(256)) * 9000  # > CHUNK, so the copy takes several chunks
    source = tmp_path / "source.bin"
    source.write_bytes(data)
    with source.open("rb") as file:
        first = store.put_file("probe/big.bin", file)
    with source.open("rb") as file:
        again = store.put_file("probe/big.bin", file)
    assert first.created and not again.created and first.sha256 == again.sha256 == sha256_hex(data)
    assert (first.size, again.size) == (len(data), len(data))
    with (tmp_path / "copy.bin").open("w+b") as out:
        assert store.get_file("probe/big.bin", out, expected_sha256=first.sha256) == first.sha256
    assert (tmp_path / "copy.bin").read_bytes() == data == store.get("probe/big.bin")
    with pytest.raises(EvidenceError) as error:
        store.get_file("probe/big.bin", io.BytesIO(), expected_sha256=sha256_hex(b"other"))
    assert error.value.code == "STORE_DIGEST_MISMATCH"
    with pytest.raises(EvidenceError) as error:
        store.put_file("probe/big.bin", io.BytesIO(data[:-1] + b"\0"))
    assert error.value.code == "STORE_CONFLICT"
    with pytest.raises(EvidenceError) as error:
        store.get_file("probe/missing", io.BytesIO())
    assert error.value.code == "STORE_NOT_FOUND"


def test_a_spooled_put_stores_the_received_file_on_both_backends(runtime, tmp_path):
    """put_spooled: bytes received into a spool and hashed on the way are stored without a second hash; identical
    re-puts converge, other bytes under the key conflict, and a spool that is not stored leaves nothing."""
    store = runtime.archive
    data = bytes(range(256)) * 9000

    def spooled(payload: bytes):
        spool = store.spool(tmp_path / "work")
        spool.write(payload)
        return spool

    with spooled(data) as spool:
        first = store.put_spooled("probe/spooled.bin", spool, sha256_hex(data), len(data))
    with spooled(data) as spool:
        again = store.put_spooled("probe/spooled.bin", spool, sha256_hex(data), len(data))
    assert first.created and not again.created and first.sha256 == again.sha256 == sha256_hex(data)
    assert store.get("probe/spooled.bin", expected_sha256=sha256_hex(data)) == data
    other = data[:-1] + b"\0"
    with spooled(other) as spool, pytest.raises(EvidenceError) as error:
        store.put_spooled("probe/spooled.bin", spool, sha256_hex(other), len(other))
    assert error.value.code == "STORE_CONFLICT" and store.get("probe/spooled.bin") == data
    with spooled(b"never stored"):
        pass
    assert store.list("probe") == ["probe/spooled.bin"]


def test_a_local_spool_is_linked_into_place_with_the_stores_modes_and_refuses_symlinks(tmp_path):
    store = LocalStore(tmp_path / "documents", scheme="documents", file_mode=0o400)
    with store.spool(tmp_path / "work") as spool:
        spool.write(b"%PDF-1.7 body")
        assert list(store.root.iterdir()) == []  # nameless until stored
        stored = store.put_spooled("acme/abc", spool, sha256_hex(b"%PDF-1.7 body"), 13)
    assert stored.created and (store.root / "acme/abc").read_bytes() == b"%PDF-1.7 body"
    assert [p.relative_to(store.root).as_posix() for p in sorted(store.root.rglob("*"))] == ["acme", "acme/abc"]
    assert stat.S_IMODE((store.root / "acme/abc").stat().st_mode) == 0o400
    assert {stat.S_IMODE(p.stat().st_mode) for p in (store.root, store.root / "acme")} == {0o700}
    (tmp_path / "elsewhere").mkdir()
    (store.root / "evil").symlink_to(tmp_path / "elsewhere")
    with store.spool(tmp_path / "work") as spool, pytest.raises(EvidenceError) as error:
        spool.write(b"x")
        store.put_spooled("evil/abc", spool, sha256_hex(b"x"), 1)
    assert error.value.code == "STORE_SYMLINK_REFUSED" and list((tmp_path / "elsewhere").iterdir()) == []


@pytest.mark.parametrize(
    "errno_name, code, retryable",
    [
        ("ENOSPC", "STORE_FULL", True),
        ("EDQUOT", "STORE_FULL", True),
        ("EROFS", "STORE_READ_ONLY", False),
        ("EACCES", "STORE_ACCESS_DENIED", False),
        ("EPERM", "STORE_ACCESS_DENIED", False),
        ("EIO", "STORE_UNAVAILABLE", True),
    ],
)
def test_a_failed_write_is_classified_and_leaves_nothing_half_made(store, monkeypatch, errno_name, code, retryable):
    store.put_once("keys/k.pem", b"key")  # the archive root exists; the bundle's folders do not yet
    monkeypatch.setenv("EVIDENCE_IO_FAULT", f"archive_write:{errno_name}")  # the disk fails mid-write
    with pytest.raises(EvidenceError) as error:
        store.put_once("bundles/acme/2026-10/abc/report.pdf", b"x" * 100_000)
    assert (error.value.code, error.value.retryable) == (code, retryable)
    assert str(store.root) not in str(error.value)
    assert sorted(p.relative_to(store.root).as_posix() for p in store.root.rglob("*")) == ["keys", "keys/k.pem"]


def test_modes_do_not_depend_on_the_umask(tmp_path):
    """Under umask 000 nothing is created world-writable, and private state is owner-only."""
    from evidence_pipeline.ledger import Ledger

    home = tmp_path / "home"
    previous = os.umask(0)
    try:
        LocalStore(home / "archive").put_once("bundles/acme-books/2026-10/x/report.pdf", b"%PDF")
        LocalStore(home / "sources", file_mode=0o400).put_once("acme-books/2026-10/s.csv", b"a,b")
        Ledger(f"sqlite:///{home / 'ledger.sqlite'}").engine.dispose()
    finally:
        os.umask(previous)

    def mode(path):
        return stat.S_IMODE(path.stat().st_mode)

    assert mode(home) == 0o700
    assert {mode(p) for p in [home / "archive", *(home / "archive").rglob("*")] if p.is_dir()} == {0o755}
    assert {mode(p) for p in [home / "sources", *(home / "sources").rglob("*")] if p.is_dir()} == {0o700}
    assert mode(home / "archive/bundles/acme-books/2026-10/x/report.pdf") == 0o444
    assert {mode(p) for p in home.glob("ledger.sqlite*")} == {0o600}
