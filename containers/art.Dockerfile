# RL Systems Bench: art backend image. Build with `bench build --backend art`, which passes the hashes.
# Provisions with the same scripts/setup_art.sh a native host uses, then bakes the benchmark-Python and
# recipe hashes as labels and environment; the build fails if they do not match the copied sources.
FROM nvidia/cuda:12.8.1-cudnn-devel-ubuntu24.04
ARG BENCH_PYTHON_SHA256
ARG BENCH_RECIPE_SHA256
RUN test -n "$BENCH_PYTHON_SHA256" && test -n "$BENCH_RECIPE_SHA256" \
 || (echo "build through `bench build --backend art` so the hashes are baked" >&2; exit 2)
ENV DEBIAN_FRONTEND=noninteractive
RUN apt-get update && apt-get install -y --no-install-recommends git curl ca-certificates build-essential \
      python3.12 python3.12-dev python3.12-venv && rm -rf /var/lib/apt/lists/*
COPY --from=ghcr.io/astral-sh/uv:0.8.15 /uv /uvx /usr/local/bin/
WORKDIR /opt/rl-bench-src
COPY pyproject.toml README.md ./
COPY harness harness
COPY workloads workloads
COPY containers containers
COPY scripts scripts
RUN mkdir -p simrl simrl_fast adapters presets && touch simrl/__init__.py simrl_fast/__init__.py \
      adapters/__init__.py presets/__init__.py
RUN python3.12 -c "import sys; sys.path.insert(0, '.'); from harness.recipes import python_sha256, recipe_sha256; \
assert python_sha256() == '$BENCH_PYTHON_SHA256', 'benchmark Python differs from BENCH_PYTHON_SHA256'; \
assert recipe_sha256('art') == '$BENCH_RECIPE_SHA256', 'recipe differs from BENCH_RECIPE_SHA256'"
ENV RL_BENCH_ENV_ROOT=/opt/rl-bench
RUN bash scripts/setup_art.sh /opt/rl-bench
LABEL org.rl-bench.python_sha256=$BENCH_PYTHON_SHA256 org.rl-bench.recipe_sha256=$BENCH_RECIPE_SHA256 \
      org.rl-bench.backend=art
ENV BENCH_PYTHON_SHA256=$BENCH_PYTHON_SHA256 BENCH_RECIPE_SHA256=$BENCH_RECIPE_SHA256
ENV PATH=/opt/rl-bench/art/.venv/bin:$PATH
ENV CUDA_HOME=/usr/local/cuda
ENTRYPOINT ["bash", "/opt/rl-bench-src/containers/art_env.sh"]
