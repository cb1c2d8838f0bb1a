"""vLLM ``SamplingParams`` -> :class:`reasonserve.adapters.seeded.SeededParams`."""

from __future__ import annotations

from reasonserve.adapters.seeded import SeededParams, seeded_params

__all__ = ["from_vllm"]


def from_vllm(sampling_params) -> SeededParams | None:
    """The request's seeded params (``vllm_xargs`` -> ``extra_args["reasonserve_seed"]``), or
    None when it did not opt in. Raises ``InvalidArgumentError``/``InvalidTypeError`` (both
    ``ValueError``/``TypeError``) for a bad seed; vLLM answers those with HTTP 400."""
    if sampling_params is None:
        return None
    return seeded_params(
        sampling_params.extra_args,
        temperature=sampling_params.temperature,
        top_k=sampling_params.top_k,
        top_p=sampling_params.top_p,
        min_p=sampling_params.min_p,
    )


def validate(sampling_params) -> None:
    """``validate_params`` for both interfaces: vLLM turns ``ValueError`` into HTTP 400."""
    try:
        from_vllm(sampling_params)
    except TypeError as err:  # a non-int seed: still the client's fault
        raise ValueError(str(err)) from err
