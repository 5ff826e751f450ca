#!/usr/bin/env bash
# Copies the shared libraries the given programs load (as ldd resolves them), except the C
# library's own, into DEST: the runtime image then needs no package of the build's
# distribution, and the same Dockerfile works on Debian and on NVIDIA's CUDA images.
#   bundle-libs.sh DEST PROGRAM...
set -euo pipefail
dest="$1"
shift
mkdir -p "$dest"
for prog in "$@"; do
  ldd "$prog" | awk '/=> \// {print $3}' | while read -r lib; do
    case "$(basename "$lib")" in
      libc.so.*|libm.so.*|libdl.so.*|librt.so.*|libpthread.so.*|ld-linux*|libresolv.so.*) continue ;;
    esac
    cp -Lu "$lib" "$dest/"
  done
done
ls "$dest" | wc -l | xargs echo "bundled libraries:"
