#!/usr/bin/env bash
# The container image checked as a user would use it, without a Docker engine (`make test-image`;
# CI runs it):
#   scripts/test-image.sh [WORK_DIR]          (default build-image; .gitignore and .dockerignore skip it)
# 1. Base images: a Debian 12 root file system made with debootstrap (variant minbase, from the
#    host's apt mirror), with the official images' apt/dpkg settings, imported into buildah's
#    storage as debian:bookworm and, with the slim image's path excludes, debian:bookworm-slim.
#    Both root file systems are cached as tarballs in ~/.cache/anvil-image/base (ANVIL_IMAGE_CACHE),
#    outside the work folder, so a clean clone skips debootstrap too; remade after a week.
# 2. The Dockerfile built by buildah: chroot isolation, vfs storage in WORK_DIR/storage (nothing
#    global is touched), docker format (OCI drops HEALTHCHECK). Most of the time is this build;
#    its compile step's cache mount (the compiler cache) lives in the same cache folder.
# 3. The image's config has its HEALTHCHECK, and the image is small: its root file system must
#    stay within ANVIL_IMAGE_MAX_MB (default 300; 253 MB measured: bookworm-slim 78 MB, the
#    bundled libraries (oneDNN 38, OpenBLAS 35, BLIS 12, ONNX and OpenCV DNN) and the binaries).
# 4. The image run: its entrypoint, as its user, with its environment only, chrooted into a
#    working container's root, in fresh network, PID, mount and UTS namespaces (its own loopback:
#    the image's 0.0.0.0:50051 and :9464 are free whatever runs on the host; nothing outlives the
#    check; /proc, /sys, /dev, /etc/hosts are mounted there as a container engine would). Then,
#    with the image's own anvil CLI over the TLS the entrypoint sets up (its development CA):
#    health SERVING, a blobs MLP job (2 epochs) watched to SUCCEEDED, a Predict on the model it
#    registered, /metrics, the HEALTHCHECK command itself (exit 0), and a SIGTERM drain (exit 0).
# Needs root (debootstrap, chroot, namespaces) and `scripts/install-deps.sh image`. About 5
# minutes from cold on 2 cores (debootstrap 30 s, the build 4 min: apt in the builder and the
# compile), under a minute with both caches warm. The storage is removed at the end; ANVIL_IMAGE_KEEP=1 keeps it, to
# look at the image: buildah --root WORK_DIR/storage --runroot WORK_DIR/run --storage-driver vfs images
# Logs stay in WORK_DIR: build.log, anvild.log, submit.log.
set -euo pipefail

