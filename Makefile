# The commands the README and docs/getting-started/setup.md name. Each installs what it needs: uv (bootstrapped
# with pip if missing), the locked dependencies, and, for the tests, the independent PDF checkers pdfsig and qpdf
# and the headless browser (Debian's chromium and chromium-driver) where apt-get is available.
UV := $(shell command -v uv 2>/dev/null || echo .tools/bin/uv)

.PHONY: go-tlog demo test ui bench bench-metrics bench-stages bench-cli bench-pades bench-keys bench-package bench-redaction bench-review bench-downloads bench-scale \
	install pdf-tools browser promtool

demo: install pdf-tools
	$(UV) run --locked evidence demo

# The docs site builds offline and --strict: a broken link or anchor, or a page left out of the nav, fails the
# target. The two variables only quiet banners that MkDocs plugins print about MkDocs 2.
test: install pdf-tools browser promtool go-tlog
	$(UV) run --locked ruff check .
	$(UV) run --locked ruff format --check .
	DISABLE_MKDOCS_2_WARNING=true NO_MKDOCS_2_WARNING=1 $(UV) run --locked mkdocs build --strict --quiet --site-dir build/site
	$(UV) run --locked pytest

ui: install
	$(UV) run --locked evidence ui

# Backfill throughput (100 tenants x 12 months) and the peak memory of a 500-page report; several minutes.
bench: install
	$(UV) run --locked python bench/throughput.py $(ARGS)
	$(UV) run --locked python bench/oversize_memory.py

bench-stages: install
	$(UV) run --locked python bench/stage_times.py

# Redactions per second of 10-page applications (first and second pass apart), peak RSS of a 300-page one.
bench-redaction: install pdf-tools
	$(UV) run --locked python bench/redaction.py

# 1,000 contract reviews (short renewals and 40-page leases) through intake and Dagster's dispatch against a plain
# loop of the same work at the same parallelism: contracts/s, their ratio, p50/p95 per class; ~10 minutes.
bench-review: install
	$(UV) run --locked python bench/contract_review.py

# A 10 MB job output downloaded through the tenant API against reading the archived file directly.
bench-downloads: install
	$(UV) run --locked python bench/downloads.py

# CLI start-up CPU (evidence --help, evidence verify of one bundle) and bundles/s verifying a 300-bundle archive.
bench-cli: install
	$(UV) run --locked python bench/cli_verify.py

# Signing cost per report at PAdES B-B, B-T, B-LT and B-LTA, with a time stamp authority and CRLs on 127.0.0.1.
bench-pades: install
	$(UV) run --locked python bench/pades_levels.py

# What key rotation costs: the per-bundle re-read of the active keys, and evidence verify with the keyring's checks.
bench-keys: install
	$(UV) run --locked python bench/keyring_select.py

# `evidence verify --package` throughput on an audit package of 1,200 bundles (built first: a few minutes).
bench-package: install
	$(UV) run --locked python bench/package_verify.py

# 10,000 tenants on a real instance, webserver and daemon: the registry sensor, the UI's partition-status queries,
# a one-month backfill of every tenant, the schedule's tick and `evidence stats` over a year of ledger; 15-40 min.
bench-scale: install
	$(UV) run --locked python bench/scale.py

# What one Prometheus scrape costs at 10,000 and 1,000,000 ledger events (ARGS="--smoke" for a quick look).
bench-metrics: install
	$(UV) run --locked python bench/metrics_scrape.py $(ARGS)

# Compiled bytecode: where PYTHONDONTWRITEBYTECODE is set (containers often do), every run worker, daemon and CLI
# process would otherwise recompile Dagster from source (seconds of CPU each). The project itself is installed
# editable, so its own modules are compiled here too (the CLI's start-up pays for them otherwise).
install: $(UV)
	$(UV) sync --locked --quiet --compile-bytecode
	$(UV) run --locked python -m compileall -q evidence_pipeline

.tools/bin/uv:
	python3 -m venv .tools
	.tools/bin/pip install --quiet uv==0.13.8

# pdfsig, qpdf and pdfimages check what the service writes; Tesseract is the OCR engine the redactor reads images
# and pages with, and the product needs it at run time too, with its data for each language a redaction template
# may name (OCR_LANGUAGES, Tesseract's names; osd is its orientation data): about 36 MB installed, the same set as
# deploy/Dockerfile's. DejaVu Sans is the font the OCR-language tests draw a Cyrillic scan with.
OCR_LANGUAGES = eng osd deu fra spa por ita nld eus jpn chi_sim chi_tra kor rus heb
pdf-tools:
	@if command -v pdfsig >/dev/null && command -v qpdf >/dev/null && command -v tesseract >/dev/null \
		&& [ -f /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] \
		&& (for l in $(OCR_LANGUAGES); do tesseract --list-langs 2>/dev/null | grep -qx "$$l" || exit 1; done); then :; \
	elif command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			poppler-utils poppler-data qpdf tesseract-ocr fonts-dejavu-core \
			$(subst _,-,$(addprefix tesseract-ocr-,$(OCR_LANGUAGES)))) >/dev/null; \
	else echo "pdfsig/qpdf/tesseract or its language data not installed: the independent-checker and OCR tests will be skipped or fail"; fi

# promtool (Debian's prometheus package) tests deploy/prometheus/alerts.yaml; without it that test is skipped.
promtool:
	@if command -v promtool >/dev/null; then :; \
	elif command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus) >/dev/null \
			|| echo "prometheus could not be installed: the alert rules' test will be skipped"; \
	else echo "promtool not installed: the alert rules' test will be skipped"; fi

# Go's golang.org/x/mod/sumdb/note and sumdb/tlog (Debian's golang-go and golang-golang-x-mod-dev), the reference
# implementation the C2SP formats descend from: test_witness.py checks every .tlog-proof of a package with them.
go-tlog:
	@if command -v go >/dev/null && [ -d /usr/share/gocode/src/golang.org/x/mod/sumdb/tlog ]; then :; \
	elif command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq golang-go golang-golang-x-mod-dev) \
			>/dev/null || echo "golang-go could not be installed: the Go check of tlog proofs will be skipped"; \
	else echo "golang-go not installed: the Go check of tlog proofs will be skipped"; fi

# test_auditor_ui.py drives the read-only UI in headless Chromium through chromium-driver; without them it is skipped.
browser:
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then :; \
	elif command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver) \
			>/dev/null || echo "chromium/chromium-driver could not be installed: the browser test will be skipped"; \
	else echo "chromium/chromedriver not installed: the browser test of the auditor's UI will be skipped"; fi
