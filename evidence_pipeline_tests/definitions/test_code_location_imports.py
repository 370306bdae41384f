"""What loading the code location imports: every process that loads it pays for it (the code server, the fork
server every run is forked from, `dagster dev`), a backfill once more per code server. Modules only another path
uses are imported on that path: S3's total deadline (botocore's HTTP stack) when a store is on S3, the ETSI
validation report model (xsdata, lxml, pyHanko's generated ETSI classes) when a signature check writes its reports.
Together they were 0.25-0.4 s of CPU per process (bench/README.md, issue 48). The paths that use them are tested
where they are (the aws backend's stores, the signature check's ETSI reports)."""

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ONLY_OTHER_PATHS = [
    "botocore.awsrequest",
    "evidence_pipeline.signing.etsi_report",
    "evidence_pipeline.store.s3_deadline",
    "pyhanko.generated.etsi",
    "xsdata",
]


def test_loading_the_code_location_leaves_out_what_only_other_paths_use():
    probe = (
        "import json, sys; import evidence_pipeline.definitions; "
        f"print(json.dumps([name for name in {ONLY_OTHER_PATHS!r} if name in sys.modules]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "PYTHONDONTWRITEBYTECODE": "1"},
    )
    assert json.loads(out.stdout.splitlines()[-1]) == []
