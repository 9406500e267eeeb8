# lib.sh — shared set-up of the shell tests (sourced, from the repository root).
# The same environment scripts/run_tests.sh gives its children, so a test also
# runs standalone: one thread per rank, Open MPI allowed as root and
# oversubscribed, a scratch directory removed on exit, PASS/FAIL helpers.
BUILD=${BUILD:-build}
TRAIN=${TRAIN:-$BUILD/train}
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1
export PRTE_MCA_rmaps_default_mapping_policy=:oversubscribe
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; fails=$((fails + 1)); }
