"""RFC 9162 Merkle tree hashes and proofs (the Certificate Transparency v2 log construction).

No maintained Python library implements RFC 9162 proofs, so this is the small exception: leaf = SHA-256(0x00 || d),
node = SHA-256(0x01 || left || right), tested against the transparency-dev/merkle vectors.
"""

from __future__ import annotations

import hashlib


def leaf_hash(data: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def _split(n: int) -> int:
    """The largest power of two smaller than n (n >= 2)."""
    return 1 << ((n - 1).bit_length() - 1)


def root(leaves: list[bytes]) -> bytes:
    """MTH over leaf hashes."""
    return Tree(leaves).root(0, len(leaves))


def inclusion_proof(index: int, leaves: list[bytes]) -> list[bytes]:
    """PATH(m, D[n]) of RFC 9162 section 2.1.3.1."""
    return Tree(leaves).inclusion_proof(index, len(leaves))


def consistency_proof(old_size: int, leaves: list[bytes]) -> list[bytes]:
    """PROOF(m, D[n]) of RFC 9162 section 2.1.4.1."""
    return Tree(leaves).consistency_proof(old_size, len(leaves))


class Tree:
    """The RFC 9162 tree over a list of leaf hashes, and its proofs at any size up to the list's length.

    Every subtree hash is computed once and kept, so that many proofs over one ledger (an audit package: one
    inclusion proof per bundle, consistency proofs between checkpoints) cost the tree once plus O(log n) each,
    instead of O(n) each."""

    def __init__(self, leaves: list[bytes]):
        self.leaves = leaves
        self._nodes: dict[tuple[int, int], bytes] = {}

    def root(self, start: int, end: int) -> bytes:
        """MTH(D[start:end])."""
        if end - start <= 1:
            return self.leaves[start] if end - start == 1 else hashlib.sha256(b"").digest()
        node = self._nodes.get((start, end))
        if node is None:
            middle = start + _split(end - start)
            node = self._nodes[start, end] = node_hash(self.root(start, middle), self.root(middle, end))
        return node

    def inclusion_proof(self, index: int, size: int) -> list[bytes]:
        """PATH(index, D[size]), section 2.1.3.1: the recursion unrolled, deepest sibling first."""
        if not 0 <= index < size <= len(self.leaves):
            raise ValueError("the leaf index must be below the tree size")
        path, start, end = [], 0, size
        while end - start > 1:
            middle = start + _split(end - start)
            if index < middle:
                path.append(self.root(middle, end))
                end = middle
            else:
                path.append(self.root(start, middle))
                start = middle
        return path[::-1]

    def consistency_proof(self, old_size: int, size: int) -> list[bytes]:
        """PROOF(old_size, D[size]), section 2.1.4.1: SUBPROOF unrolled."""
        if not 0 < old_size <= size <= len(self.leaves):
            raise ValueError("old size must be in 1..n")
        path, start, end, m, complete = [], 0, size, old_size, True
        while m != end - start:
            middle = start + _split(end - start)
            if m <= middle - start:
                path.append(self.root(middle, end))
                end = middle
            else:
                path.append(self.root(start, middle))
                m, start, complete = m - (middle - start), middle, False
        if not complete:
            path.append(self.root(start, end))
        return path[::-1]


def verify_inclusion(index: int, size: int, leaf: bytes, proof: list[bytes], expected_root: bytes) -> bool:
    """RFC 9162 section 2.1.3.2."""
    if index >= size:
        return False
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while fn and not fn & 1:
                    fn, sn = fn >> 1, sn >> 1
        else:
            r = node_hash(r, p)
        fn, sn = fn >> 1, sn >> 1
    return sn == 0 and r == expected_root


def verify_consistency(old_size: int, new_size: int, proof: list[bytes], old_root: bytes, new_root: bytes) -> bool:
    """RFC 9162 section 2.1.4.2."""
    if old_size > new_size:
        return False
    if old_size == new_size:
        return not proof and old_root == new_root
    if old_size == 0:
        return not proof
    if not proof:
        return False
    if old_size & (old_size - 1) == 0:  # a power of two: the old root is the first node of the path
        proof = [old_root] + proof
    fn, sn = old_size - 1, new_size - 1
    while fn & 1:
        fn, sn = fn >> 1, sn >> 1
    fr = sr = proof[0]
    for c in proof[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr, sr = node_hash(c, fr), node_hash(c, sr)
            if not fn & 1:
                while fn and not fn & 1:
                    fn, sn = fn >> 1, sn >> 1
        else:
            sr = node_hash(sr, c)
        fn, sn = fn >> 1, sn >> 1
    return sn == 0 and fr == old_root and sr == new_root
