"""Serving engines as a backend runs them: which engine, on which platform build, from which image. Stdlib only.

A backend lists the public serving engines its devices run (`Backend.engines`,
first the default for a pool whose cluster entry names ``engine: generic``).
Each `EnginePlatform` is deployment data with a source: the engine and the
release the launch specs are written for, the platform build (in-tree CUDA or
ROCm, the vllm-neuron or vllm-gaudi plugin, vLLM's CPU build, or an external
OpenAI-compatible endpoint), the container image, the environment the engine
needs on that platform, and where the engine registers its KV cache for a
connector (``kv_buffer_device``: the accelerator's memory, or host memory).

The engine itself (its flags, router, connectors) is its module in
`backends.engines`, found by ``engine``; `backends.registry` checks that every
backend's platforms name a registered engine.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class EnginePlatform:
    """One engine on one platform build. ``image`` None: no public image; the cluster entry must name one."""

    engine: str  # a `backends.engines` name (``external``: a system that serves an OpenAI-compatible API itself)
    platform: str  # cuda, rocm, neuron, gaudi, cpu, external
    version: str  # the release the launch flags are written for (and checked against, for vLLM on CPU)
    image: str | None
    kv_buffer_device: str | None  # where KV is registered for transfer: "cuda" (device memory) or "cpu" (host)
    source: str  # where the image and the platform's support are documented
    env: tuple[tuple[str, str], ...] = ()  # environment the engine needs on this platform
    plugin: str | None = None  # the out-of-tree platform plugin package, where the engine needs one
    kv_layout: str = "NHD"  # the KV page layout the engine's attention backend keeps on this platform
    kv_block_size: int = 16  # tokens per KV block the engine uses on this platform by default
    static_shapes: bool = False  # runs programs compiled per bucket of lengths, padded ([Note: buckets])
