"""Declared config checks: a section states each field's check next to the field, one function runs them
with the full key, then the section's checks across fields."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import ClassVar

import pytest

from wmrl.config import WMRLConfig
from wmrl.config_checks import ConfigError, Section, checked_by, choice, each, in_range


def _no_spaces(key: str, value: str) -> None:
    if " " in value:
        raise ConfigError(f"{key}={value!r} must not contain spaces")


@dataclass
class Inner(Section):
    KEY: ClassVar[str] = "outer.inner"
    low: int = field(default=1, metadata=in_range(0))
    high: int = field(default=2, metadata=in_range(0))

    def check_together(self, prefix: str) -> None:
        if self.low > self.high:
            raise ConfigError(f"{prefix}.low={self.low} exceeds {prefix}.high={self.high}")


@dataclass
class Outer(Section):
    KEY: ClassVar[str] = "outer"
    mode: str = field(default="a", metadata=choice(("a", "b")))
    rate: float = field(default=0.5, metadata=in_range(0.0, 1.0, low_open=True))
    names: list[str] = field(default_factory=list, metadata=each(checked_by(_no_spaces)))
    sizes: dict[str, int] = field(default_factory=dict, metadata=each(in_range(1)))
    label: str = field(default="x", metadata=checked_by(_no_spaces))
    free: str = "anything goes"  # no declared check
    inner: Inner = field(default_factory=Inner)
    calls: list[str] = field(default_factory=list)

    def check_together(self, prefix: str) -> None:
        self.calls.append(prefix)


def test_valid_values_pass_and_the_checks_across_fields_run_last_under_the_sections_key() -> None:
    outer = Outer(names=["a", "b"], sizes={"x": 3})
    outer.validate()
    assert outer.calls == ["outer"]
    outer.validate("run.outer")  # a prefix given wins over the section's own key
    assert outer.calls == ["outer", "run.outer"]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"mode": "c"}, "outer.mode='c' is not allowed; choose one of: a, b"),
        ({"rate": 0.0}, r"outer.rate=0.0 is out of range; allowed: (0.0, 1.0]"),
        ({"rate": float("nan")}, "outer.rate=nan is out of range; allowed: (0.0, 1.0]"),
        ({"names": ["ok", "not ok"]}, "outer.names[1]='not ok' must not contain spaces"),
        ({"sizes": {"big": 2, "none": 0}}, r"outer.sizes.none=0 is out of range; allowed: [1, inf)"),
        ({"label": "a b"}, "outer.label='a b' must not contain spaces"),
        ({"inner": Inner(low=-1)}, r"outer.inner.low=-1 is out of range; allowed: [0, inf)"),
        ({"inner": Inner(low=3, high=2)}, "outer.inner.low=3 exceeds outer.inner.high=2"),
    ],
)
def test_a_bad_value_is_named_by_its_full_key_with_what_is_allowed(changes: dict, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        Outer(**changes).validate()
    assert str(err.value) == message


def test_a_nested_section_validated_alone_uses_its_own_key() -> None:
    with pytest.raises(ConfigError, match=r"^outer\.inner\.low=3 exceeds"):
        Inner(low=3, high=2).validate()


def test_the_checks_across_fields_see_only_values_that_passed_their_own_checks() -> None:
    # Inner's cross-field check would compare -5 > 2 silently; the field's own range speaks first.
    with pytest.raises(ConfigError, match="out of range"):
        Inner(low=-5).validate()
    outer = Outer(mode="bad")
    with pytest.raises(ConfigError):
        outer.validate()
    assert outer.calls == []


def _sections(cls: type, key: str = "") -> list[tuple[str, type]]:
    found = [(key, cls)]
    for spec in dataclasses.fields(cls):
        if isinstance(spec.type, type) and dataclasses.is_dataclass(spec.type):
            found += _sections(spec.type, f"{key}.{spec.name}" if key else spec.name)
        elif isinstance(spec.default_factory, type) and dataclasses.is_dataclass(spec.default_factory):
            found += _sections(spec.default_factory, f"{key}.{spec.name}" if key else spec.name)
    return found


def test_every_section_of_a_run_declares_its_checks_and_writes_no_validate_of_its_own() -> None:
    sections = _sections(WMRLConfig)
    assert len(sections) >= 18  # the run, its 14 sections and the nested ones (vllm, tiny, cost, timing)
    for key, cls in sections:
        assert issubclass(cls, Section), key
        assert cls.validate is Section.validate, f"{cls.__name__} retypes validate()"
        assert cls.KEY == key, f"{cls.__name__}.KEY={cls.KEY!r}, but the run's config holds it at {key!r}"
        declared = [f for f in dataclasses.fields(cls) if f.metadata]
        assert declared, f"{cls.__name__} declares no check"
