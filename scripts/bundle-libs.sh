#!/usr/bin/env bash
# Copies the shared libraries the given programs load (as ldd resolves them), except the C
# library's own, into DEST: the runtime image then needs no package of the build's
# distribution, and the same Dockerfile works on Debian and on NVIDIA's CUDA images.
# Libraries the programs open at run time (dlopen: the BLAS libraries, core/backend/cpu/
# blas_library.h) are named with --load SONAME; each is copied under its soname, with what
# it links. A --load library that is not installed is an error.
#   bundle-libs.sh DEST [--load SONAME]... PROGRAM...
set -euo pipefail
dest="$1"
shift
mkdir -p "$dest"
objects=()
while [[ $# -gt 0 ]]; do
  if [[ "$1" == "--load" ]]; then
    path=$(ldconfig -p | awk -v name="$2" '$1 == name && /x86-64|x86_64|aarch64/ {print $NF; exit}')
    [[ -n "${path}" ]] || { echo "bundle-libs: $2 is not installed (ldconfig -p)" >&2; exit 1; }
    cp -L "${path}" "${dest}/$2"
    objects+=("${path}")
    shift 2
  else
    objects+=("$1")
    shift
  fi
done
for obj in "${objects[@]}"; do
  ldd "$obj" | awk '/=> \// {print $3}' | while read -r lib; do
    case "$(basename "$lib")" in
      libc.so.*|libm.so.*|libdl.so.*|librt.so.*|libpthread.so.*|ld-linux*|libresolv.so.*) continue ;;
    esac
    cp -Lu "$lib" "$dest/"
  done
done
ls "$dest" | wc -l | xargs echo "bundled libraries:"
