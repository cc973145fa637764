"""Weight-only dequantisation ([Note: weight-only dequantisation] in cost_models/roofline.py)."""

import pytest

from backends.registry import device
from cost_models.derates import Derate
from cost_models.roofline import compute_peak, dequant_s_per_byte


def test_fp4_weights_on_hopper_pay_vector_time_per_byte():
    derate = Derate(compute_eff=0.7, mem_eff=0.9, vector_eff=0.3)
    for gpu in ("nvidia-h100-sxm", "nvidia-h200-sxm"):  # same SMs: the same time whatever the HBM
        spec = device(gpu)
        assert compute_peak(spec, "fp4")[1] == "bf16"
        # 4 operations per weight, 2 weights per byte, at 67 TFLOPS FP32 x 0.3
        assert dequant_s_per_byte(spec, "fp4", "bf16", derate) == pytest.approx(4 * 2 / (67e12 * 0.3))


def test_no_conversion_no_charge():
    derate = Derate(compute_eff=0.7, mem_eff=0.9)
    h100 = device("nvidia-h100-sxm")
    assert dequant_s_per_byte(h100, "bf16", "bf16", derate) == 0.0
    assert dequant_s_per_byte(h100, "fp8", "fp8", derate) == 0.0
    b200 = device("nvidia-b200")  # native FP4 matmuls: nothing to convert
    assert dequant_s_per_byte(b200, "fp4", compute_peak(b200, "fp4")[1], derate) == 0.0
