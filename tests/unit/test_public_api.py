"""The package's face: every typed error of ``otel_bridge.errors`` is exported by ``otel_bridge``, so a caller catches
any of them with ``from otel_bridge import ...`` and never reaches into the module that defines it."""

from __future__ import annotations

import inspect
import re

import otel_bridge
import otel_bridge.errors


def _error_classes() -> set[str]:
    return {
        name
        for name, value in vars(otel_bridge.errors).items()
        if inspect.isclass(value) and issubclass(value, BaseException) and value.__module__ == "otel_bridge.errors"
    }


def test_every_error_class_is_exported_by_the_package() -> None:
    defined = _error_classes()
    assert "QueryTooLongError" in defined  # the scan found the classes
    assert sorted(defined - set(otel_bridge.__all__)) == []
    for name in defined:
        assert getattr(otel_bridge, name) is getattr(otel_bridge.errors, name), name


def test_every_error_class_is_in_the_error_tree_of_the_docstring() -> None:
    tree = (otel_bridge.errors.__doc__ or "").partition("Hierarchy::")[2]
    assert sorted(name for name in _error_classes() if not re.search(rf"\b{name}\b", tree)) == []
