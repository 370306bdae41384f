"""The auditor's side: what proves, later and offline, what was produced, from what and by whom. Verifying a bundle
or many (verify.py, verify_many.py, below the locations locations.py names), the ledger's signed checkpoints and
their witness (checkpoints.py), who authorized each privileged action (authorizations.py), a document artifact's
walk back to its upload (lineage.py: over the ledger, lineage_ledger.py; over a package, package_documents.py),
exporting a tenant's evidence (export.py, export_documents.py) and the offline audit package (package.py; its
signed index, package_index.py; who authorized what in it, package_authorizations.py). It reads what the pipeline
wrote and writes nothing the pipeline reads.
"""
