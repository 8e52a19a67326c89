"""Annotation templates: Prometheus' Go templates that print a figure of the alert's replica
(or of the whole fleet) when the alert is sent, so a page carries the numbers llmtop would show.
Pure: strings in, strings out.
"""

from __future__ import annotations

from typing import Literal

from llmtop.core.alerts.spec import AlertSpec

Shown = Literal["count", "seconds", "frac", "rate", "tokens", "number"]

_FORMATS: dict[Shown, str] = {
    "count": 'printf "%.0f"',
    "seconds": "humanizeDuration",
    "frac": "humanizePercentage",
    "rate": 'printf "%.1f"',
    "tokens": 'printf "%.0f"',
    "number": 'printf "%.2f"',
}


def shown(how: Shown) -> str:
    """The pipeline that prints a value as llmtop's format would."""
    return _FORMATS[how]


def figure(
    spec: AlertSpec, series: str, how: Shown, of_replica: bool = True, which: str = ""
) -> str:
    """`series` of the alert's replica (of the replica the template value `which` names, or
    a series with no labels when not `of_replica`), or n/a."""
    r = spec.r
    which = which or f"$labels.{r}"
    query = f"printf `{series}{{{r}=%q}}` {which}" if of_replica else f"`{series}`"
    return _shown_query(query, how)


def computed(spec: AlertSpec, expr: str, how: Shown, fallback: str = "n/a") -> str:
    """A PromQL expression over the alert's replica (`%[1]q` stands for its label's value,
    quoted), evaluated when the alert is sent: arithmetic a template cannot do itself."""
    return _shown_query(f"printf `{expr}` $labels.{spec.r}", how, fallback)


def _shown_query(query: str, how: Shown, fallback: str = "n/a") -> str:
    """The first value `query` answers, shown; `fallback` when none or NaN (unknown)."""
    return (
        f"{{{{ with {query} | query }}}}{{{{ $v := . | first | value }}}}"
        f"{{{{ if eq $v $v }}}}{{{{ $v | {shown(how)} }}}}{{{{ else }}}}{fallback}{{{{ end }}}}"
        f"{{{{ else }}}}{fallback}{{{{ end }}}}"
    )


def value(how: Shown) -> str:
    """The alert's own value."""
    return f"{{{{ $value | {shown(how)} }}}}"


def replica(spec: AlertSpec) -> str:
    """The replica's name."""
    return f"{{{{ $labels.{spec.r} }}}}"


def open_replica(spec: AlertSpec) -> str:
    """The llmtop command that opens this replica: its /metrics address when Prometheus names
    it by instance (vLLM serves /metrics on its API port), else this Prometheus, narrowed to it."""
    r = spec.r
    if r == "instance":
        return "llmtop --vllm http://{{ $labels.instance }}"
    inside = ",".join(x for x in (spec.vllm_matchers, f'{r}="{{{{ $labels.{r} }}}}"') if x)
    return f"llmtop --prometheus {{{{ externalURL }}}} --selector '{{{inside}}}'"


def open_fleet(spec: AlertSpec) -> str:
    """The llmtop command that opens every replica under the selector."""
    selector = f" --selector '{{{spec.vllm_matchers}}}'" if spec.vllm_matchers else ""
    return f"llmtop --prometheus {{{{ externalURL }}}}{selector} --replica-label {spec.r}"


def open_gateway(spec: AlertSpec) -> str:
    """llmtop on this gateway and the replicas it sends to (its own list of them)."""
    r = spec.r
    replicas = (
        f"{{{{ range printf `llmtop_gateway_replica_in_flight{{{r}=%q}}` $labels.{r} | query }}}}"
        " --vllm {{ .Labels.replica }}{{ end }}"
    )
    where = f"http://{{{{ $labels.{r} }}}}" if r == "instance" else "<its URL>"
    return f"llmtop{replicas} --gateway {where}"
