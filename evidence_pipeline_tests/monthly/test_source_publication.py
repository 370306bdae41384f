"""One publication path for source data: concurrent publications of one tenant-month get distinct sequences or
converge on one revision (never a conflict for a valid file), each revision has exactly one `source.published`
event, and a file that breaks the format is refused whole with its per-row report, storing nothing."""

from __future__ import annotations

import multiprocessing
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline.models import EventType, TenantMonth
from evidence_pipeline.monthly import publication, source_format, sources
from evidence_pipeline.synthetic.demo_data import demo_transactions

RACED = TenantMonth("acme-books", "2026-07")  # no fixture publishes this month
RACERS = 6


def _variant(index: int):
    """The demo month with one amount changed: a valid file of other bytes for each racer."""
    frame = demo_transactions(RACED)
    frame.loc[0, "amount_minor"] = 100 + index
    return frame


def _race(work, count: int) -> list:
    barrier = threading.Barrier(count)

    def run(index: int):
        barrier.wait()  # every racer lists the tenant-month's revisions at the same moment
        return work(index)

    with ThreadPoolExecutor(count) as pool:
        return list(pool.map(run, range(count)))


def test_concurrent_publications_of_different_bytes_get_distinct_sequences(runtime):
    revisions = _race(lambda index: _publish(runtime, index, f"run-{index}").revision, RACERS)
    assert sorted(revision.sequence for revision in revisions) == list(range(1, RACERS + 1))
    assert len({revision.sha256 for revision in revisions}) == RACERS
    assert sources.pin_latest(runtime.sources, RACED) == max(revisions, key=lambda revision: revision.sequence)
    for revision in revisions:
        assert sources.read_revision(runtime.sources, revision)["amount_minor"].iloc[0] >= 100


def test_concurrent_publications_of_the_same_bytes_converge_on_one_revision(runtime):
    revisions = _race(lambda index: _publish(runtime, 0, f"run-{index}").revision, RACERS)
    assert len(set(revisions)) == 1 and revisions[0].sequence == 1
    assert [key for key in runtime.sources.list(f"{RACED.tenant}/{RACED.period}") if key.endswith(".csv")] == [
        revisions[0].key
    ]


def test_bytes_claimed_below_another_claim_in_flight_complete_their_claim(runtime):
    """The interleaving behind a flaky race: these bytes are claimed as 3 but not yet stored, and other bytes are
    claimed as 4 above them. The same bytes published again complete 3; before, they took 5 too, so one file held
    two sequences and its event named whichever recorded first (a gap: 1, 2, 4)."""
    for index in (0, 1):
        _publish(runtime, index, "setup")
    same, other = (publication.prepare_frame(RACED, _variant(index)) for index in (2, 3))
    prefix = f"{RACED.tenant}/{RACED.period}"
    runtime.sources.put_once(f"{prefix}/000003.claim", same.sha256.encode())
    runtime.sources.put_once(f"{prefix}/000004.claim", other.sha256.encode())
    assert _publish(runtime, 2, "again").revision.sequence == 3
    assert _publish(runtime, 3, "the other").revision.sequence == 4
    assert _publish(runtime, 4, "next").revision.sequence == 5


def test_a_stale_claim_below_a_published_revision_is_not_reused(runtime):
    """A publication that stopped between its claim and its revision, long ago: the same bytes published again
    are the latest revision, not an older sequence."""
    stale = publication.prepare_frame(RACED, _variant(0))
    prefix = f"{RACED.tenant}/{RACED.period}"
    runtime.sources.put_once(f"{prefix}/000001.claim", stale.sha256.encode())
    _publish(runtime, 1, "later")
    assert _publish(runtime, 0, "retry").revision.sequence == 3
    assert sources.pin_latest(runtime.sources, RACED).sequence == 3


def _publish_in_a_process(environment: dict, index: int, barrier, results) -> None:
    from evidence_pipeline.config import Settings
    from evidence_pipeline.runtime import runtime_for

    runtime = runtime_for(Settings.from_env(environment))
    prepared = publication.prepare_frame(RACED, _variant(index))
    barrier.wait()
    results.put(
        publication.publish(runtime, prepared, publication.Publisher("racer", f"process-{index}")).revision.sequence
    )


def test_processes_racing_on_one_tenant_month_get_distinct_sequences(runtime):
    spawn = multiprocessing.get_context("spawn")
    barrier, results = spawn.Barrier(3), spawn.Queue()
    environment = {name: value for name, value in os.environ.items() if name.startswith(("EVIDENCE_", "AWS_"))}
    processes = [
        spawn.Process(target=_publish_in_a_process, args=(environment, index, barrier, results)) for index in range(3)
    ]
    for process in processes:
        process.start()
    sequences = sorted(results.get(timeout=120) for _ in processes)
    for process in processes:
        process.join()
    assert sequences == [1, 2, 3]
    assert sources.pin_latest(runtime.sources, RACED).sequence == 3


def _publish(runtime, index: int, correlation_id: str) -> publication.Publication:
    prepared = publication.prepare_frame(RACED, _variant(index))
    return publication.publish(runtime, prepared, publication.Publisher("test-operator", correlation_id))


