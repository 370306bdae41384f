"""The operator HTTP API: what a web front end or another service does for operators, approvers and auditors (list dead
jobs, replay one, submit and approve a redaction template, decide on a part), on its own port and off by default
(EVIDENCE_OPERATOR_API_PORT), apart from the tenant API (intake/). Each request carries the actor's signed request
(actors/requests.py) and passes the same ActionGate as the command line; tenant bearer tokens authenticate nothing
here. ``app`` is the Starlette app and its server, ``contract`` its OpenAPI 3.1 document. Nothing below the command
line imports this package.
"""
