"""A record of the results file as a frozen dataclass of its declared keys (``contract.records``).

Reading a mapping refuses a key the class does not declare, naming the key, where it was found
and the results schema version: a file written by another version of the framework is refused
in one line rather than read wrongly. A declared key the mapping lacks is ``ABSENT`` (an older
file, or a key that applies only sometimes); a key carried as null is ``None``. Writing gives
back exactly the mapping read, its keys in the order they were read, so a results file read and
written again is byte-identical."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import ClassVar

# The version of the results format (``runs.results``): the records' keys (``contract.records``), a
# results file's top level ``schema``, ``records``, ``manifest``, ``planned``, ``missing``,
# ``unreadable_shards``, ``run``.
SCHEMA_VERSION = 2
# the versions a reader accepts: 1 (a results file of records alone, before run folders, manifests
# and planned cells) has the same records
READABLE_SCHEMAS = (1, 2)


class RecordSchemaError(ValueError):
    """A record with keys this schema does not declare."""


class _Absent:
    """A key the record does not carry (a field that is None is carried, as null). False, as the
    ``None`` a mapping's ``get`` gave readers for it."""

    def __repr__(self) -> str:
        return "ABSENT"

    def __bool__(self) -> bool:
        return False


ABSENT = _Absent()


@dataclass(frozen=True)
class Declared:
    """Base of a record read from the results file. A subclass is a frozen dataclass of its keys;
    ``NESTED`` names the keys whose value, when a mapping, is itself a declared record."""
    NESTED: ClassVar[Mapping[str, type]] = {}
    # the keys as they were read, in their order (not compared: two records of the same values are equal)
    key_order: tuple[str, ...] = field(default=(), kw_only=True, compare=False, repr=False)

    @classmethod
    def keys(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls) if f.name != "key_order")

    @classmethod
    def refuse_undeclared(cls, data: Mapping, where: str) -> None:
        unknown = sorted(set(data) - set(cls.keys()))
        if unknown:
            raise RecordSchemaError(f"{where} has keys {unknown} that results schema {SCHEMA_VERSION} does not "
                                    f"declare (contract.records.{cls.__name__}); written by another version of "
                                    f"the framework?")

    @classmethod
    def check(cls, data: Mapping, where: str) -> None:
        """Refuse a key this schema does not declare in ``data`` or its sub-records, building nothing
        (a record that lacks keys passes)."""
        cls.refuse_undeclared(data, where)
        for key, nested in cls.NESTED.items():
            if isinstance(data.get(key), Mapping):
                nested.check(data[key], f"{where}.{key}")

    @classmethod
    def from_json(cls, data: Mapping, where: str = "record"):
        """The record of a results file's mapping; a key this schema does not declare is refused."""
        if not isinstance(data, Mapping):
            raise RecordSchemaError(f"{where} is not a mapping (results schema {SCHEMA_VERSION}, "
                                    f"contract.records.{cls.__name__})")
        cls.refuse_undeclared(data, where)
        values = {}
        for key, value in data.items():
            nested = cls.NESTED.get(key)
            values[key] = (nested.from_json(value, f"{where}.{key}") if nested is not None
                           and isinstance(value, Mapping) else value)
        return cls(**values, key_order=tuple(data))

    def to_json(self) -> dict:
        """The mapping written to the results file: the keys as read (a record made in code: the
        keys it carries, in declaration order)."""
        order = self.key_order or tuple(k for k in self.keys() if getattr(self, k) is not ABSENT)
        return {k: plain(getattr(self, k)) for k in order}

    def given(self, key: str) -> bool:
        """Whether the record carries ``key`` (null counts as carried)."""
        return getattr(self, key) is not ABSENT


def plain(value):
    """A field's value as JSON data: a declared record as its mapping, anything else as it is."""
    return value.to_json() if isinstance(value, Declared) else value


def present(value, default=None):
    """``value``, or ``default`` for a key the record lacks or carries as null."""
    return default if value is None or value is ABSENT else value


def unless_absent(value, default=None):
    """``value`` (null included), or ``default`` for a key the record lacks."""
    return default if value is ABSENT else value
