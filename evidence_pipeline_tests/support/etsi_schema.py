"""ETSI TS 119 102-2 validation reports checked with code we did not write: lxml validates each against the
standard's XSD (vendored under schemas/etsi-119102-2/, its imports resolved there, never fetched), and xsdata
parses it strictly into pyHanko's bindings of the same schema."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from lxml import etree

SCHEMAS = Path(__file__).parent / "schemas" / "etsi-119102-2"
# schemaLocation of each import -> the vendored file (see the README there)
_LOCATIONS = {
    "http://www.w3.org/TR/2002/REC-xmldsig-core-20020212/xmldsig-core-schema.xsd": "xmldsig-core-schema.xsd",
    "http://www.w3.org/TR/2008/REC-xmldsig-core-20080610/xmldsig-core-schema.xsd": "xmldsig-core-schema.xsd",
    "http://uri.etsi.org/01903/v1.3.2/XAdES.xsd": "XAdES01903v132-201601.xsd",
    "http://uri.etsi.org/19612/v2.2.1/ts_119612v020201_201601xsd.xsd": "ts_119612v020201_201601xsd.xsd",
    "http://www.w3.org/2001/xml.xsd": "xml.xsd",
}


class _Vendored(etree.Resolver):
    def resolve(self, url, public_id, context):
        if url in _LOCATIONS:
            return self.resolve_filename(str(SCHEMAS / _LOCATIONS[url]), context)
        if Path(url).parent == SCHEMAS:
            return self.resolve_filename(url, context)
        raise AssertionError(f"the schema imports {url}, which is not vendored")


@cache
def schema() -> etree.XMLSchema:
    parser = etree.XMLParser(no_network=True, resolve_entities=False)
    parser.resolvers.add(_Vendored())
    return etree.XMLSchema(etree.parse(str(SCHEMAS / "1910202xmlSchema.xsd"), parser))


def indications(xml: bytes) -> tuple[str, list[str]]:
    """The main and sub-indications of a one-signature report, after it validates against the schema and parses
    strictly (an element or attribute the schema does not define fails)."""
    from pyhanko.generated.etsi import ts_11910202
    from xsdata.formats.dataclass.parsers import XmlParser
    from xsdata.formats.dataclass.parsers.config import ParserConfig

    document = etree.fromstring(xml, etree.XMLParser(no_network=True, resolve_entities=False))
    assert schema().validate(document), schema().error_log
    config = ParserConfig(
        fail_on_unknown_properties=True, fail_on_unknown_attributes=True, fail_on_converter_warnings=True
    )
    report = XmlParser(config=config).from_bytes(xml, ts_11910202.ValidationReport)
    (single,) = report.signature_validation_report
    status = single.signature_validation_status
    return status.main_indication.rsplit(":", 1)[1], [s.rsplit(":", 1)[1] for s in status.sub_indication]
