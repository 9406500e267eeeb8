#!/usr/bin/env bash
# gpu_bundle.sh — pack what `make test-gpu` needs on a GPU machine that has
# CUDA, cuBLAS and NCCL but none of our Debian packages (no Open MPI,
# OpenBLAS, libyaml, Jansson, xxHash): the programs built here, every shared
# library they load that such a machine lacks, a relocatable copy of Open MPI
# (its plugins and help files, OPAL_PREFIX) and the default corpus, in one
# compressed archive. scripts/test_gpu.sh --bundle FILE unpacks and runs it.
#
#   scripts/gpu_bundle.sh [BUILD]     -> BUILD/gpu-bundle.tar.xz (BUILD: build)
#
# Left out on purpose: glibc, libstdc++ and libgcc_s (the GPU machine's are
# newer and backward compatible) and the CUDA libraries other than the
# runtime (cuBLAS and NCCL are hundreds of MB; the GPU machine has its own,
# found by test_gpu.sh). The archive must stay well under the device tool's
# 64 MiB carry limit: the script fails above 48 MiB.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
STAGE=$BUILD/gpu-bundle
OUTF=$BUILD/gpu-bundle.tar.xz
rm -rf "$STAGE" "$OUTF"
mkdir -p "$STAGE/bin" "$STAGE/lib" "$STAGE/data"

progs=()
for p in "$BUILD"/gpu/test_gpu_* "$BUILD"/tests/test_model "$BUILD"/tests/test_coll_device "$BUILD"/train "$BUILD"/zipccl-bench; do
  [ -x "$p" ] && [ -f "$p" ] || { echo "gpu_bundle: $p missing (run make first)" >&2; exit 1; }
  progs+=("$p")
  strip -o "$STAGE/bin/$(basename "$p")" "$p"
done

# shared libraries: everything ldd resolves except glibc, the C++ runtime and
# the big CUDA libraries the GPU machine brings
skip='/(libc|libm|libdl|libpthread|librt|libresolv|libutil|ld-linux-x86-64|libstdc\+\+|libgcc_s|libcublas|libcublasLt|libnccl|libcuda)\.so'
ompi_root=/usr/lib/x86_64-linux-gnu/openmpi
for p in "${progs[@]}" /usr/bin/orterun /usr/bin/orted $ompi_root/lib/openmpi3/mca_*.so \
         /usr/lib/x86_64-linux-gnu/pmix2/lib/pmix/*.so; do
  ldd "$p" 2>/dev/null | awk '/=> \//{print $3}' | grep -Ev "$skip" || true
done | sort -u | while read -r lib; do
  cp -L "$lib" "$STAGE/lib/"
done

# Open MPI, relocatable under OPAL_PREFIX=<unpacked dir>/ompi: the layout
# Debian configured (libdir, pkglibdir, pkgdatadir below the prefix /usr)
O=$STAGE/ompi
mkdir -p "$O/bin" "$O/lib/x86_64-linux-gnu/openmpi/lib" "$O/share" \
         "$O/lib/x86_64-linux-gnu/pmix2/lib"
cp -a $ompi_root/lib/openmpi3 "$O/lib/x86_64-linux-gnu/openmpi/lib/"
cp -a /usr/lib/x86_64-linux-gnu/pmix2/lib/pmix "$O/lib/x86_64-linux-gnu/pmix2/lib/"
cp -a /usr/share/openmpi "$O/share/"
[ -d /usr/share/pmix ] && cp -a /usr/share/pmix "$O/share/"
cp /usr/bin/orterun /usr/bin/orted "$O/bin/"
ln -s orterun "$O/bin/mpirun"

# the default corpus (the trainer's llama-tiny config reads data/fortunes.txt)
[ -f data/fortunes.txt ] || scripts/prepare_data.sh
cp data/fortunes.txt "$STAGE/data/"

tar -C "$BUILD" -cJf "$OUTF" gpu-bundle
size=$(stat -c %s "$OUTF")
echo "gpu_bundle: $OUTF, $((size / 1024)) KiB ($(ls "$STAGE/bin" | wc -l) programs, $(ls "$STAGE/lib" | wc -l) libraries)"
if [ "$size" -gt $((48 << 20)) ]; then
  echo "gpu_bundle: archive over 48 MiB: the device tool carries at most 64 MiB with the tree" >&2
  exit 1
fi
