"""Looking the vocabulary up (`algorithms.VOCABULARY`): a word of `--algorithm` to its record,
the line-rate records a stage can run and the automatic choice among them, and every
(algorithm, protocol) pair a library may run for a kind on a communicator."""

from __future__ import annotations

from collections.abc import Sequence

from shardline.collectives.algorithms import ALGORITHMS, TABLE, VOCABULARY
from shardline.collectives.library import Group, Library, Pair
from shardline.collectives.records import CollectiveAlgorithm, LineRate
from shardline.errors import InputError

__all__ = ["algorithm_named", "algorithms_for", "canonical_algorithm", "choose", "library_pairs"]

_BY_WORD: dict[str, CollectiveAlgorithm] = {
    word: record for record in VOCABULARY for word in record.words
}


def _key(word: str) -> str:
    return str(word).strip().lower().replace("_", "-")


def algorithm_named(name: str) -> CollectiveAlgorithm:
    """The record `name` names ('NVLS' -> in-switch, 'nvls_tree' -> nvls-tree); an unknown name
    is an error that lists every valid one."""
    record = _BY_WORD.get(_key(name))
    if record is None:
        raise InputError(f"unknown algorithm {name!r}; valid: {', '.join(ALGORITHMS)}")
    return record


def canonical_algorithm(name: str) -> str:
    """'NVLS' -> 'in-switch', 'double_binary_tree' -> 'tree'; an unknown name is an error."""
    return algorithm_named(name).name


def algorithms_for(kind: str, topology: str, in_network_reduction: bool) -> list[LineRate]:
    """The line-rate records that can run `kind` on a stage of `topology`, defaults first."""
    found = [
        r
        for r in TABLE.values()
        if r.kind == kind and topology in r.topologies and (in_network_reduction or not r.in_switch)
    ]
    return sorted(found, key=lambda r: (not r.default, not r.in_switch))


def choose(
    kind: str, topology: str, in_network_reduction: bool, name: str | None = None
) -> LineRate:
    """The named record (an error when it cannot run here), else the topology's default."""
    options = algorithms_for(kind, topology, in_network_reduction)
    if name is None:
        return options[0]
    wanted = canonical_algorithm(name)
    for record in options:
        if record.name == wanted:
            return record
    valid = ", ".join(r.name for r in options)
    raise InputError(
        f"algorithm {wanted!r} cannot run {kind.replace('_', '-')} on a {topology} stage; "
        f"valid there: {valid}"
    )


def library_pairs(
    lib: Library, kind: str, group: Group, records: Sequence[CollectiveAlgorithm] = VOCABULARY
) -> list[Pair]:
    """Every (algorithm, protocol) the library may run for `kind` on `group`, record by record
    in the vocabulary's order."""
    return [
        pair
        for record in records
        if record.library is not None and kind in record.library.kinds
        for pair in record.library.pairs(lib, kind, group)
    ]
