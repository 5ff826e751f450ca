#!/usr/bin/env bash
# Fetches the small real data set the tests and examples use: the UCI optical handwritten
# digits (1797 8x8 images, 64 values 0..16 then the label), as Debian's python3-sklearn
# package ships it. Nothing is installed: the package is downloaded into a temporary folder
# and the one file is extracted from it.
#
#   scripts/fetch-data.sh [DATA_DIR]     (default: ./data)
#
# Writes DATA_DIR/digits.csv.gz (checked against a known sha256) and DATA_DIR/digits.rst,
# the data set's description (origin, authors, references). Idempotent: does nothing when
# the file is already present with the right checksum. Each file appears atomically (written
# to a temporary name, then renamed), so an interrupted run never leaves a partial file.
set -euo pipefail

data_dir="${1:-data}"
want_sha256=46abec6b12486ad9e51943373abcf22bbea1b5a51a1619b361570d8893f1464a
target="$data_dir/digits.csv.gz"
member_dir=./usr/lib/python3/dist-packages/sklearn/datasets

if [[ -f "$target" ]] && echo "$want_sha256  $target" | sha256sum --check --status; then
  echo "$target: present, checksum ok"
  exit 0
fi

mkdir -p "$data_dir"
work="$(mktemp -d)"
tmp=""  # a partial file in DATA_DIR, removed if the script stops before renaming it
trap 'rm -rf "$work" ${tmp:+"$tmp"}' EXIT
# apt-get download drops privileges to the _apt user when run as root; that user must be
# able to write the download folder.
chmod 777 "$work"

download() { (cd "$work" && apt-get download -qq python3-sklearn); }
if ! download; then
  # The package lists may be missing or stale (fresh containers ship without them).
  SUDO=""
  [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update -qq
  download
fi

deb=("$work"/python3-sklearn_*.deb)
[[ -f "${deb[0]}" ]] || { echo "fetch-data: apt-get download produced no .deb" >&2; exit 1; }

dpkg-deb --fsys-tarfile "${deb[0]}" | tar -xO "$member_dir/data/digits.csv.gz" > "$work/digits.csv.gz"
got_sha256="$(sha256sum "$work/digits.csv.gz" | cut -d' ' -f1)"
if [[ "$got_sha256" != "$want_sha256" ]]; then
  echo "fetch-data: digits.csv.gz has sha256 $got_sha256, expected $want_sha256" >&2
  exit 1
fi
dpkg-deb --fsys-tarfile "${deb[0]}" | tar -xO "$member_dir/descr/digits.rst" > "$work/digits.rst"

# Copied to a temporary name in DATA_DIR first: a rename within one file system is atomic.
install_atomic() {
  tmp="$(mktemp "$data_dir/.fetch-data.XXXXXX")"
  cp "$1" "$tmp"
  chmod 644 "$tmp"
  mv -f "$tmp" "$2"
  tmp=""
}
install_atomic "$work/digits.rst" "$data_dir/digits.rst"
install_atomic "$work/digits.csv.gz" "$target"
echo "$target: fetched (sha256 ok), description in $data_dir/digits.rst"
