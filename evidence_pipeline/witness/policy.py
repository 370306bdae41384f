"""C2SP transparency log policies (c2sp.org/tlog-policy): the logs a checkpoint may be signed by, the witnesses, and
the quorum of cosignatures that makes it valid:

    log <vkey> [<url>]
    witness <name> <vkey> [<url>]
    group <name> all|any|<k> <name>...
    quorum <name>|none

`--witness VKEY … --witness-policy N` is the policy of one group, N of those witnesses.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from evidence_pipeline.signed_note import COSIGNATURE_V1, ED25519, NoteError, Verifier, parse_vkey, raw_public

NONE = "none"
MAX_ENTRIES = 32  # of each kind: the limits the specification recommends supporting, and no more
MAX_POLICY_BYTES = 64 * 1024
_WHITESPACE = re.compile(r"[ \t]+")


@dataclass(frozen=True)
class TlogPolicy:
    logs: tuple[Verifier, ...]
    witnesses: dict[str, Verifier]
    groups: dict[str, tuple[int, tuple[str, ...]]] = field(default_factory=dict)  # name -> (k, members)
    quorum: str = NONE

    @classmethod
    def of_count(cls, witnesses: tuple[Verifier, ...], required: int, logs: tuple[Verifier, ...] = ()) -> TlogPolicy:
        """``required`` of ``witnesses`` (named w1, w2, … in the file)."""
        names = {f"w{number}": key for number, key in enumerate(witnesses, 1)}
        if not names:
            return cls(logs, {}, {}, NONE)
        return cls(logs, names, {"witnesses": (required, tuple(names))}, "witnesses")

    @property
    def origins(self) -> tuple[str, ...]:
        return tuple(sorted({log.name for log in self.logs}))

    def met(self, cosigned: set[str]) -> bool:
        """Whether the witnesses named ``cosigned`` (by their names in the policy) satisfy the quorum."""

        def witnessed(name: str) -> bool:
            if name in self.groups:
                k, members = self.groups[name]
                return sum(witnessed(member) for member in members) >= k
            return name in cosigned

        return self.quorum == NONE or witnessed(self.quorum)

    def describe(self) -> str:
        if self.quorum == NONE:
            return "no cosignature required"
        if self.quorum in self.groups:
            k, members = self.groups[self.quorum]
            if all(member in self.witnesses for member in members):
                return f"{k} of {len(members)} witnesses required"
        return f"witness quorum {self.quorum} required"

    def encode(self) -> bytes:
        lines = [f"log {log.vkey()}" for log in self.logs]
        lines += [f"witness {name} {key.vkey()}" for name, key in self.witnesses.items()]
        lines += [f"group {name} {k} {' '.join(members)}" for name, (k, members) in self.groups.items()]
        return ("\n".join([*lines, f"quorum {self.quorum}"]) + "\n").encode()


def parse_policy(data: bytes) -> TlogPolicy:
    """A policy file; NoteError naming the line that is not of the format."""
    if len(data) > MAX_POLICY_BYTES or any(byte < 0x20 and byte not in (0x09, 0x0A) or byte == 0x7F for byte in data):
        raise NoteError("a policy file is at most 64 KiB, with no control character but tab and newline")
    logs: list[Verifier] = []
    witnesses: dict[str, Verifier] = {}
    groups: dict[str, tuple[int, tuple[str, ...]]] = {}
    quorum = None
    for number, line in enumerate(data.decode("utf-8", "replace").split("\n"), 1):
        words = _WHITESPACE.split(line.strip())
        if words[0] in ("", "#") or words[0].startswith("#"):
            continue
        try:
            keyword, rest = words[0], words[1:]
            if keyword == "log" and 1 <= len(rest) <= 2:
                logs.append(parse_vkey(rest[0], ED25519))
            elif keyword == "witness" and 2 <= len(rest) <= 3 and _new(rest[0], witnesses, groups):
                witnesses[rest[0]] = parse_vkey(rest[1], COSIGNATURE_V1)
            elif keyword == "group" and len(rest) >= 3 and _new(rest[0], witnesses, groups):
                groups[rest[0]] = _group(rest[1], rest[2:], witnesses, groups)
            elif (
                keyword == "quorum"
                and len(rest) == 1
                and quorum is None
                and (rest[0] == NONE or rest[0] in witnesses or rest[0] in groups)
            ):
                quorum = rest[0]
            else:
                raise NoteError("not a log, witness, group or quorum line of the format")
        except NoteError as error:
            raise NoteError(f"policy line {number}: {error}") from None
    keys = [raw_public(key.public) for key in [*logs, *witnesses.values()]]
    if quorum is None or len(set(keys)) != len(keys) or max(len(logs), len(witnesses), len(groups)) > MAX_ENTRIES:
        raise NoteError("a policy has exactly one quorum line, no key twice and at most 32 logs, witnesses, groups")
    return TlogPolicy(tuple(logs), witnesses, groups, quorum)


def _new(name: str, witnesses: dict, groups: dict) -> bool:
    if name == NONE or name in witnesses or name in groups:
        raise NoteError(f"the name {name!r} is taken")
    return True


def _group(threshold: str, members: list[str], witnesses: dict, groups: dict) -> tuple[int, tuple[str, ...]]:
    if len(set(members)) != len(members) or not all(m in witnesses or m in groups for m in members):
        raise NoteError("a group's members are witnesses or groups defined before it, each once")
    k = {"all": len(members), "any": 1}.get(threshold)
    if k is None and re.fullmatch(r"[1-9][0-9]{0,3}", threshold):
        k = int(threshold)
    if k is None or not 1 <= k <= len(members):
        raise NoteError("a group's threshold is all, any or k, 1 <= k <= its members")
    return k, tuple(members)
