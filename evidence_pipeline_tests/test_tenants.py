from evidence_pipeline.tenants import RejectedLine, add_to_registry, read_registry


def test_registry_keeps_valid_slugs_and_reports_bad_lines_by_number(tmp_path):
    registry = tmp_path / "tenants.txt"
    registry.write_text(
        "acme-books\nBad|Id\n\n# comment\ndelta-foods  # note\nacme-books\n-leading\n" + "a" * 64 + "\n"
    )
    tenants, rejected = read_registry(registry)
    assert tenants == ["acme-books", "delta-foods"]
    assert rejected == [
        RejectedLine(2, "TENANT_ID_INVALID"),
        RejectedLine(7, "TENANT_ID_INVALID"),
        RejectedLine(8, "TENANT_ID_INVALID"),
    ]
    add_to_registry(registry, ["delta-foods", "new-tenant"])
    assert read_registry(registry)[0] == ["acme-books", "delta-foods", "new-tenant"]
    assert read_registry(tmp_path / "absent.txt") == ([], [])
