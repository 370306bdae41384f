"""A redaction template names the OCR languages its documents are in: both passes read with exactly those (English
when it names none), a page in another script is refused in English and redacted in its own language, and a
language the engine has no data for is refused with its code, at submission and on a worker (issue 46)."""

from __future__ import annotations

import dataclasses
import io
import json

import pikepdf
import pytest
from PIL import Image, ImageDraw, ImageFont

from evidence_pipeline.documents import ocr, redact, templates
from evidence_pipeline.documents.matching import Rules, Search, flat
from evidence_pipeline.documents.redaction_check import verify_derivative
from evidence_pipeline.errors import EvidenceError, ReasonCode
from evidence_pipeline_tests.support import real_corpus, redaction_corpus
from evidence_pipeline_tests.support.redaction import pdftotext, redact_pure

# Debian's fonts-dejavu-core (make test installs it): a font with Cyrillic glyphs, for a scan of a Russian page
CYRILLIC_FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"
PASSPORT = "4510 123456"
LINES = (
    "Заявление на аренду квартиры",
    "Фамилия: Иванова Мария Сергеевна",
    f"Паспорт: {PASSPORT}",
    "Адрес: Москва, улица Ленина, дом 12",
    "Подпись заявителя при въезде",
)
ORGANIZATION = json.dumps({"kind": "organization", "name": "o", "rules": []}).encode()


def _program(languages: list[str] | None = None, **rule) -> bytes:
    rule = rule or {"pattern": r"Паспорт:\s*(?P<value>\d{4} \d{6})"}
    program = {"kind": "program", "name": "ru", "rules": [{"id": "passport", "label": "passport", **rule}]}
    return json.dumps(program | ({"languages": languages} if languages else {})).encode()


def _russian_scan() -> bytes:
    """A page that is one grey scan (150 dpi) of a typed Russian rental application: no text layer to read."""
    image = Image.new("L", (1275, 1650), 255)
    draw = ImageDraw.Draw(image)
    font = ImageFont.truetype(CYRILLIC_FONT, 30)
    for number, line in enumerate(LINES):
        draw.text((110, 140 + 60 * number), line, fill=0, font=font)
    pdf = pikepdf.new()
    pdf.add_blank_page(page_size=(612, 792))
    page = pdf.pages[0]
    page.obj.Resources = pikepdf.Dictionary(XObject=pikepdf.Dictionary(Scan=redaction_corpus.image_xobject(pdf, image)))
    page.obj.Contents = pdf.make_stream(b"q 612 0 0 792 0 0 cm /Scan Do Q")
    out = io.BytesIO()
    pdf.save(out)
    return out.getvalue()


def _digits_shown(data: bytes, languages: tuple[str, ...]) -> str:
    with ocr.reading_in(languages):
        return "".join(
            character
            for _, image in ocr.rendered_pages(data)
            for character in ocr.read_page(image).lines
            if character.isdigit()
        )


def test_a_page_in_another_script_is_refused_in_english_and_redacted_in_its_language():
    scan = _russian_scan()
    with pytest.raises(EvidenceError) as english:
        redact_pure(scan, _program(), ORGANIZATION)
    assert english.value.code == ReasonCode.REDACTION_UNSUPPORTED_CONTENT  # doubted words: refused, never passed
    assert "1234" in _digits_shown(scan, ("rus",))  # the value is on the page, for a reader of Russian

    result = redact_pure(scan, _program(["rus"]), ORGANIZATION)
    assert result.summary["outcome"] == "redacted" and result.summary["removed"]["passport"] == 1
    assert list(result.summary["ocr"]["languages"]) == ["rus"]  # the data it read with, by digest
    derivative = result.artifacts[result.secret["derivative"]]
    written = {result.secret["derivative"]: io.BytesIO(derivative)}
    assert verify_derivative(written, result)["passed"]
    assert "123456" not in _digits_shown(derivative, ("rus",))
    # the second pass reads with the languages the job pinned: read in English, the same derivative is refused
    english_check = dataclasses.replace(result, secret=result.secret | {"languages": ocr.LANGUAGES})
    with pytest.raises(EvidenceError) as refused:
        verify_derivative(written, english_check)
    assert refused.value.code == ReasonCode.REDACTION_UNSUPPORTED_CONTENT


@pytest.mark.parametrize("name", ["klingon", "osd", "../eng", "ENG", "eng+rus", ""])
def test_a_language_the_engine_has_no_data_for_is_refused_with_its_code(name):
    with pytest.raises(EvidenceError) as refused:
        templates.parse(_program(["eng", name]), "program")
    assert refused.value.code == ReasonCode.OCR_LANGUAGE_UNAVAILABLE
    assert "installed: " in refused.value.message and "/" not in refused.value.message.split("installed")[0]


@pytest.mark.parametrize("languages", ["eng", [], ["eng", "eng"], [7], ["eng"] * 9, {"eng": 1}])
def test_languages_that_are_not_a_list_of_names_break_the_format(languages):
    program = {**json.loads(_program()), "languages": languages}
    with pytest.raises(EvidenceError) as refused:
        templates.parse(json.dumps(program).encode(), "program")
    assert refused.value.code == ReasonCode.TEMPLATE_INVALID


def _merged(program: bytes, organization: bytes = ORGANIZATION) -> dict:
    return templates.merge(templates.parse(organization, "organization"), templates.parse(program, "program"))


