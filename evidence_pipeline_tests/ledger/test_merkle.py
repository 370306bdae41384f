"""RFC 9162 Merkle proofs against the transparency-dev/merkle test vectors (proof/verify_test.go)."""

import pytest

from evidence_pipeline.ledger import merkle

LEAVES = [
    bytes.fromhex(h)
    for h in ["", "00", "10", "2021", "3031", "40414243", "5051525354555657", "606162636465666768696a6b6c6d6e6f"]
]
ROOTS = [
    bytes.fromhex(h)
    for h in [
        "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
        "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
        "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
        "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
        "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
        "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
        "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
    ]
]
# (1-based leaf, tree size, proof)
INCLUSION = [
    (
        1,
        8,
        [
            "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
        ],
    ),
    (
        6,
        8,
        [
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
            "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        ],
    ),
    (3, 3, ["fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125"]),
    (
        2,
        5,
        [
            "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
        ],
    ),
]
CONSISTENCY = [
    (
        1,
        8,
        [
            "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
        ],
    ),
    (
        6,
        8,
        [
            "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
            "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        ],
    ),
    (
        2,
        5,
        [
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
        ],
    ),
    (
        6,
        7,
        [
            "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
            "b08693ec2e721597130641e8211e7eedccb4c26413963eee6c1e2ed16ffb1a5f",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        ],
    ),
]
HASHES = [merkle.leaf_hash(leaf) for leaf in LEAVES]


def test_roots_of_every_prefix():
    assert [merkle.root(HASHES[:n]) for n in range(1, 9)] == ROOTS
    assert merkle.root([]).hex() == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


@pytest.mark.parametrize(("leaf", "size", "proof"), INCLUSION)
def test_inclusion_vectors(leaf, size, proof):
    proof = [bytes.fromhex(p) for p in proof]
    assert merkle.inclusion_proof(leaf - 1, HASHES[:size]) == proof
    assert merkle.verify_inclusion(leaf - 1, size, HASHES[leaf - 1], proof, ROOTS[size - 1])
    flipped = [bytes([proof[0][0] ^ 8]) + proof[0][1:]] + proof[1:]
    for bad in [
        (leaf, size, HASHES[leaf - 1], proof),
        (leaf - 1, size * 2, HASHES[leaf - 1], proof),
        (leaf - 1, size, b"WrongLeaf", proof),
        (leaf - 1, size, HASHES[leaf - 1], flipped),
        (leaf - 1, size, HASHES[leaf - 1], proof + [ROOTS[0]]),
        (leaf - 1, size, HASHES[leaf - 1], proof[:-1]),
    ]:
        assert not merkle.verify_inclusion(*bad, ROOTS[size - 1])


@pytest.mark.parametrize(("old", "new", "proof"), CONSISTENCY)
def test_consistency_vectors(old, new, proof):
    proof = [bytes.fromhex(p) for p in proof]
    assert merkle.consistency_proof(old, HASHES[:new]) == proof
    assert merkle.verify_consistency(old, new, proof, ROOTS[old - 1], ROOTS[new - 1])
    assert not merkle.verify_consistency(old, new, proof, ROOTS[new - 1], ROOTS[old - 1])
    assert not merkle.verify_consistency(old, new, proof[:-1], ROOTS[old - 1], ROOTS[new - 1])
    assert not merkle.verify_consistency(old, new, [], ROOTS[old - 1], ROOTS[new - 1])
    flipped = proof[:-1] + [bytes([proof[-1][0] ^ 16]) + proof[-1][1:]]
    assert not merkle.verify_consistency(old, new, flipped, ROOTS[old - 1], ROOTS[new - 1])


def test_every_proof_of_a_larger_tree_round_trips():
    leaves = [merkle.leaf_hash(str(i).encode()) for i in range(37)]
    for size in range(1, 38):
        tree_root = merkle.root(leaves[:size])
        for index in range(size):
            assert merkle.verify_inclusion(
                index, size, leaves[index], merkle.inclusion_proof(index, leaves[:size]), tree_root
            )
        for old in range(1, size + 1):
            proof = merkle.consistency_proof(old, leaves[:size])
            assert merkle.verify_consistency(old, size, proof, merkle.root(leaves[:old]), tree_root)


def _mth(leaves):  # RFC 9162 2.1.1, recursively as written there
    if len(leaves) == 1:
        return leaves[0]
    k = 1 << ((len(leaves) - 1).bit_length() - 1)
    return merkle.node_hash(_mth(leaves[:k]), _mth(leaves[k:]))


def _path(m, leaves):  # 2.1.3.1
    if len(leaves) == 1:
        return []
    k = 1 << ((len(leaves) - 1).bit_length() - 1)
    return _path(m, leaves[:k]) + [_mth(leaves[k:])] if m < k else _path(m - k, leaves[k:]) + [_mth(leaves[:k])]


def _subproof(m, leaves, complete):  # 2.1.4.1
    if m == len(leaves):
        return [] if complete else [_mth(leaves)]
    k = 1 << ((len(leaves) - 1).bit_length() - 1)
    if m <= k:
        return _subproof(m, leaves[:k], complete) + [_mth(leaves[k:])]
    return _subproof(m - k, leaves[k:], False) + [_mth(leaves[:k])]


def test_one_tree_answers_every_size_as_the_rfc_recursion_does():
    """An audit package takes many proofs from one Tree, at several sizes: its cached subtrees must never leak
    from one size into another."""
    leaves = [merkle.leaf_hash(str(i).encode()) for i in range(41)]
    tree = merkle.Tree(leaves)
    for size in (41, 1, 17, 32, 33, 5, 40):  # out of order, so that the cache is warm with other sizes
        assert tree.root(0, size) == _mth(leaves[:size])
        for index in range(size):
            assert tree.inclusion_proof(index, size) == _path(index, leaves[:size])
        for old in range(1, size + 1):
            assert tree.consistency_proof(old, size) == _subproof(old, leaves[:size], True)
    with pytest.raises(ValueError):
        tree.inclusion_proof(41, 41)