# ---- inside the namespaces (this script runs itself there: `--inside`) ----------------------
if [[ "${1:-}" == "--inside" ]]; then
  root="$2" userspec="$3" work="$4"
  mapfile -t image_env < "${work}/image.env"
  mapfile -t entrypoint < "${work}/image.entrypoint"
  mapfile -t healthcheck < "${work}/image.healthcheck"
  log="${work}/anvild.log"
  server=""
  # Running, not a zombie (kill -0 succeeds on one); /proc is this PID namespace's (--mount-proc).
  alive() { [[ "$(sed 's/.*) //' "/proc/$1/stat" 2> /dev/null | cut -c1)" =~ ^[RSDTt]$ ]]; }
  # shellcheck disable=SC2317  # (the EXIT trap runs it)
  cleanup_inside() {
    if [[ -n "${server}" ]] && alive "${server}"; then
      kill -KILL "${server}" 2> /dev/null || true
      wait "${server}" 2> /dev/null || true
    fi
    for m in etc/hostname etc/hosts sys dev proc; do
      if mountpoint -q "${root}/${m}"; then umount -R "${root}/${m}" 2> /dev/null || true; fi
    done
  }
  trap cleanup_inside EXIT
  trap 'exit 130' INT TERM  # PID 1 of its namespace: a signal without a handler would not stop it
  fail() {
    echo "test-image: FAILED: $*" >&2
    echo "---- anvild's log (${log}):" >&2
    tail -n 40 "${log}" >&2 || true
    exit 1
  }

  # What a container engine gives a container: a hostname, a loopback, /etc/hosts, /proc, /sys, /dev.
  hostname anvil-image-test
  ip link set lo up
  mount -t proc proc "${root}/proc"
  mount -t sysfs -o ro,nosuid,nodev,noexec sysfs "${root}/sys"
  mount --rbind /dev "${root}/dev"
  mount --make-rslave "${root}/dev"
  printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\tanvil-image-test\n' \
    > "${work}/hosts"
  echo anvil-image-test > "${work}/hostname"
  for f in hosts hostname; do
    [[ -e "${root}/etc/${f}" ]] || touch "${root}/etc/${f}"
    mount --bind "${work}/${f}" "${root}/etc/${f}"
  done

  in_image() { chroot --userspec="${userspec}" "${root}" env -i "${image_env[@]}" "$@"; }
  ca=/var/lib/anvil/tls/ca.pem
  cli=(anvil --server localhost:50051 --tls-ca "${ca}")

  echo "== starting the image's entrypoint (${entrypoint[*]}) as ${userspec}"
  chroot --userspec="${userspec}" "${root}" env -i "${image_env[@]}" "${entrypoint[@]}" > "${log}" 2>&1 &
  server=$!  # chroot, env and the entrypoint exec in turn: this is anvild's PID
  healthy=0
  for _ in $(seq 120); do
    alive "${server}" || fail "anvild exited during start-up"
    if [[ -f "${root}${ca}" ]] && in_image "${cli[@]}" health > /dev/null 2>&1; then
      healthy=1
      break
    fi
    sleep 0.5
  done
  [[ ${healthy} -eq 1 ]] || fail "anvild did not answer health within 60 s"
  out=$(in_image "${cli[@]}" health -v 2>&1) || fail "anvil health: ${out}"
  echo "${out}"
  grep -q SERVING <<< "${out}" || fail "anvil health did not say SERVING: ${out}"
  echo "PASS health: SERVING"

  echo "== submitting a blobs MLP job (2 epochs) and watching it"
  printf '%s\n' '{"name": "blobs", "model_preset": "mlp", "dataset": {"name": "blobs"}, "epochs": 2}' \
    > "${root}/tmp/blobs.json"
  printf '%s\n' '[[0.5, -1.0], [2.0, 3.0], [-4.0, 1.5]]' > "${root}/tmp/blobs-input.json"
  chmod 0644 "${root}/tmp/blobs.json" "${root}/tmp/blobs-input.json"
  rc=0
  timeout 300 chroot --userspec="${userspec}" "${root}" env -i "${image_env[@]}" "${cli[@]}" submit /tmp/blobs.json \
    --watch < /dev/null > "${work}/submit.log" 2>&1 || rc=$?
  tail -n 12 "${work}/submit.log"
  [[ ${rc} -eq 0 ]] || fail "anvil submit --watch exited ${rc} (3: the job did not succeed; 124: timed out)"
  out=$(in_image "${cli[@]}" jobs 2>&1) || fail "anvil jobs: ${out}"
  grep -q SUCCEEDED <<< "${out}" || fail "the job is not SUCCEEDED: ${out}"
  echo "PASS job: SUCCEEDED"

  echo "== predicting with the model it registered"
  out=$(in_image "${cli[@]}" predict blobs --input /tmp/blobs-input.json 2>&1) || fail "anvil predict: ${out}"
  echo "${out}"
  echo "PASS predict"

  echo "== /metrics on the image's metrics address (:9464)"
  metrics=$(exec 3<> /dev/tcp/127.0.0.1/9464 && printf 'GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n' >&3 \
    && timeout 10 cat <&3) || fail "no answer on 127.0.0.1:9464"
  grep -q '^anvil_jobs_finished_total' <<< "${metrics}" || fail "/metrics lacks anvil_jobs_finished_total"
  grep '^anvil_jobs_finished_total' <<< "${metrics}" | head -n 3
  echo "PASS metrics"

  echo "== the image's HEALTHCHECK command (${healthcheck[*]})"
  case "${healthcheck[0]}" in
    CMD) hc=("${healthcheck[@]:1}") ;;
    CMD-SHELL) hc=(/bin/sh -c "${healthcheck[*]:1}") ;;
    *) fail "unexpected HEALTHCHECK test type ${healthcheck[0]}" ;;
  esac
  rc=0
  out=$(timeout 5 chroot --userspec="${userspec}" "${root}" env -i "${image_env[@]}" "${hc[@]}" 2>&1) || rc=$?
  echo "${out}"
  [[ ${rc} -eq 0 ]] || fail "the HEALTHCHECK command exited ${rc}"
  echo "PASS HEALTHCHECK: exit 0"

  echo "== SIGTERM (what docker stop sends)"
  kill -TERM "${server}"
  rc=0
  for _ in $(seq 60); do alive "${server}" || break; sleep 0.5; done
  alive "${server}" && fail "anvild still running 30 s after SIGTERM"
  wait "${server}" || rc=$?
  server=""
  [[ ${rc} -eq 0 ]] || fail "anvild exited ${rc} after SIGTERM"
  echo "PASS drain: anvild exited 0"
  exit 0
