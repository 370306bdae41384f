"""The external tools a test needs (pdfsig, qpdf, tesseract, go, ...): the test is skipped where one is missing."""

from __future__ import annotations

import shutil

import pytest


def require_tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed (make test installs it)")
    return path
