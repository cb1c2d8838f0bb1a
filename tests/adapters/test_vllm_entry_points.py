"""reasonserve's ``vllm.logits_processors`` entry point, loaded the way vLLM 0.33 loads
it: its Model Runner V2 loader accepts it (V2 subclasses only), and its V1 loader,
which constructs every entry-point class with V1's arguments, gets the V1 processor."""

import importlib.metadata
import sys
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


# never the reason vLLM fails to start -------------------------------------------------
@pytest.fixture
def fresh_entry():
    from reasonserve.adapters.vllm import entry

    entry.plugin_class.cache_clear()
    yield entry
    entry.plugin_class.cache_clear()


def _loaded_by_vllm(make_vllm_config):
    """What both of vLLM's loaders build from the installed entry point."""
    state = SimpleNamespace(device=torch.device("cpu"), max_num_reqs=4, vocab_size=32, all_token_ids=None,
                            prompt_len=None, prefill_len=None, total_len=None)  # fmt: skip
    v2 = [p for p in build_custom_logits_processors(make_vllm_config(), state, is_pooling_model=False)
          if "Seeded" in type(p).__name__]  # fmt: skip
    v1 = [p for p in build_logitsprocs(make_vllm_config(), torch.device("cpu"), False, is_pooling_model=False).all
          if "Seeded" in type(p).__name__]  # fmt: skip
    return v2, v1


@pytest.mark.parametrize("why", ["version", "import"])
def test_an_unsupported_vllm_or_a_broken_import_leaves_vllm_serving(why, fresh_entry, make_vllm_config,
                                                                     monkeypatch, caplog):  # fmt: skip
    if why == "version":
        monkeypatch.setattr(fresh_entry, "_installed_version", lambda: "0.35.1")
    else:  # the real processor's module cannot be imported in this process
        monkeypatch.setitem(sys.modules, "reasonserve.adapters.vllm.logits_v2", None)
    with caplog.at_level("WARNING", logger=fresh_entry.__name__):
        v2, v1 = _loaded_by_vllm(make_vllm_config)
    ours = [r.getMessage() for r in caplog.records if r.name == fresh_entry.__name__]
    assert len(ours) == 1  # one warning, though both loaders asked
    assert ("outside the supported range" if why == "version" else "loading it failed") in ours[0]
    assert len(v2) == 1 and isinstance(v2[0], V2Base) and not isinstance(v2[0], SeededSamplingPlugin)
    assert len(v1) == 1 and isinstance(v1[0], V1Base) and v1[0].is_argmax_invariant()
    logits = torch.randn(2, 32)
    assert v2[0].add_request(0, SamplingParams(extra_args={"reasonserve_seed": 1})) is False
    assert v2[0].apply(logits, None) is logits and v1[0].apply(logits) is logits
    bad = SamplingParams()
    bad.extra_args = {"reasonserve_seed": -5}
    type(v2[0]).validate_params(bad)  # nothing refused: as if the plugin were absent


def test_the_supported_range_is_checked_at_load(fresh_entry):
    assert fresh_entry.unsupported("0.33.0") is None and fresh_entry.unsupported("0.32.0") is None
    assert "outside" in fresh_entry.unsupported("0.31.9") and "outside" in fresh_entry.unsupported("0.34.0")
    assert fresh_entry.unsupported(None) == "vLLM is not installed"
    assert fresh_entry.plugin_class("0.33.0") is SeededSamplingPlugin