fi

# ---- on the host ------------------------------------------------------------------------------
cd "$(dirname "$0")/.."
src="$(pwd)"
work="$(realpath -m "${1:-build-image}")"
max_mb="${ANVIL_IMAGE_MAX_MB:-300}"
tag="anvil:test"

die() {
  echo "test-image: FAILED: $*" >&2
  exit 1
}
[[ $(id -u) -eq 0 ]] || die "needs root (debootstrap, chroot and namespaces); run it as root or with sudo"
for tool in debootstrap buildah chroot unshare ip tar; do
  command -v "${tool}" > /dev/null || die "${tool} is missing: make deps-image (scripts/install-deps.sh image)"
done
# The checks mount /dev and /proc only inside their own mount namespace, so nothing is mounted
# here; refuse to delete anything if something is (rm -rf through a bind of /dev would be bad).
if findmnt -rn -o TARGET | grep -q "^${work}/"; then
  die "something is mounted beneath ${work}: $(findmnt -rn -o TARGET | grep "^${work}/" | tr '\n' ' ')"
fi

# What outlives a work folder (a clean clone starts warm): the base root file systems, remade
# after a week so they follow Debian's updates, and buildah's RUN --mount=type=cache folders (the
# Dockerfile's compiler cache), which buildah keeps in $TMPDIR/buildah-cache (1.28, Debian 12's;
# later releases add -$UID).
cache="${ANVIL_IMAGE_CACHE:-${XDG_CACHE_HOME:-${HOME}/.cache}/anvil-image}"
base="${cache}/base"
mkdir -p "${base}" "${cache}/buildah-cache"
find "${base}" -maxdepth 1 -name '*.tar' -mtime +7 -delete
export TMPDIR="${work}/tmp"
rm -rf "${work}/storage" "${work}/run" "${TMPDIR}"
rm -f "${work}"/{build,anvild,submit}.log "${work}"/image.{env,entrypoint,healthcheck} "${work}"/{hosts,hostname}
mkdir -p "${TMPDIR}"
ln -s "${cache}/buildah-cache" "${TMPDIR}/buildah-cache"
ln -s "${cache}/buildah-cache" "${TMPDIR}/buildah-cache-$(id -u)"
# buildah as root keeps a blob-info cache in /var/lib/containers/cache whatever --root says:
# each buildah runs in a mount namespace of its own where that directory is WORK_DIR/containers
# (the empty mount point is removed at the end if this made it).
made_varlib=0
[[ -d /var/lib/containers ]] || { mkdir -p /var/lib/containers && made_varlib=1; }
mkdir -p "${work}/containers"
# shellcheck disable=SC2016  # ($1 and $@ are the inner bash's)
B=(unshare --mount --propagation private -- bash -c 'mount --bind "$1" /var/lib/containers && shift && exec "$@"' _
  "${work}/containers" buildah --root "${work}/storage" --runroot "${work}/run" --storage-driver vfs)
