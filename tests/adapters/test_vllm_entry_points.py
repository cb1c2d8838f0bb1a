"""reasonserve's ``vllm.logits_processors`` entry point, loaded the way vLLM 0.33 loads
it: its Model Runner V2 loader accepts it (V2 subclasses only), and its V1 loader,
which constructs every entry-point class with V1's arguments, gets the V1 processor."""

import importlib.metadata
from types import SimpleNamespace

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed here (make test-adapters builds .venv-vllm)")

import torch
from vllm import SamplingParams
from vllm.exceptions import VLLMValidationError
from vllm.v1.sample.logits_processor import LOGITSPROCS_GROUP, build_logitsprocs
from vllm.v1.sample.logits_processor import LogitsProcessor as V1Base
from vllm.v1.worker.gpu.sample.logits_processor import LogitsProcessor as V2Base
from vllm.v1.worker.gpu.sample.logits_processor import (
    build_custom_logits_processors,
    build_custom_logits_processors_params_validator,
)

from reasonserve.adapters.vllm import SeededSamplingLogitsProcessorV1, SeededSamplingPlugin


def test_the_entry_point_names_a_v2_class_never_a_v1_only_one():
    [ep] = [ep for ep in importlib.metadata.entry_points(group=LOGITSPROCS_GROUP) if ep.name.startswith("reasonserve")]
    cls = ep.load()
    assert cls is SeededSamplingPlugin
    assert issubclass(cls, V2Base)


def test_the_v2_loader_discovers_it_and_its_validator_runs_at_admission():
    validate = build_custom_logits_processors_params_validator(None)
    validate(SamplingParams(extra_args={"reasonserve_seed": 5}))
    bad = SamplingParams()
    bad.extra_args = {"reasonserve_seed": -5}
    with pytest.raises(VLLMValidationError, match="reasonserve_seed"):
        validate(bad)


def test_the_v2_loader_builds_a_v2_processor(make_vllm_config):
    # The real RequestState pins host memory, which needs an accelerator; the loader
    # only reads these attributes from it.
    state = SimpleNamespace(device=torch.device("cpu"), max_num_reqs=4, vocab_size=32, all_token_ids=None,
                            prompt_len=None, prefill_len=None, total_len=None)  # fmt: skip
    built = build_custom_logits_processors(make_vllm_config(), state, is_pooling_model=False)
    ours = [p for p in built if isinstance(p, SeededSamplingPlugin)]
    assert len(ours) == 1 and isinstance(ours[0], V2Base)


def test_the_v1_loader_builds_the_v1_processor(make_vllm_config):
    procs = build_logitsprocs(make_vllm_config(), torch.device("cpu"), False, is_pooling_model=False)
    ours = [p for p in procs.all if isinstance(p, SeededSamplingLogitsProcessorV1)]
    assert len(ours) == 1 and isinstance(ours[0], V1Base)
    assert ours[0] in list(procs.non_argmax_invariant)  # applied for greedy requests too
