"""Every HTTP body the SGLang client shim sends, checked against the installed SGLang:
top-level keys against the fields of ``GenerateReqInput`` / ``AbortReq`` (read from
``io_struct.py`` with ``ast``: importing it needs torchvision, whose wheel needs CUDA),
``sampling_params`` through SGLang's real ``SamplingParams`` (construct, normalize,
verify), ``/tokenize`` through its real ``TokenizeRequest``."""

import ast
import importlib.util
import pathlib

import pytest

pytest.importorskip("sglang", reason="SGLang is not installed here (make test-adapters builds .venv-sglang)")

from sglang.srt.entrypoints.openai.protocol import TokenizeRequest
from sglang.srt.sampling.sampling_params import SamplingParams
from tokenizers import Tokenizer, models, pre_tokenizers

from reasonserve.clients import GenerateRequest, SGLangShim

VOCAB = 1000
CASES = {
    "token ids, seeded": GenerateRequest((5, 6, 7), max_tokens=12, temperature=0.7, top_p=0.9, seed=11,
                                         stop=("\n\n",), priority=3, request_id="rs-7",
                                         extra={"reasonserve_seed": 99}),
    "text, greedy": GenerateRequest("2+2=", temperature=0.0),
}


def _tokenizer() -> Tokenizer:
    """A real (word-level) tokenizer: SGLang measures stop strings with it."""
    tok = Tokenizer(models.WordLevel(vocab={"[UNK]": 0}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return tok


def _dataclass_fields(class_name: str) -> set[str]:
    """Annotated fields of ``class_name`` and of its bases defined in the same file."""
    origin = importlib.util.find_spec("sglang.srt.managers.io_struct").origin
    classes = {n.name: n for n in ast.parse(pathlib.Path(origin).read_text()).body if isinstance(n, ast.ClassDef)}
    fields: set[str] = set()
    todo = [class_name]
    while todo:
        node = classes[todo.pop()]
        fields |= {n.target.id for n in node.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
        todo += [b.id for b in node.bases if isinstance(b, ast.Name) and b.id in classes]
    assert fields, f"no fields found on {class_name}: io_struct.py changed shape"
    return fields


@pytest.mark.parametrize("low_first", [False, True])
@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("name", list(CASES))
def test_generate_bodies_fit_sglang(name, stream, low_first):
    req = CASES[name]
    path, body = SGLangShim(low_priority_values_first=low_first).payload(req, stream=stream)
    assert path == "/generate"
    unknown = sorted(set(body) - _dataclass_fields("GenerateReqInput"))
    assert not unknown, f"SGLang's GenerateReqInput has no {unknown}"
    params = SamplingParams(**body["sampling_params"])
    params.normalize(_tokenizer())
    params.verify(VOCAB)
    assert params.max_new_tokens == req.max_tokens
    assert params.sampling_seed == req.seed
    assert (params.custom_params or {}) == dict(req.extra)
    assert body.get("rid") == req.request_id
    assert body["stream"] is stream
    if req.priority:
        assert body["priority"] == (-req.priority if low_first else req.priority)
    if req.token_prompt:
        assert body["input_ids"] == list(req.prompt)
    else:
        assert body["text"] == req.prompt


def test_abort_bodies_fit_sglang():
    path, body = SGLangShim().abort_payload("rs-7")
    assert path == "/abort_request"
    assert set(body) <= _dataclass_fields("AbortReq")
    assert body == {"rid": "rs-7"}


def test_tokenize_bodies_are_valid_tokenize_requests():
    path, body = SGLangShim().tokenize_payload("hello")
    assert path == "/tokenize"
    assert not set(body) - set(TokenizeRequest.model_fields)
    assert TokenizeRequest.model_validate(body).add_special_tokens is False


def test_the_seeded_shim_names_the_processor_that_sglang_unpickles_and_runs():
    from sglang.srt.sampling.custom_logit_processor import CustomLogitProcessor

    from reasonserve.adapters.sglang import SeededSamplingProcessor, SeededSGLangShim

    shim = SeededSGLangShim(processor=SeededSamplingProcessor.to_str())
    _, body = shim.payload(CASES["token ids, seeded"], stream=False)
    assert not set(body) - _dataclass_fields("GenerateReqInput")
    assert isinstance(CustomLogitProcessor.from_str(body["custom_logit_processor"]), SeededSamplingProcessor)
    assert body["sampling_params"]["custom_params"] == {"reasonserve_seed": 99}
    _, plain = shim.payload(CASES["text, greedy"], stream=False)
    assert "custom_logit_processor" not in plain  # not opted in: SGLang samples as usual