t_start=${SECONDS}
ctr=""
cleanup() {
  rc=$?
  if [[ -n "${ctr}" ]]; then
    "${B[@]}" umount "${ctr}" > /dev/null 2>&1 || true
    "${B[@]}" rm "${ctr}" > /dev/null 2>&1 || true
  fi
  if [[ "${ANVIL_IMAGE_KEEP:-0}" != "1" ]]; then
    "${B[@]}" rm --all > /dev/null 2>&1 || true
    rm -rf "${work}/storage" "${work}/run" "${TMPDIR}"
  fi
  [[ ${made_varlib} -eq 1 ]] && rmdir /var/lib/containers 2> /dev/null
  [[ ${rc} -eq 0 ]] || echo "test-image: FAILED (exit ${rc}); the base tarballs stay in ${base}" >&2
  exit ${rc}
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- 1. debian:bookworm and debian:bookworm-slim ----------------------------------------------
# The host's apt mirror (deb822 .sources first, then sources.list), else Debian's usual one.
apt_uri() {  # apt_uri SUITE_PATTERN
  local f uri
  for f in /etc/apt/sources.list.d/*.sources; do
    [[ -f "${f}" ]] || continue
    uri=$(awk -v pat="$1" 'BEGIN { RS = ""; FS = "\n" }
      { u = ""; s = ""
        for (i = 1; i <= NF; i++) { if ($i ~ /^URIs:/) u = $i; if ($i ~ /^Suites:/) s = $i }
        if (s ~ pat && u != "") { sub(/^URIs:[ \t]*/, "", u); split(u, a, " "); print a[1]; exit } }' "${f}")
    [[ -n "${uri}" ]] && { echo "${uri}"; return; }
  done
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [[ -f "${f}" ]] || continue
    uri=$(awk -v pat="$1" '$1 == "deb" { i = 2; if ($2 ~ /^\[/) while ($i !~ /\]$/) i++; if ($2 ~ /^\[/) i++
      if ($(i + 1) ~ pat) { print $i; exit } }' "${f}")
    [[ -n "${uri}" ]] && { echo "${uri}"; return; }
  done
}
mirror="${DEBIAN_MIRROR:-$(apt_uri '(^|[ :])(bookworm|stable)( |$)')}"
mirror="${mirror:-http://deb.debian.org/debian}"
security="${DEBIAN_SECURITY_MIRROR:-$(apt_uri 'bookworm-security|stable-security')}"
security="${security:-http://deb.debian.org/debian-security}"

full_tar="${base}/bookworm.tar"
slim_tar="${base}/bookworm-slim.tar"
t0=${SECONDS}
if [[ -f "${full_tar}" && -f "${slim_tar}" ]]; then
  echo "== base root file systems: cached in ${base}"
  base_note="cached"
else
  echo "== debootstrap --variant=minbase bookworm from ${mirror} (a minute or two; cached afterwards)"
  rootfs="${base:?}/rootfs"
  rm -rf "${rootfs}"
  debootstrap --variant=minbase bookworm "${rootfs}" "${mirror}" > "${base}/debootstrap.log" 2>&1 \
    || { tail -n 30 "${base}/debootstrap.log" >&2; die "debootstrap failed (log: ${base}/debootstrap.log)"; }
  # What the official images carry (debuerreotype): deb822 sources with updates and security,
  # apt that cleans up after itself, no services started by package scripts, empty apt lists.
  rm -f "${rootfs}/etc/apt/sources.list"
  cat > "${rootfs}/etc/apt/sources.list.d/debian.sources" << EOF
