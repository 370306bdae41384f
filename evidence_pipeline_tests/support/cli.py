"""The command line as a test runs it: in process, never with a traceback."""

from __future__ import annotations

from click.testing import CliRunner

from evidence_pipeline.cli import main


def invoke(args: list[str], env: dict[str, str]):
    result = CliRunner().invoke(main, args, env=env)
    assert "Traceback" not in result.output and not isinstance(result.exception, (AttributeError, KeyError))
    return result
