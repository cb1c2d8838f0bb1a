"""The FlashTTS paper's generator/verifier pairs on an RTX 4090 (§6.1), for the beam-search
simulator. Shapes are from the models' published ``config.json``:

* Qwen2.5-Math-1.5B (generator) and Skywork-o1-Open-PRM-Qwen-2.5-1.5B (verifier, the same
  Qwen2.5-1.5B shape): 28 layers, hidden 1536, 2 KV heads x 128, 1.54 B parameters.
* Qwen2.5-Math-7B: 28 layers, hidden 3584, 4 KV heads x 128, 7.62 B parameters.
* Math-Shepherd-Mistral-7B-PRM (Mistral-7B shape): 32 layers, hidden 4096, 8 KV heads x 128,
  7.24 B parameters.

KV budget ``M`` = the GPU memory fraction the paper gives both models (40% for 1.5B+1.5B,
90% for the other two) minus both models' BF16 weights; activations and the CUDA context
are not modelled.

The baseline runs the two models as separate vLLM instances (§6.1), each with its own
``gpu_memory_utilization`` ``f``: its KV is ``f`` of the GPU minus its weights
(:meth:`BeamSetting.baseline_kv_bytes`). For 1.5B+7B the FlashTTS artifact's baseline gives
the generator 0.19 and the verifier 0.71 (a third-party analysis of the artifact's
configs, "FastTTS-AE Architecture Analysis" §8; 0.19 + 0.71 = the paper's 90%). For the two
other pairs no split is published: the baseline splits ``M`` evenly (for 1.5B+1.5B at 40%
that is 0.20 + 0.20).
"""

from __future__ import annotations

from dataclasses import dataclass

from reasonserve.core.errors import InvalidArgumentError
from reasonserve.cost.hardware import HARDWARE, HardwareSpec
from reasonserve.cost.model_spec import ModelSpec
from reasonserve.cost.roofline import RooflineCostModel

__all__ = ["BEAM_MODELS", "BEAM_SETTINGS", "BeamSetting"]

BEAM_MODELS = {
    "qwen2.5-math-1.5b": ModelSpec("qwen2.5-math-1.5b", 1.54e9, 28, 1536, 2, 128),
    "qwen2.5-math-7b": ModelSpec("qwen2.5-math-7b", 7.62e9, 28, 3584, 4, 128),
    "skywork-prm-1.5b": ModelSpec("skywork-prm-1.5b", 1.54e9, 28, 1536, 2, 128),
    "math-shepherd-7b": ModelSpec("math-shepherd-7b", 7.24e9, 32, 4096, 8, 128),
}


@dataclass(frozen=True, slots=True)
class BeamSetting:
    name: str
    generator: ModelSpec
    verifier: ModelSpec
    hardware: HardwareSpec
    memory_fraction: float
    baseline_fractions: tuple[float, float] | None = None  # (generator, verifier) of the GPU; None: even

    def __post_init__(self) -> None:
        f = self.memory_fraction
        if isinstance(f, bool) or not isinstance(f, (int, float)) or not 0 < f <= 1:
            raise InvalidArgumentError(f"memory_fraction must be in (0, 1], got {f!r}")
        if self.kv_bytes <= 0:
            raise InvalidArgumentError(
                f"setting {self.name!r}: both models' weights do not fit in {f:.0%} of {self.hardware.name}"
            )
        if self.baseline_fractions is not None:
            self._check_fractions(self.baseline_fractions)

    def _check_fractions(self, fractions: object) -> None:
        if not (
            isinstance(fractions, tuple)
            and len(fractions) == 2
            and all(isinstance(x, (int, float)) and not isinstance(x, bool) and 0 < x <= 1 for x in fractions)
        ) or sum(fractions) > self.memory_fraction + 1e-9:
            raise InvalidArgumentError(
                f"setting {self.name!r}: baseline_fractions must be two numbers in (0, 1] summing to at "
                f"most memory_fraction={self.memory_fraction}, got {fractions!r}"
            )
        if min(self.baseline_kv_bytes()) <= 0:
            raise InvalidArgumentError(
                f"setting {self.name!r}: a model's weights do not fit in its baseline fraction {fractions!r}"
            )

    def baseline_kv_bytes(self) -> tuple[float, float]:
        """(generator, verifier) KV of the baseline's two vLLM instances: each its fraction of
        the GPU minus its weights, or ``M`` split evenly when no fractions are given."""
        if self.baseline_fractions is None:
            return self.kv_bytes / 2, self.kv_bytes / 2
        f_gen, f_ver = self.baseline_fractions
        memory = self.hardware.memory_bytes
        return (memory * f_gen - self.generator.weight_bytes, memory * f_ver - self.verifier.weight_bytes)

    @property
    def kv_bytes(self) -> float:
        """M: the KV budget the two models share."""
        used = self.generator.weight_bytes + self.verifier.weight_bytes
        return self.hardware.memory_bytes * self.memory_fraction - used

    def costs(self) -> tuple[RooflineCostModel, RooflineCostModel]:
        """(generator, verifier) roofline cost models with the simulator's default constants."""
        return RooflineCostModel(self.hardware, self.generator), RooflineCostModel(
            self.hardware, self.verifier
        )


BEAM_SETTINGS = {
    "1.5b+1.5b": BeamSetting("1.5b+1.5b", BEAM_MODELS["qwen2.5-math-1.5b"], BEAM_MODELS["skywork-prm-1.5b"],
                             HARDWARE["rtx4090"], 0.4),
    "1.5b+7b": BeamSetting("1.5b+7b", BEAM_MODELS["qwen2.5-math-1.5b"], BEAM_MODELS["math-shepherd-7b"],
                           HARDWARE["rtx4090"], 0.9, (0.19, 0.71)),
    "7b+1.5b": BeamSetting("7b+1.5b", BEAM_MODELS["qwen2.5-math-7b"], BEAM_MODELS["skywork-prm-1.5b"],
                           HARDWARE["rtx4090"], 0.9),
}  # fmt: skip
