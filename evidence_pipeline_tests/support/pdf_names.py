"""Writes evidence_pipeline/documents/pdf_names.txt: every name the PDF specification defines as a key or a name
value, which the redaction's second pass treats as syntax (a name every PDF may hold says nothing of a document).

The source is the PDF Association's Arlington PDF model (github.com/pdf-association/arlington-pdf-model), whose
TSV files list every key of every PDF 2.0 object with its possible values; the few names the specification defines
in prose tables instead (standard structure types, marked-content tags, inline-image abbreviations, the standard 14
fonts) are listed below with their clause. Run with a checkout of the model and its commit:

    .venv/bin/python -m evidence_pipeline_tests.support.pdf_names ARLINGTON_CHECKOUT COMMIT
"""

from __future__ import annotations

import csv
import re
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parents[2] / "evidence_pipeline" / "documents" / "pdf_names.txt"
# A name in a PossibleValues cell: not a function (followed by "("), a key reference (@Key) or a number
_NAME = re.compile(r"(?<![\w@.:])([A-Za-z][\w.\-]*)(?![\w.(\-])")
PROSE = {
    # ISO 32000-2 14.8.4 (and 32000-1 14.8.4): standard structure types
    "Document DocumentFragment Part Art Sect Div BlockQuote Caption TOC TOCI Index NonStruct Private Aside Title "
    "FENote Sub P H H1 H2 H3 H4 H5 H6 L LI Lbl LBody Table TR TH TD THead TBody TFoot Span Quote Note Reference "
    "BibEntry Code Link Annot Ruby RB RT RP Warichu WT WP Figure Formula Form Em Strong Artifact",
    # 14.6 and 14.7.2 (marked-content tags), 14.9.4 (ReversedChars), 12.7.4.3 (Tx)
    "OC ReversedChars Tx Span Artifact ActualText Alt E Lang MCID Properties",
    # 8.9.7 Table 91-92: inline-image abbreviations
    "BPC CS D DP F H IM I W L AHx A85 LZW Fl RL CCF DCT G RGB CMYK",
    # 9.6.2.2: the standard 14 fonts
    "Times-Roman Times-Bold Times-Italic Times-BoldItalic Helvetica Helvetica-Bold Helvetica-Oblique "
    "Helvetica-BoldOblique Courier Courier-Bold Courier-Oblique Courier-BoldOblique Symbol ZapfDingbats",
    # 9.10.3 and Adobe TN 5014/5411: the keys of an embedded CMap's PostScript, and a ToUnicode CMap's usual name
    "CIDInit ProcSet CIDSystemInfo Registry Ordering Supplement CMapName CMapType CMapVersion WMode UIDOffset XUID "
    "Adobe-Identity-UCS Adobe-Identity-UCS2 Adobe UCS",
}


def names(tsv_dir: Path) -> set[str]:
    found = {name for line in PROSE for name in line.split()}
    for path in sorted(tsv_dir.glob("*.tsv")):
        with path.open(newline="") as file:
            for row in csv.DictReader(file, delimiter="\t"):
                key = row["Key"]
                if "*" not in key and not key.isdigit():
                    found.add(key)
                types, values = row["Type"].split(";"), _cells(row["PossibleValues"])
                for kind, cell in zip(types, values, strict=False):
                    if "name" in kind:
                        found.update(_NAME.findall(cell))
    return found - {"fn"}


def _cells(text: str) -> list[str]:
    """A PossibleValues column split at its top-level ';' (one bracket per type)."""
    cells, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += char in "[(" and 1 or char in "])" and -1 or 0
        if char == ";" and depth == 0:
            cells.append(text[start:i])
            start = i + 1
    return [*cells, text[start:]]


def main(checkout: str, commit: str) -> None:
    found = names(Path(checkout) / "tsv" / "latest")
    header = f"# PDF names defined by the specification: arlington-pdf-model {commit} tsv/latest, with the prose tables"
    OUT.write_text("\n".join([header, *sorted(found)]) + "\n")
    print(f"{len(found)} names -> {OUT}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