Types: deb
URIs: ${mirror}
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: ${security}
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  cat > "${rootfs}/etc/apt/apt.conf.d/docker-clean" << 'EOF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
EOF
  echo 'Acquire::Languages "none";' > "${rootfs}/etc/apt/apt.conf.d/docker-no-languages"
  printf 'Acquire::GzipIndexes "true";\n' > "${rootfs}/etc/apt/apt.conf.d/docker-gzip-indexes"
  printf 'APT::AutoRemove::SuggestsImportant "false";\n' > "${rootfs}/etc/apt/apt.conf.d/docker-autoremove-suggests"
  echo 'force-unsafe-io' > "${rootfs}/etc/dpkg/dpkg.cfg.d/docker-apt-speedup"
  printf '#!/bin/sh\nexit 101\n' > "${rootfs}/usr/sbin/policy-rc.d"
  chmod 0755 "${rootfs}/usr/sbin/policy-rc.d"
  rm -rf "${rootfs:?}"/var/cache/apt/archives/*.deb "${rootfs:?}"/var/cache/apt/*.bin "${rootfs:?}"/var/lib/apt/lists/* \
    "${rootfs:?}"/var/log/*.log "${rootfs:?}"/var/log/apt/* "${rootfs:?}"/dev/* "${rootfs:?}"/tmp/* \
    "${rootfs:?}/etc/machine-id"
  : > "${rootfs}/etc/resolv.conf"
  : > "${rootfs}/etc/hostname"
  tar -C "${rootfs}" --numeric-owner --xattrs -cf "${full_tar}.part" .
  # The slim variant: the official bookworm-slim image's dpkg path excludes, and the files they name.
  cat > "${rootfs}/etc/dpkg/dpkg.cfg.d/docker" << 'EOF'
# This is the "slim" variant of the Debian base image: files normally unnecessary in containers
# are excluded, and this configuration keeps them that way.
path-exclude /usr/share/doc/*
# copyright files stay, for legal reasons
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/lintian/overrides/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/man/*
EOF
  find "${rootfs}/usr/share/doc" -mindepth 1 -not -type d -not -name copyright -delete
  find "${rootfs}/usr/share/doc" -mindepth 1 -type d -empty -delete
  rm -rf "${rootfs:?}"/usr/share/{groff,info,linda,locale,man}/* "${rootfs:?}"/usr/share/lintian/overrides/*
  tar -C "${rootfs}" --numeric-owner --xattrs -cf "${slim_tar}.part" .
  rm -rf "${rootfs}"
  mv "${full_tar}.part" "${full_tar}"
  mv "${slim_tar}.part" "${slim_tar}"
  base_note="debootstrap"
fi
for variant in bookworm bookworm-slim; do
  c=$("${B[@]}" from scratch)
  "${B[@]}" add --quiet "${c}" "${base}/${variant}.tar" / > /dev/null
  "${B[@]}" config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --cmd bash \
    --os linux --arch "$(dpkg --print-architecture)" "${c}"
  "${B[@]}" commit --quiet --format docker --rm "${c}" "docker.io/library/debian:${variant}" > /dev/null
done
t_base=$((SECONDS - t0))
echo "   debian:bookworm and debian:bookworm-slim in ${work}/storage (${t_base} s, ${base_note})"

# ---- 2. the build ------------------------------------------------------------------------------
echo "== buildah bud --isolation chroot --format docker -t ${tag} . (several minutes: the compile)"
t0=${SECONDS}
"${B[@]}" bud --isolation chroot --format docker --pull=never -t "${tag}" "${src}" > "${work}/build.log" 2>&1 \
  || { tail -n 40 "${work}/build.log" >&2; die "the image build failed (log: ${work}/build.log)"; }
t_build=$((SECONDS - t0))
echo "   built in ${t_build} s (log: ${work}/build.log)"

# ---- 3. the image's config and size ------------------------------------------------------------
inspect() { "${B[@]}" inspect --type image --format "$1" "${tag}"; }
hc_test=$(inspect '{{if .Docker.Config.Healthcheck}}{{range .Docker.Config.Healthcheck.Test}}{{println .}}{{end}}{{end}}')
[[ -n "${hc_test}" ]] || die "the image has no HEALTHCHECK in its config (was it built with --format docker?)"
echo "PASS HEALTHCHECK in the image's config: $(tr '\n' ' ' <<< "${hc_test}")"
printf '%s\n' "${hc_test}" > "${work}/image.healthcheck"
inspect '{{range .Docker.Config.Entrypoint}}{{println .}}{{end}}{{range .Docker.Config.Cmd}}{{println .}}{{end}}' \
  | sed '/^$/d' > "${work}/image.entrypoint"
[[ -s "${work}/image.entrypoint" ]] || die "the image has neither ENTRYPOINT nor CMD"
user=$(inspect '{{.Docker.Config.User}}')
[[ -n "${user}" && "${user}" != "root" && "${user}" != "0" ]] || die "the image runs as root (USER is \"${user}\")"

ctr=$("${B[@]}" from --pull=never "${tag}")
root=$("${B[@]}" mount "${ctr}")
size_mb=$(du -s --block-size=1M -x "${root}" | cut -f1)
image_size=$("${B[@]}" images --format '{{.Size}}' "${tag}" | head -n 1)
echo "   image size: ${size_mb} MB on disk (buildah images: ${image_size}); bound ${max_mb} MB"
[[ ${size_mb} -le ${max_mb} ]] || die "the image is ${size_mb} MB, above ANVIL_IMAGE_MAX_MB=${max_mb}: $(du -s \
  --block-size=1M "${root}"/opt/anvil/* "${root}"/usr/* 2> /dev/null | sort -rn | head -n 5 | tr '\n\t' '; ')"
echo "PASS size: ${size_mb} MB <= ${max_mb} MB"

# The image's user as numbers, from its own /etc/passwd; its environment as Docker builds it
# (the config's Env, then HOSTNAME and HOME when the config lacks them).
IFS=: read -r uid gid home < <(awk -F: -v u="${user%%:*}" '$1 == u || $3 == u { print $3 ":" $4 ":" $6; exit }' \
  "${root}/etc/passwd")
[[ -n "${uid}" ]] || die "user ${user} is not in the image's /etc/passwd"
# The documented owner of a host volume (Dockerfile: chown 10001:10001).
[[ "${uid}:${gid}" == "10001:10001" ]] || die "the image's user ${user} is ${uid}:${gid}; expected 10001:10001"
inspect '{{range .Docker.Config.Env}}{{println .}}{{end}}' | sed '/^$/d' > "${work}/image.env"
grep -q '^HOSTNAME=' "${work}/image.env" || echo "HOSTNAME=anvil-image-test" >> "${work}/image.env"
grep -q '^HOME=' "${work}/image.env" || echo "HOME=${home:-/}" >> "${work}/image.env"
echo "   user ${user} (${uid}:${gid}); environment: $(grep -v '^PATH=' "${work}/image.env" | tr '\n' ' ')"

# ---- 4. the image run ----------------------------------------------------------------------------
t0=${SECONDS}
unshare --net --mount --pid --uts --ipc --fork --kill-child --mount-proc --propagation private -- \
  bash "${src}/scripts/test-image.sh" --inside "${root}" "${uid}:${gid}" "${work}" \
  || die "the image run failed (anvild's log: ${work}/anvild.log)"
t_run=$((SECONDS - t0))

echo
echo "test-image: PASSED in $((SECONDS - t_start)) s (base images ${t_base} s [${base_note}], build ${t_build} s," \
  "run ${t_run} s); image ${size_mb} MB (bound ${max_mb} MB)"
echo "  passed: HEALTHCHECK in the config, size, health SERVING, a job to SUCCEEDED, Predict, /metrics," \
  "the HEALTHCHECK command, SIGTERM drain"
