"""Walks over a PDF's object graph (pikepdf) enter each indirect object once: a shared object or a cycle is walked
through one time."""

from __future__ import annotations

import pikepdf

CONTAINERS = (pikepdf.Dictionary, pikepdf.Stream, pikepdf.Array)


def first_visit(value: object, seen: set[tuple[int, int]]) -> bool:
    """Whether ``value`` is a container the walk has not entered yet (an indirect one is remembered in ``seen``)."""
    if not isinstance(value, CONTAINERS):
        return False
    if value.is_indirect:
        if value.objgen in seen:
            return False
        seen.add(value.objgen)
    return True