def test_each_published_revision_has_one_event_with_its_sequence_digest_bytes_and_rows(runtime):
    published = _race(lambda index: _publish(runtime, index % 3, f"run-{index}"), RACERS)  # 3 files, twice each
    assert sorted(p.revision.sequence for p in published if p.created) == [1, 2, 3]
    events = [
        e
        for e in runtime.ledger.events_of_type(EventType.SOURCE_PUBLISHED, RACED.tenant)
        if e["period"] == RACED.period
    ]
    assert len(events) == 3
    for p in published:
        (event,) = [e for e in events if e["subject_sha256"] == p.revision.sha256]
        assert p.event == event and event["actor"] == "test-operator"
        assert {k: event["details"][k] for k in ("sequence", "bytes", "rows")} == {
            "sequence": p.revision.sequence,
            "bytes": p.revision.size,
            "rows": p.rows,
        }
        assert event["details"]["correlation_id"].startswith("run-")
    assert runtime.ledger.verify_chain() > 0


BAD_FILE = (
    "txn_id,booked_on,kind,currency,amount_minor,channel\n"
    "T1,2026-07-01,order,EUR,100,web\n"
    "T2,2026-07-32,order,EUR,100,web\n"  # line 3: not a date
    "T3,2026-08-01,refund,EUR,100,web\n"  # line 4: another month
    "T1,2026-07-02,fee,XXX,,app\n"  # line 5: duplicate id, bad currency, empty amount
    "T5,2026-07-02,fee,EUR,100\n"  # line 6: five fields
    "\n"
    "T7,2026-07-03,payout,EUR,0012,kiosk\n"  # line 8: leading zero, unknown channel
)


def test_a_file_that_breaks_the_format_is_refused_whole_with_each_problem_and_publishes_nothing(runtime):
    with pytest.raises(source_format.SourceRejected) as rejected:
        publication.prepare(RACED, BAD_FILE.encode())
    assert rejected.value.code == ReasonCode.SOURCE_INVALID
    assert rejected.value.report() == {
        "problems_total": 8,
        "problems": [
            {"line": 3, "column": "booked_on", "code": ReasonCode.SOURCE_VALUE_INVALID},
            {"line": 4, "column": "booked_on", "code": ReasonCode.SOURCE_DATE_OUTSIDE_PERIOD},
            {"line": 5, "column": "txn_id", "code": ReasonCode.SOURCE_TXN_ID_DUPLICATE},
            {"line": 5, "column": "currency", "code": ReasonCode.SOURCE_VALUE_INVALID},
            {"line": 5, "column": "amount_minor", "code": ReasonCode.SOURCE_VALUE_MISSING},
            {"line": 6, "column": "", "code": ReasonCode.SOURCE_ROW_FIELDS},
            {"line": 8, "column": "amount_minor", "code": ReasonCode.SOURCE_VALUE_INVALID},
            {"line": 8, "column": "channel", "code": ReasonCode.SOURCE_VALUE_INVALID},
        ],
    }
    assert "kiosk" not in rejected.value.message and "XXX" not in rejected.value.message
    assert runtime.sources.list(f"{RACED.tenant}/{RACED.period}") == []


def test_a_report_lists_the_first_hundred_problems_and_counts_them_all():
    rows = "".join(f"T{i},2026-07-01,order,EUR,-{i},web\n" for i in range(250))
    with pytest.raises(source_format.SourceRejected) as rejected:
        publication.prepare(RACED, ("\ufefftxn_id,booked_on,kind,currency,amount_minor,channel\n" + rows).encode())
    report = rejected.value.report()
    assert report["problems_total"] == 250 and len(report["problems"]) == source_format.MAX_REPORTED
    assert [problem["line"] for problem in report["problems"]] == list(range(2, 102))


@pytest.mark.parametrize(
    ("data", "code", "line"),
    [
        (b"txn_id,booked_on,kind\nT1,2026-07-01,order\n", ReasonCode.SOURCE_COLUMN_MISSING, 1),
        (b"txn_id,booked_on,kind,currency,amount_minor,channel,note\n", ReasonCode.SOURCE_COLUMN_UNKNOWN, 1),
        (b"txn_id,booked_on,kind,currency,amount_minor,channel\n", ReasonCode.SOURCE_NO_ROWS, 1),
        (b"", ReasonCode.SOURCE_NO_ROWS, 1),
        (b"txn_id,booked_on,kind,currency,amount_minor,channel\nT1,\xff\n", ReasonCode.SOURCE_ENCODING_INVALID, 2),
        (b'txn_id,booked_on,kind,currency,amount_minor,channel\nT1,"2026\n', ReasonCode.SOURCE_NOT_CSV, 2),
    ],
)
def test_a_file_that_is_not_the_format_at_all_names_its_line_and_code(data, code, line):
    with pytest.raises(source_format.SourceRejected) as rejected:
        publication.prepare(RACED, data)
    assert rejected.value.problems[0].code == code and rejected.value.problems[0].line == line


def test_the_same_rows_in_another_order_and_layout_are_the_same_revision(runtime):
    frame = _variant(0)
    shuffled = frame.sample(frac=1, random_state=3)[list(reversed(source_format.COLUMNS))]
    first = publication.prepare(RACED, frame.to_csv(index=False).encode())
    second = publication.prepare(RACED, shuffled.to_csv(index=False, lineterminator="\r\n").encode())
    assert first == second


def test_an_offboarded_tenant_publishes_nothing(runtime):
    runtime.ledger.record(RACED, EventType.TENANT_OFFBOARDED, "0" * 64, "test", reason="test")
    with pytest.raises(EvidenceError) as refused:
        _publish(runtime, 0, "offboarded")
    assert refused.value.code == ReasonCode.TENANT_OFFBOARDED
    assert runtime.sources.list(f"{RACED.tenant}/{RACED.period}") == []
