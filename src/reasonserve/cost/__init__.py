"""What a serving step costs, without running it: accelerator and model presets, the
roofline cost model (compute vs memory time of a step, KV copies and migrations) and a
cost model fitted from measured engine steps. Below the policies (FlashTTS's KV allocator
plans with the roofline) and the simulators and clients that time steps with it."""

from reasonserve.cost.engine_steps import measure_engine_steps
from reasonserve.cost.hardware import HARDWARE, HardwareSpec
from reasonserve.cost.model_spec import MODELS, ModelSpec
from reasonserve.cost.profile import (
    ProfileCostModel,
    ProfileRow,
    ProfileTable,
    fit_profile,
    load_profile,
    save_profile,
)
from reasonserve.cost.roofline import RooflineCostModel

__all__ = [
    "HARDWARE",
    "MODELS",
    "HardwareSpec",
    "ModelSpec",
    "ProfileCostModel",
    "ProfileRow",
    "ProfileTable",
    "RooflineCostModel",
    "fit_profile",
    "load_profile",
    "measure_engine_steps",
    "save_profile",
]
