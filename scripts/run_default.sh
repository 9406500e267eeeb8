#!/usr/bin/env bash
# run_default.sh — what `make run` (and `make run-moe`) does: prepare the
# default corpus if it is missing, then train configs/llama-tiny.yaml (or
# CONFIG) on 4 ranks with compressed collectives (one thread per rank: the
# ranks share this machine's cores).
#   BUILD=dir   build directory holding train (default build)
#   NP=n        ranks (default 4)
#   CONFIG=f    the config (default configs/llama-tiny.yaml; make run-moe:
#               configs/qwen3-moe-tiny.yaml, expert parallelism 2)
#   extra arguments go to build/train, e.g. --set train.steps=50
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
NP=${NP:-4}
CONFIG=${CONFIG:-configs/llama-tiny.yaml}
name=$(basename "$CONFIG" .yaml)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1
export PRTE_MCA_rmaps_default_mapping_policy=:oversubscribe
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
[ -f data/fortunes.txt ] || scripts/prepare_data.sh
mkdir -p runs
echo "run_default: mpirun -n $NP $BUILD/train $CONFIG --set comm.strategy=compressed $*"
exec mpirun --oversubscribe --bind-to none -n "$NP" "$BUILD/train" "$CONFIG" \
  --set comm.strategy=compressed --log-json "runs/$name.jsonl" "$@"
