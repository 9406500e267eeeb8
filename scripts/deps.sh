#!/usr/bin/env bash
# deps.sh — install what the build and the test references need and is missing.
# Idempotent and quick when everything is there (dpkg and import checks only).
#
# Debian packages:
#   libopenmpi-dev openmpi-bin  MPI transport for CPU ranks (comm/, mpirun)
#   libopenblas-dev             SGEMM for the CPU kernels (kernels/)
#   libyaml-dev                 config files (runtime/config.c)
#   libjansson-dev              JSON: Hugging Face config.json and shard indexes
#                               (runtime/hf.c), token metadata (runtime/data.c)
#   libzstd-dev liblz4-dev      codec benchmark baselines (comm/bench/)
#   libxxhash-dev               frame checksums (XXH32, docs/FORMAT.md §6)
#   fortunes fortunes-min       the default training corpus (scripts/prepare_data.sh)
#   iproute2 iptables           emulated slow-link cluster (scripts/cluster.sh)
# PyPI (test references and plots only):
#   numpy jax[cpu] safetensors matplotlib
#   torch transformers   Hugging Face's Llama / Qwen3 / Qwen3-MoE, the reference of
#                        tests/test_hf_train.py and tests/test_hf_ref.py (runs on the
#                        CPU; PyPI's torch wheel brings its CUDA libraries, ~45 s and ~6 GB)
#   tokenizers           tokenizer.json files: scripts/prepare_data.py (and transformers)
#   nvidia-cudnn-frontend  (module cudnn) the cuDNN frontend's C++ headers, for the
#                        bf16 CUDA table's cuDNN attention (kernels/attention_cudnn.cpp;
#                        header-only, cuDNN itself is loaded at run time)
set -euo pipefail
APT_PKGS="build-essential libopenmpi-dev openmpi-bin libopenblas-dev libyaml-dev libjansson-dev libzstd-dev
          liblz4-dev libxxhash-dev fortunes fortunes-min iproute2"
PY_MODS="numpy jax safetensors matplotlib torch transformers tokenizers cudnn"

missing=()
for p in $APT_PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "deps: installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

PY=${PYTHON:-python3}
pymissing=()
# The references whose APIs the tests lean on are installed at the versions
# the tests were written against (transformers 5 names and stacks MoE
# experts differently from 4; see tests/test_hf_ref.py).
pin() { case $1 in torch) echo "torch==2.15.0" ;; transformers) echo "transformers==5.24.0" ;;
                  tokenizers) echo "tokenizers==0.23.3" ;; cudnn) echo "nvidia-cudnn-frontend==1.32.0" ;;
                  *) echo "$1" ;; esac; }
for m in $PY_MODS; do
  $PY -c "import importlib.util,sys; sys.exit(importlib.util.find_spec('$m') is None)" 2>/dev/null \
    || pymissing+=("$(pin "$m")")
done
# the cuDNN frontend for its headers alone: without its Python
# dependencies (CUTLASS's DSL and more, ~0.5 GB)
nodeps=()
for i in "${!pymissing[@]}"; do
  case ${pymissing[$i]} in nvidia-cudnn-frontend*) nodeps+=("${pymissing[$i]}"); unset "pymissing[$i]" ;; esac
done
if [ ${#pymissing[@]} -gt 0 ]; then
  echo "deps: installing Python packages: ${pymissing[*]}"
  $PY -m pip install -q --disable-pip-version-check "${pymissing[@]}"
fi
if [ ${#nodeps[@]} -gt 0 ]; then
  echo "deps: installing Python packages without their dependencies: ${nodeps[*]}"
  $PY -m pip install -q --disable-pip-version-check --no-deps "${nodeps[@]}"
fi
