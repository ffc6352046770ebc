"""A page's families under the names the configuration gives them, whichever form the page serves them under.

The scrape path asks for ``text/plain; version=0.0.4`` (:data:`.endpoint.ACCEPT`), which prometheus_client answers
with the names as registered (``vllm:x``: its classic text format escapes only names that are not classic), so an
engine served by prometheus_client is read under its own names. Ray's metrics agent serves vLLM's
``RayPrometheusStatLogger`` metrics as ``ray_vllm_x``, and an exporter may serve the escaped ``vllm_x``
(:func:`otel_bridge.prometheus_names.stored_name`): a configured ``vllm:x`` is read under those too, its samples
renamed to the configured name, so records keep the configured keys. A page serving a family under its configured name
is read under that name alone; otherwise under the first form in :data:`~otel_bridge.prometheus_names.NAME_FORMS`
order it serves.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from otel_bridge.producers.scrape._internal.readings import Families
from otel_bridge.prometheus import ExpositionFamily
from otel_bridge.prometheus_names import NAME_FORMS, NameForm, name_forms, stored_name

__all__ = ["as_configured", "page_forms"]

PageForms = Mapping[str, tuple[str, NameForm]]
"""A name a page may serve -> (the configured name it stands for, its form)."""


def page_forms(names: Iterable[str]) -> dict[str, tuple[str, NameForm]]:
    """Every form of each configured family name in ``names`` (config-style: a counter with ``_total``, a histogram
    by its base name): the names to parse a page for."""
    return {stored_name(name, form): (name, form) for name in names for form in name_forms(name)}


def as_configured(families: Families, forms: PageForms) -> Families:
    """``families`` (parsed for the names of ``forms``) keyed and named by the configured names (see the module
    docstring)."""
    out: Families = {}
    rank = {form: i for i, form in enumerate(NAME_FORMS)}
    for key in sorted(families, key=lambda k: rank[forms.get(k, (k, "served"))[1]]):
        configured, form = forms.get(key, (key, "served"))
        if configured not in out:
            out[configured] = families[key] if form == "served" else _renamed(families[key], configured, form)
    return out


def _renamed(family: ExpositionFamily, configured: str, form: NameForm) -> ExpositionFamily:
    """``family`` (served in ``form``) with its name and its samples' names the configured ones: every sample name
    starts with the family's base (``_total`` aside), which the form changes alike."""
    base = configured.removesuffix("_total")
    prefix = stored_name(base, form)
    samples = tuple(
        replace(s, name=base + s.name[len(prefix) :]) if s.name.startswith(prefix) else s for s in family.samples
    )
    return replace(family, name=configured, samples=samples)