def test_the_languages_are_part_of_the_version_and_english_by_default():
    plain = _merged(_program())
    assert "languages" not in plain and templates.languages(plain) == ("eng",)
    # naming the default is the same rules: the same version (templates made before languages keep theirs)
    assert templates.version_id(_merged(_program(["eng"]))) == templates.version_id(plain)
    russian = _merged(_program(["eng", "rus"]))
    assert templates.languages(russian) == ("eng", "rus") and templates.version_id(russian) != templates.version_id(
        plain
    )
    # the program's languages replace the organization's; an organization's apply when the program names none
    organization = json.dumps({"kind": "organization", "name": "o", "rules": [], "languages": ["deu"]}).encode()
    assert templates.languages(_merged(_program(["fra"]), organization)) == ("fra",)
    assert templates.languages(_merged(_program(), organization)) == ("deu",)


def test_a_worker_without_the_pinned_languages_data_refuses_the_job():
    """A version approved where the data was installed, run where it is not: refused with the code, not read in
    English instead (and not a traceback from the engine)."""
    merged = _merged(_program(["eng"])) | {"languages": ["eng", "tlh"]}
    pinned = {"template": merged, "template_version": templates.version_id(merged)}
    with pytest.raises(EvidenceError) as refused:
        redact.run([], pinned, True)
    assert refused.value.code == ReasonCode.OCR_LANGUAGE_UNAVAILABLE


def test_words_of_a_script_written_without_spaces_are_one_run_of_text():
    """The engine reads Chinese and Japanese as words a character or a few long, often set a third of their height
    apart: a rule naming a run of them must match it as a reader reads it; Latin words so far apart stay apart."""

    def line(*texts: str) -> ocr.Reading:
        return ocr.Reading(
            tuple(ocr.Word(t, (100 * i, 0, 100 * i + 60, 60), 90.0, 0) for i, t in enumerate(texts)), True
        )

    assert "收入和财产发生变化" in line("收入", "和", "财产", "发生变", "化").views
    assert "申込書の記入" in line("申込書", "の", "記入").views
    assert all("applicant" not in view for view in line("appli", "cant").views)


def test_a_run_of_japanese_read_across_a_gap_or_a_lines_end_is_one_run_of_text():
    """Japanese and Chinese are written without spaces and wrap anywhere: a reader reads a name set with a gap
    between its parts, or a column of vertical text into the next, as one run. Latin words stay apart."""
    search = Search(Rules.of({"rules": [{"label": "name", "pattern": "山田太郎"}]}), [])
    assert search.holds("氏名 山田 太郎") and search.holds("氏名 山田\n太郎") and search.holds("山田\u3000太郎")
    assert not Search(Rules.of({"rules": [{"label": "w", "pattern": "applicant"}]}), []).holds("appli cant")
    column = (ocr.Word("縦書き", (0, 0, 60, 60), 90.0, 0), ocr.Word("テスト", (0, 80, 60, 140), 90.0, 1))
    assert "縦書きテスト" in ocr.Reading(column, True).views  # two lines the engine read, one run


def test_vertical_japanese_whose_columns_a_reader_reads_as_the_value_is_not_published_with_it():
    """pyHanko's ja-vert-stamps.pdf (real-world corpus): stamps of vertical Japanese, embedded fonts. pdftotext
    reads the columns 縦書きテスト and テスト as 縦書きテストテスト, pdfium side by side with a gap between them.
    Before, neither pass read the rule's match across the gap, and the job was published with the value in its text
    layer (the corpus bench, run in Japanese: leaked:pdftotext). Now the second pass reads a script written without
    spaces on across a gap: whatever the first pass leaves, nothing holding the value is published."""
    paths = real_corpus.fetch()
    [path] = [path for key, path in paths.items() if key.endswith("/ja-vert-stamps.pdf")]
    data = real_corpus.first_page(path.read_bytes())
    value = "縦書きテストテスト"
    program = _program(["jpn"], pattern=value)
    try:
        result = redact_pure(data, program, ORGANIZATION)
        derivative = result.artifacts[result.secret["derivative"]]
        verify_derivative({result.secret["derivative"]: io.BytesIO(derivative)}, result)
    except EvidenceError as refused:
        assert refused.code == ReasonCode.REDACTION_VERIFICATION_FAILED and "pdfium_reading_order" in str(refused)
    else:
        assert value not in flat(pdftotext(derivative)), "published with the value in its text layer"


def test_a_string_holding_a_japanese_name_set_with_a_gap_is_found_by_the_rule_that_names_it():
    """Both passes read a string through one function (matching.text_views). Before, the first pass's finding
    walk read strings without reading Japanese on across a gap, while the search that removes read it so: the
    document's subject was removed, but the job did not count the name its rule matched there."""

    def subject(pdf, page):
        pdf.docinfo["/Subject"] = "申込者 山田 太郎"

    rule = json.dumps({"kind": "program", "name": "p", "rules": [{"id": "n", "label": "name", "pattern": "山田太郎"}]})
    result = redact_pure(redaction_corpus.build(subject), rule.encode(), ORGANIZATION)
    assert result.summary["removed"] == {"metadata": 1, "name": 1}
    derivative = result.artifacts[result.secret["derivative"]]
    assert verify_derivative({result.secret["derivative"]: io.BytesIO(derivative)}, result)["passed"]
