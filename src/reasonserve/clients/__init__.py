"""Engine clients: the async interface the reasoning programs run on, and its
implementations for the embedded engine, OpenAI-compatible servers (vLLM, SGLang,
``reasonserve serve``) and the simulator. See ``docs/programs.md``."""

from reasonserve.clients.errors import (
    ClientError,
    HostError,
    HostRejectedError,
    MalformedResponseError,
    RequestTimeoutError,
    StreamDroppedError,
    TransportError,
    UnsupportedError,
)
from reasonserve.clients.protocol import (
    Capabilities,
    Chunk,
    EngineClient,
    GenerateRequest,
    GenerateResult,
    ProbeResult,
    ProgramProgress,
)
from reasonserve.clients.shims import OpenAIShim, SGLangShim, VLLMShim

__all__ = [
    "Capabilities",
    "Chunk",
    "ClientError",
    "EngineClient",
    "GenerateRequest",
    "GenerateResult",
    "HostError",
    "HostRejectedError",
    "MalformedResponseError",
    "OpenAIShim",
    "ProbeResult",
    "ProgramProgress",
    "RequestTimeoutError",
    "SGLangShim",
    "StreamDroppedError",
    "TransportError",
    "UnsupportedError",
    "VLLMShim",
]
