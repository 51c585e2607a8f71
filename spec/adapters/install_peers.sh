#!/usr/bin/env bash
# Install the GRPO peers the adapters call (TRL 1.16.0, verl 0.9.1, OpenRLHF 0.11.2, AReaL 1.0.4,
# ms-swift 4.6.0, SkyRL 0.3.0, Unsloth 2026.10.9, and tunix 0.1.7 on jax 0.10.2) on CPU into an
# existing venv that already has sigma-ref and torch 2.13.0 (`make peers` runs this).
#
#   usage: spec/adapters/install_peers.sh VENV/bin/pip
#
# * torch stays at 2.13.0: a constraints file goes to every `pip install`, so a dependency
#   that wants another torch makes pip fail instead of replacing it.
# * verl, OpenRLHF and deepspeed declare GPU stacks (flash-attn, vllm, CUDA pins) in their
#   metadata, so they go in with --no-deps and their import-time dependencies are named here.
#   pip then prints "ERROR: pip's dependency resolver ... conflicts" for the unmet GPU pins
#   (and transformers / ray pins): expected, not fatal.
# * Never `pip install vllm`: it pulls another torch and the CUDA stack. OpenRLHF imports
#   flash_attn and vllm; spec/adapters/openrlhf.py provides stand-ins for the import only.
# * AReaL, ms-swift, SkyRL and Unsloth pin GPU stacks, torch versions or trl<1.0 in their metadata:
#   --no-deps, then the light modules their imports need. ms-swift's loss needs trl<1.0 and cannot
#   live beside TRL 1.16: only its advantage functions are driven (spec/adapters/swift.py).
# Measured on 2 cores with a warm pip cache: about 80 s, about 1 GB (ray 240 MB, pyarrow 170 MB)
# for the first three. The other four add about 410 MB in the venv (unsloth, numba/llvmlite,
# modelscope, areal, ms-swift); their lines took 11 s (the five --no-deps wheels) and 8 s (the
# SkyRL / ms-swift line) on a quiet machine, the AReaL line was installed a package at a time and
# not timed as one; a re-run with everything present takes 2 s a line.
# The JAX side (jax, array-api, tunix and its imports) adds 650 MB to a venv that has the rest
# (jaxlib 350 MB, scipy 140 MB, tensorstore 65 MB); time: jax 10 s, flax 3 s, tunix 1 s on a
# lightly loaded machine (metrax and the small ones not timed), 148 s for all of it in a fresh venv
# on 2 cores shared with 8 other jobs (load average 10).
set -euo pipefail
PIP=${1:?usage: $0 VENV/bin/pip}
PY="$(dirname "$PIP")/python"
CON=$(mktemp)
trap 'rm -f "$CON"' EXIT
echo "torch==2.13.0" > "$CON"
pipi() { "$PIP" install -q --no-compile -c "$CON" "$@"; }
step() { local s; s=$(date +%s); "$@"; echo "  [$(( $(date +%s) - s ))s] $*" >&2; }
t0=$(date +%s)

# TRL: its own dependencies are light and leave torch alone
step pipi trl==1.16.0
# verl: --no-deps, then what `import verl` and core_algos need (verl/__init__ imports ray)
step pipi --no-deps verl==0.9.1
# (ray also serves `sigma-ref audit --engine ray`, the `ray` extra: tests/test_audit_ray.py runs where it is)
step pipi ray "tensordict>=0.8.0,<=0.10.0,!=0.9.0" omegaconf hydra-core codetiming
# OpenRLHF: --no-deps; deepspeed without building its CUDA ops; then its import-time deps
step pipi --no-deps openrlhf==0.11.2
DS_BUILD_OPS=0 step pipi --no-deps --no-build-isolation deepspeed==0.19.6
step pipi hjson ninja py-cpuinfo einops msgpack psutil pydantic tqdm
step pipi peft pylatexenc aiohttp
step pipi --no-deps torchdata
# AReaL, ms-swift, SkyRL, Unsloth: --no-deps, then what `import areal`, `swift.rl_core.advantage`,
# `skyrl...ppo_utils` and `unsloth_zoo.rl_replacements` import (unsloth needs UNSLOTH_IS_PRESENT=1,
# which spec/adapters/unsloth.py sets)
step pipi --no-deps areal==1.0.4 ms-swift==4.6.0 skyrl==0.3.0 unsloth==2026.10.9 unsloth-zoo==2026.10.9
step pipi httpx colorlog tenacity flask lark uvloop numba aiofiles openai
step pipi modelscope jaxtyping loguru skyrl-gym
# JAX and the array API (the `jax` extra): jax on CPU, array-api-compat, array-api-strict
step pipi "jax[cpu]==0.10.2" array-api-compat==1.16.0 array-api-strict==2.6.1
# tunix (JAX): --no-deps (its metadata pulls tensorflow-datasets, grain, kagglehub, ...), then what
# `tunix.rl.algo_core` and `tunix.rl.common` import
step pipi --no-deps google-tunix==0.1.7
step pipi flax==0.12.8 google-metrax==0.2.4 sentencepiece==0.2.3 perfetto==0.59.1

"$PY" - <<'PY'
import sys
import torch
from sigma_ref.conformance import Batch
from sigma_ref.conformance.matrix import adapter_module, installed_versions

if not torch.__version__.startswith("2.13.0"):
    sys.exit(f"torch {torch.__version__} was installed over 2.13.0: remove the venv and start again")
batch = Batch.grouped([[1.0, 0.0, 0.0, 0.0]])
for peer in ("trl", "verl", "openrlhf", "areal", "swift", "skyrl", "unsloth", "tunix"):
    module = adapter_module(peer)
    if module.unavailable():
        sys.exit(module.unavailable())
    for name, adapter in module.ADAPTERS.items():
        adapter(batch)  # imports the peer and runs its code once
print("peers OK:", ", ".join(f"{k} {v}" for k, v in installed_versions().items()))
PY
echo "peers installed in $(( $(date +%s) - t0 ))s"
