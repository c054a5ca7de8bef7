"""Data classes and trust zones (TZ-1..TZ-3): plain values, no database.

Stored values are parsed here and nowhere else, so an unknown class is *undeclared*
(TZ-1) and an unknown zone is the strictest zone (TZ-3) everywhere alike.
"""

from __future__ import annotations

from enum import IntEnum, StrEnum


class DataClass(IntEnum):
    """TZ-1: one total order, least to most sensitive."""

    PUBLIC = 1
    INTERNAL = 2
    CONFIDENTIAL = 3
    RESTRICTED = 4
    SECRET = 5

    @property
    def label(self) -> str:
        return self.name.lower()


class Zone(IntEnum):
    """TZ-2: most to least trusted; the value orders them by trust (higher = less)."""

    LOCAL = 1
    PRIVATE_HOSTED = 2
    EXTERNAL_EU = 3
    EXTERNAL_GLOBAL = 4

    @property
    def label(self) -> str:
        return self.name.lower()

    @property
    def ceiling(self) -> DataClass:
        return CEILINGS[self]

    def permits(self, data_class: DataClass) -> bool:
        return may_leave(data_class, self.ceiling)


CEILINGS = {
    Zone.LOCAL: DataClass.SECRET,
    Zone.PRIVATE_HOSTED: DataClass.RESTRICTED,
    Zone.EXTERNAL_EU: DataClass.CONFIDENTIAL,
    Zone.EXTERNAL_GLOBAL: DataClass.INTERNAL,
}


def may_leave(label: DataClass | None, ceiling: DataClass | None) -> bool:
    """CG-14, the one rule of every way out (`agentruns.egress`): content labelled `label`
    (None: nothing it carries was declared, TZ-1) may go where the ceiling is `ceiling`
    (None: that way carries no content at all)."""
    return ceiling is not None and (label is None or label <= ceiling)


STRICTEST_ZONE = Zone.EXTERNAL_GLOBAL
DATA_CLASS_CHOICES = [(c.label, c.label) for c in DataClass]
ZONE_CHOICES = [(z.label, z.label.replace("_", " ")) for z in Zone]


def parse_class(raw: str | None) -> DataClass | None:
    """TZ-1: an empty or unknown stored value is undeclared (None)."""
    try:
        return DataClass[(raw or "").strip().upper()]
    except KeyError:
        return None


def parse_zone(raw: str | None) -> Zone:
    """TZ-3: an empty or unknown zone is the strictest one."""
    try:
        return Zone[(raw or "").strip().upper()]
    except KeyError:
        return STRICTEST_ZONE


def least_trusted(zones: list[Zone]) -> Zone:
    return max(zones)


class Enforcement(StrEnum):
    """CG-5: what the gate does with a refusal, by the setting's word (the readout shows
    it); an audit row records it as `recorded` (`enforced`, `observed`)."""

    ENFORCE = "enforce"
    OBSERVE = "observe"

    @property
    def recorded(self) -> str:
        return f"{self.value}d"


def parse_enforcement(raw: object) -> Enforcement:
    """CG-5: fail closed; only the exact word `observe` observes."""
    if isinstance(raw, str) and raw.strip().lower() == "observe":
        return Enforcement.OBSERVE
    return Enforcement.ENFORCE
