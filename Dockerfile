# syntax=docker/dockerfile:1
# The reference runtime's image: gimletc installed with the project's pins, on a CPU base. Every container of the
# `gimletc` manifest target runs it (the driver's `gimletc serve`, each worker's `python -m compiler.runtime.worker`):
# the reference runtime computes on the host CPU whatever device a pool targets, so no vendor base is needed.
# The manifests name it gimletc:<package version> (RUNTIME_IMAGE in compiler/emit/k8s/pool_deployment.py).
#
# Build from the repository root, then push where the cluster pulls from (docs/cli/compile.md: "The reference runtime's image"):
#   docker build -t gimletc:0.1.0 .
#   docker tag gimletc:0.1.0 REGISTRY/gimletc:0.1.0 && docker push REGISTRY/gimletc:0.1.0
# `--build-arg BASE_IMAGE=...` builds on another Debian-based Python >= 3.10 image (a registry mirror, say).
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}

# The package version (pyproject.toml); tests/emit/test_k8s_manifests.py checks that they agree.
ARG GIMLETC_VERSION=0.1.0
LABEL org.opencontainers.image.title="gimletc" \
      org.opencontainers.image.version="${GIMLETC_VERSION}" \
      org.opencontainers.image.description="gimletc and its reference runtime (CPU)"

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /opt/gimletc/src
# torch first, in a layer of its own: the CPU build at the constraints file's pin (PyPI's Linux wheel is the
# multi-GB CUDA build, which the reference runtime does not use).
COPY requirements/constraints.txt requirements/constraints.txt
RUN pip install --index-url https://download.pytorch.org/whl/cpu -c requirements/constraints.txt torch

COPY pyproject.toml README.md ./
COPY compiler compiler
COPY backends backends
COPY cost_models cost_models
# The package with every pin of the constraints file; then the two commands the manifests run must start.
RUN pip install -c requirements/constraints.txt . \
    && gimletc --version \
    && python -m compiler.runtime.worker --help > /dev/null

RUN useradd --uid 1000 --create-home gimletc
USER 1000
WORKDIR /home/gimletc
CMD ["gimletc", "--help"]
