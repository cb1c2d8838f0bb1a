"""SGLang's scheduler module in the light CPU environment.

``sglang.srt.managers.schedule_batch`` imports torchvision (for multimodal models) at
import time; its PyPI wheel needs CUDA's libraries, so ``.venv-sglang`` has none. For
that one import an inert stand-in is installed and then removed again (from
``sys.meta_path`` and ``sys.modules``): no torchvision code runs in the tests.
"""

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types


class _Inert:
    def __init__(self, *args, **kwargs):
        pass

    def __call__(self, *args, **kwargs):
        return _Inert()

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Inert()


def _attr(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return _Inert()


class _InertTorchvision(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] == "torchvision":
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        module = types.ModuleType(spec.name)
        module.__path__, module.__version__ = [], "0.0.0"
        module.__getattr__ = _attr
        return module

    def exec_module(self, module):
        pass


def schedule_batch():
    """``sglang.srt.managers.schedule_batch``, imported with the stand-in if needed."""
    if importlib.util.find_spec("torchvision") is not None:
        return importlib.import_module("sglang.srt.managers.schedule_batch")
    finder = _InertTorchvision()
    sys.meta_path.insert(0, finder)
    try:
        return importlib.import_module("sglang.srt.managers.schedule_batch")
    finally:
        sys.meta_path.remove(finder)
        for name in [m for m in sys.modules if m.split(".")[0] == "torchvision"]:
            del sys.modules[name]


def decode_batch(module, reqs, model_dir):
    """A ``ScheduleBatch`` of ``reqs`` whose ``prepare_for_decode`` runs SGLang's own code:
    SGLang's config is published from real ``ServerArgs`` (a config.json in
    ``model_dir``), the batch holds the fields that method reads, and only the KV-slot
    allocation (``alloc_for_decode``, a device memory pool) must be replaced by the
    caller (``monkeypatch.setattr(module, "alloc_for_decode", ...)``)."""
    import torch
    from sglang.srt import runtime_context
    from sglang.srt.server_args import ServerArgs
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    runtime_context.publish(ServerArgs(model_path=str(model_dir), device="cpu", skip_tokenizer_init=True),
                            role="scheduler")  # fmt: skip
    lens = torch.tensor([len(r.full_untruncated_fill_ids) for r in reqs])
    batch = module.ScheduleBatch.__new__(module.ScheduleBatch)
    fields = {
        "reqs": list(reqs), "spec_algorithm": SpeculativeAlgorithm.NONE, "beam_tail": None,
        "sampling_info": types.SimpleNamespace(penalizer_orchestrator=types.SimpleNamespace(is_required=False)),
        "model_config": types.SimpleNamespace(is_encoder_decoder=False), "seq_lens": lens,
        "seq_lens_cpu": lens.clone(), "orig_seq_lens": lens.clone(), "hisparse_coordinator": None,
        "enable_overlap": True, "attn_cp_metadata": None,
    }  # fmt: skip
    for name, value in fields.items():
        setattr(batch, name, value)
    return batch
