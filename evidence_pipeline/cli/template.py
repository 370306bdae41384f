"""`evidence template …`: redaction template versions (submit, approve, list, show) and a candidate's shadow run."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import click

from evidence_pipeline.cli.acting import gate, signed, signer_options
from evidence_pipeline.cli.options import check_tenant_id, json_option, parse_moment
from evidence_pipeline.cli.resources import intake_ledger, load_settings, open_runtime
from evidence_pipeline.errors import EvidenceError


@click.group()
def template() -> None:
    """Redaction templates: submit an organization + program template as a version, approve it, list, show."""


def _print_version(found: dict, as_json: bool, rules: bool = False) -> None:
    if as_json:
        click.echo(json.dumps(found if rules else {k: v for k, v in found.items() if k != "template"}, indent=2))
        return
    approval = f"approved by {found['approved_by']} at {found['approved_at']}" if found["approved_by"] else "unapproved"
    template = found["template"]
    click.echo(
        f"{found['version_id']}  {template['organization']}/{template['program']}  "
        f"by {found['author']}  effective {found['effective_at']}  {approval}"
    )
    if rules:
        for rule in template["rules"]:
            kind = next(k for k in ("pattern", "field", "region") if k in rule)
            click.echo(f"  {rule['id']:<24} {rule['label']:<16} {kind}: {json.dumps(rule[kind])}")


@template.command("submit")
@click.argument("tenant_id", metavar="TENANT", callback=check_tenant_id)
@click.option("--organization", type=click.File("rb"), required=True, help="The organization template (JSON).")
@click.option("--program", type=click.File("rb"), required=True, help="The program template (JSON).")
@click.option(
    "--effective-at",
    "effective_at",
    callback=parse_moment,
    metavar="TIME",
    help="When the version takes effect once approved (ISO 8601)  [default: now]",
)
@signer_options
@json_option
def template_submit(
    tenant_id: str,
    organization,
    program,
    effective_at: datetime | None,
    key: Path | None,
    actor: str | None,
    as_json: bool,
) -> None:
    """Merge ORGANIZATION and PROGRAM into a template version of TENANT (the same rules: the same version). An
    operator's signed action: the request names the version (the rules' digest) and its effective time."""
    from evidence_pipeline.actors.roles import Action
    from evidence_pipeline.documents import templates

    limit = templates.MAX_TEMPLATE_BYTES + 1  # one byte over the limit is enough to refuse it
    organization, program = organization.read(limit), program.read(limit)
    vid = templates.version_id(
        templates.merge(templates.parse(organization, "organization"), templates.parse(program, "program"))
    )
    effective = (effective_at or datetime.now(timezone.utc)).astimezone(timezone.utc).isoformat(timespec="seconds")
    settings = load_settings()
    envelope = signed(
        settings,
        key=key,
        actor=actor,
        action=Action.TEMPLATE_SUBMIT,
        args={"version_id": vid, "effective_at": effective},
        tenant=tenant_id,
    )
    found, created = templates.submit(gate(settings), envelope, organization, program)
    if not as_json:
        click.echo("submitted" if created else "already submitted")
    _print_version(found, as_json)


@template.command("approve")
@click.argument("tenant_id", metavar="TENANT", callback=check_tenant_id)
@click.argument("version_id", metavar="VERSION")
@signer_options
@json_option
def template_approve(tenant_id: str, version_id: str, key: Path | None, actor: str | None, as_json: bool) -> None:
    """Approve VERSION of TENANT's templates: an approver's signed action, never by an identity of its author
    (TEMPLATE_SELF_APPROVAL); recorded as a ledger event with the request."""
    from evidence_pipeline.actors.roles import Action
    from evidence_pipeline.documents import templates

    settings = load_settings()
    envelope = signed(
        settings,
        key=key,
        actor=actor,
        action=Action.TEMPLATE_APPROVE,
        args={"version_id": version_id},
        tenant=tenant_id,
    )
    found, created = templates.approve(gate(settings), envelope)
    if not as_json:
        click.echo("approved" if created else "already approved")
    _print_version(found, as_json)


@template.command("list")
@click.argument("tenant_id", metavar="TENANT", callback=check_tenant_id)
@json_option
def template_list(tenant_id: str, as_json: bool) -> None:
    """TENANT's template versions, oldest first, and which one is in effect now."""
    from evidence_pipeline.documents import templates

    ledger = intake_ledger()
    found = templates.versions(ledger, tenant_id)
    try:
        current = templates.in_effect(ledger, tenant_id)["version_id"]
    except EvidenceError:
        current = None
    if as_json:
        click.echo(
            json.dumps(
                {
                    "in_effect": current,
                    "versions": [{k: v for k, v in version.items() if k != "template"} for version in found],
                },
                indent=2,
            )
        )
        return
    for version in found:
        click.echo(("* " if version["version_id"] == current else "  "), nl=False)
        _print_version(version, False)
    if current is None:
        click.echo("no approved version is in effect: redact jobs are refused (TEMPLATE_NOT_IN_EFFECT)")


@template.command("show")
@click.argument("tenant_id", metavar="TENANT", callback=check_tenant_id)
@click.argument("version_id", metavar="VERSION")
@json_option
def template_show(tenant_id: str, version_id: str, as_json: bool) -> None:
    """One version with its merged rules."""
    from evidence_pipeline.documents import templates

    _print_version(templates.version(intake_ledger(), tenant_id, version_id), as_json, rules=True)


@template.command("shadow")
@click.argument("tenant_id", metavar="TENANT", callback=check_tenant_id)
@click.argument("candidate", metavar="CANDIDATE")
@click.option(
    "--sample",
    default=20,
    show_default=True,
    type=click.IntRange(1, 200),
    help="How many of the tenant's latest redaction inputs to compare on.",
)
@json_option
def template_shadow(tenant_id: str, candidate: str, sample: int, as_json: bool) -> None:
    """What CANDIDATE would remove beside the version in effect, per label, on a sample of TENANT's latest
    redaction inputs. Counts only; nothing is written or published."""
    from evidence_pipeline.documents.template_shadow import shadow

    result = shadow(open_runtime(load_settings()), tenant_id, candidate, sample)
    if as_json:
        click.echo(json.dumps(result, indent=2))
        return
    click.echo(
        f"current {result['current'][:12]}, candidate {result['candidate'][:12]}, "
        f"{len(result['documents'])} documents compared"
        + (f", refused {result['refused']}" if result["refused"] else "")
    )
    labels = sorted({label for counts in result["totals"].values() for label in counts})
    click.echo(f"  {'label':<20} {'both':>8} {'only current':>14} {'only candidate':>16}")
    for label in labels:
        totals = result["totals"]
        click.echo(
            f"  {label:<20} {totals['both'].get(label, 0):>8} {totals['only_current'].get(label, 0):>14} "
            f"{totals['only_candidate'].get(label, 0):>16}"
        )
