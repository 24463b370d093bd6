# syntax=docker/dockerfile:1
# The streamgnn image: every service of docker-compose.yml runs it (`streamgnn <command>`).
#   docker build -t streamgnn .                                   # CPU torch (default)
#   docker build -t streamgnn:cuda --build-arg TORCH_VARIANT=cu126 .   # CUDA torch for the NCCL profile
# Layers from slowest-changing to fastest: system packages, torch, the torch-scatter/torch-sparse build
# (about 25 minutes on 2 cores, cached in its own layer), the other dependencies, then the source.
ARG PYTHON_VERSION=3.11
FROM python:${PYTHON_VERSION}-slim

ARG TORCH_VERSION=2.13.0
ARG TORCH_VARIANT=cpu
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/${TORCH_VARIANT}
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 OMP_WAIT_POLICY=passive PYTHONUNBUFFERED=1

RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential curl \
 && rm -rf /var/lib/apt/lists/*

RUN pip install --index-url ${TORCH_INDEX_URL} torch==${TORCH_VERSION} && pip install numpy

# torch-scatter/torch-sparse (PyTorch Geometric Temporal needs them) have no wheels for current torch:
# built here against the torch above, in a layer of its own so a source change never rebuilds them.
RUN FORCE_CUDA=0 pip wheel --no-build-isolation --no-deps -w /wheels torch-scatter==2.1.2 torch-sparse==0.6.18 \
 && pip install --no-deps /wheels/*.whl

WORKDIR /app
# Dependencies from pyproject.toml alone, so they are cached until it changes.
COPY pyproject.toml README.md ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml','rb'))['project']['dependencies']))" \
      > /tmp/requirements.txt \
 && pip install -r /tmp/requirements.txt "torch==${TORCH_VERSION}" --extra-index-url ${TORCH_INDEX_URL}

COPY . .
RUN pip install --no-deps . && streamgnn --help > /dev/null

EXPOSE 8000 9100
CMD ["streamgnn", "--help"]
