"""[Note: KV memory]: the KV cache's room is the engine's rule on the card's reported capacity.

The three Gaudi rows the memory plan used to refuse (GAU-01, GAU-02, GAU-16 of cost_models/data/measurements_gaudi.csv)
are static batches that optimum-habana ran: it allocates the KV cache for exactly batch x (input + output) tokens,
on cards whose runtime reports 96 GiB (Gaudi 2) and 128 GiB (Gaudi 3). Expectations are bounds from the published
model shape and the cards' sizes, not the code's own formula.
"""

from __future__ import annotations

import pytest

from compiler.driver import estimate
from compiler.ir.errors import BadInput
from compiler.ir.precision import Precision

GIB = 2**30
#: Llama-2-7B (config.json): 32 layers, 32 KV heads of 128; fp8 KV = 1 byte per value, K and V.
KV_BYTES_PER_TOKEN_FP8 = 2 * 32 * 32 * 128
#: Llama-2-7B has 6.74e9 parameters: at fp8 its weights are between 6.5 and 7 GB whatever stays in bf16 embeddings.
WEIGHTS_LO, WEIGHTS_HI = 6.5e9, 7.0e9 + 2 * 32000 * 4096  # + bf16 embedding and head at most
RESERVE = 0.02  # the memory plan's runtime reserve (cost_models.serving.RUNTIME_RESERVE_FRACTION)

#: (id, device, card bytes as hl-smi reports them, batch, input, output) of the three rows.
ROWS = [("GAU-01", "intel-gaudi2", 96 * GIB, 1230, 128, 128),
        ("GAU-02", "intel-gaudi2", 96 * GIB, 81, 2048, 2048),
        ("GAU-16", "intel-gaudi3", 128 * GIB, 217, 128, 2048)]


def _estimate(device, batch, input_len, output_len, engine):
    return estimate("llama-2-7b", device=device, count=1, tp=1, pp=1, precision=Precision.of("fp8"),
                    input_len=input_len, output_len=output_len, batch=batch, concurrency=None, engine=engine)


@pytest.mark.parametrize("row_id,device,card,batch,input_len,output_len", ROWS, ids=[r[0] for r in ROWS])
def test_optimum_habana_static_batches_fit_the_cards_reported_memory(row_id, device, card, batch, input_len,
                                                                     output_len):
    kv = batch * (input_len + output_len) * KV_BYTES_PER_TOKEN_FP8
    assert card * (1 - RESERVE) - WEIGHTS_HI >= kv, "the arithmetic says the batch fits the card"
    result = _estimate(device, batch, input_len, output_len, "optimum-habana")
    assert result.memory_capacity_bytes == card
    assert result.fits


def test_a_free_memory_share_or_decimal_gigabytes_would_refuse_them():
    """Either old assumption alone refuses a measured row: 90% of the free memory (GAU-02, GAU-16) or the white
    papers' 128 GB read as 128e9 bytes (GAU-16). The share is an engine's default, not a limit (vLLM
    --gpu-memory-utilization raises it), so a static batch beyond it is predicted with a warning that names the
    flags; one beyond the card's whole memory is refused."""
    import math

    _, _, card2, b2, i2, o2 = ROWS[1]
    assert 0.9 * (card2 * (1 - RESERVE) - WEIGHTS_LO) < b2 * (i2 + o2) * KV_BYTES_PER_TOKEN_FP8
    generic = _estimate("intel-gaudi2", b2, i2, o2, "generic")
    assert generic.fits and "--gpu-memory-utilization" in generic.warnings[0]
    beyond = math.ceil((card2 * (1 - RESERVE) - WEIGHTS_LO) / ((i2 + o2) * KV_BYTES_PER_TOKEN_FP8)) + 1
    with pytest.raises(BadInput, match="even with the KV cache taking all the memory"):
        _estimate("intel-gaudi2", beyond, i2, o2, "generic")
    _, _, _, b16, i16, o16 = ROWS[2]
    assert 128e9 * (1 - RESERVE) - WEIGHTS_LO < b16 * (i16 + o16) * KV_BYTES_PER_TOKEN_FP8
