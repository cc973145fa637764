"""An external endpoint: a vendor's system (Cerebras, d-Matrix) that serves an OpenAI-compatible API itself;
gimletc starts no process for it, moves no KV to or from it and fronts it with no router of an engine's."""

from __future__ import annotations

from backends.engines.base import ServingEngine


class External(ServingEngine):
    name = "external"
    display = "external endpoint"
    launchable = False


ENGINE = External()
