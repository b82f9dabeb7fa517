"""What PromQL expressions refer to, and what the running code exposes, for the tests of
``deploy/``: metric names (with the suffixes the client adds) and their label names."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from prometheus_client.metrics import MetricWrapperBase

from consumers.runtime import metrics
from consumers.runtime.metrics import REGISTRY

__all__ = ["TARGET_LABELS", "Refs", "exposed", "family_of", "references"]

# Labels Prometheus adds to every scraped series (the target's, and Kubernetes discovery's
# usual relabelling), next to the labels the code defines.
TARGET_LABELS = frozenset({"instance", "job", "namespace", "pod", "container", "node"})

_SUFFIXES = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "summary": ("", "_sum", "_count", "_created"),
    "info": ("_info",),
}

FUNCTIONS = frozenset(
    [
        "abs",
        "absent",
        "absent_over_time",
        "avg",
        "avg_over_time",
        "bottomk",
        "ceil",
        "changes",
        "clamp",
        "clamp_max",
        "clamp_min",
        "count",
        "count_over_time",
        "count_values",
        "day_of_month",
        "day_of_week",
        "delta",
        "deriv",
        "exp",
        "floor",
        "group",
        "histogram_quantile",
        "holt_winters",
        "idelta",
        "increase",
        "irate",
        "label_join",
        "label_replace",
        "last_over_time",
        "ln",
        "log10",
        "log2",
        "max",
        "max_over_time",
        "min",
        "min_over_time",
        "predict_linear",
        "quantile",
        "quantile_over_time",
        "rate",
        "resets",
        "round",
        "scalar",
        "sort",
        "sort_desc",
        "sqrt",
        "stddev",
        "stddev_over_time",
        "stdvar",
        "sum",
        "sum_over_time",
        "time",
        "timestamp",
        "topk",
        "vector",
    ]
)
KEYWORDS = frozenset(
    [
        "and",
        "or",
        "unless",
        "bool",
        "offset",
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
        "inf",
        "nan",
    ]
)


def exposed() -> dict[str, frozenset[str]]:
    """Every sample name the registry exposes, with the label names the code gives it."""
    labels: dict[str, frozenset[str]] = {}
    for value in vars(metrics).values():
        if isinstance(value, MetricWrapperBase):
            # the client keeps the label names it was built with in ``_labelnames``
            labels[value._name] = frozenset(value._labelnames)
    names: dict[str, frozenset[str]] = {}
    for family in REGISTRY.collect():
        base = family.name
        own = labels.get(base, frozenset())
        if family.type == "info":
            own = frozenset({"version", "python"})
        for suffix in _SUFFIXES[family.type]:
            extra = {"le"} if suffix == "_bucket" else set()
            names[base + suffix] = own | extra
    return names


def family_of(name: str) -> str:
    """The family a sample name belongs to (``auditrec_probes_total`` → ``auditrec_probes``)."""
    for family in REGISTRY.collect():
        for suffix in _SUFFIXES[family.type]:
            if name == family.name + suffix:
                return family.name
    return name


@dataclass
class Refs:
    metrics: set[str] = field(default_factory=set)
    functions: set[str] = field(default_factory=set)
    unknown: set[str] = field(default_factory=set)
    matchers: dict[str, set[str]] = field(default_factory=dict)  # metric -> label names
    grouping: set[str] = field(default_factory=set)  # by/without/on/ignoring label names


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_VARIABLE = re.compile(r"\$\{[^}]*\}|\$\w+")
_SELECTOR = re.compile(r"([A-Za-z_:][\w:]*)?\s*\{([^}]*)\}")
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
_RANGE = re.compile(r"\[[^\]]*\]")
_OFFSET = re.compile(r"\boffset\s+-?\w+")
_TOKEN = re.compile(r"(?P<num>\d[\w.]*)|(?P<id>[A-Za-z_:][\w:]*)(?P<call>\s*\()?")


def references(expr: str) -> Refs:
    """The metric names, functions and label names of a PromQL expression (Grafana's
    ``$variables`` allowed); an identifier that is none of these lands in ``unknown``."""
    refs = Refs()
    text = _VARIABLE.sub("1", expr)
    placeholders: list[str] = []

    def selector(match: re.Match[str]) -> str:
        name = match.group(1) or ""
        body = _STRING.sub('""', match.group(2))
        labels = {m.split("=")[0].split("!")[0].strip() for m in body.split(",") if m.strip()}
        labels.discard("")
        refs.matchers.setdefault(name, set()).update(labels)
        placeholders.append(name)
        return f" {name} "

    text = _STRING.sub('""', text)
    text = _SELECTOR.sub(selector, text)
    for _, names in _GROUPING.findall(text):
        refs.grouping.update(n.strip() for n in names.split(",") if n.strip())
    text = _GROUPING.sub(" ", text)
    text = _RANGE.sub(" ", text)
    text = _OFFSET.sub(" ", text)
    for token in _TOKEN.finditer(text):
        word = token.group("id")
        if word is None:
            continue
        if word in KEYWORDS:
            continue
        if token.group("call"):
            (refs.functions if word in FUNCTIONS else refs.unknown).add(word)
        else:
            refs.metrics.add(word)
    return refs
