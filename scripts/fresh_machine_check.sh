#!/usr/bin/env bash
# Fresh-machine check (not part of CI): makes a new Debian 12 root with debootstrap, copies a
# clean clone of this repository into it, and runs the README's two commands, `make demo` then
# `make test`, inside it (chroot with /proc, /sys and /dev mounted) with nothing from this
# machine: no packages, no Python environment, no ccache, no pip cache. Only network access
# (Debian's mirror and PyPI, with the host's resolver and TLS trust) comes from outside. Writes the result (date, durations, pass/fail,
# last lines) to docs/fresh-machine.md. Takes an hour or more on 2 cores.
#
#   sudo scripts/fresh_machine_check.sh [ROOT_DIR]     (default: /var/tmp/moescope-fresh)
# Environment:
#   MOESCOPE_FRESH_REF     the commit to check (default: HEAD)
#   MOESCOPE_FRESH_MIRROR  Debian mirror (default: http://deb.debian.org/debian)
#   MOESCOPE_FRESH_KEEP=1  keep the root afterwards (default: removed; the pristine debootstrap
#                          result stays in ROOT_DIR.base for the next run)
set -uo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
fresh=${1:-/var/tmp/moescope-fresh}
ref=${MOESCOPE_FRESH_REF:-HEAD}
mirror=${MOESCOPE_FRESH_MIRROR:-http://deb.debian.org/debian}
result="$repo/docs/fresh-machine.md"
logs="$repo/.cache/fresh-machine"

[ "$(id -u)" = 0 ] || { echo "fresh_machine_check: run as root (debootstrap and chroot)" >&2; exit 2; }
command -v debootstrap >/dev/null ||
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null; } ||
  { echo "fresh_machine_check: cannot install debootstrap" >&2; exit 2; }

mounted=()
cleanup() {
  local i
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount -l "${mounted[i]}" 2>/dev/null; done
  [ "${MOESCOPE_FRESH_KEEP:-0}" = 1 ] || rm -rf --one-file-system "$fresh"
}
trap cleanup EXIT
mount_into() {  # SOURCE TARGET [OPTIONS...]
  mkdir -p "$fresh$2" && mount "${@:3}" "$1" "$fresh$2" && mounted+=("$fresh$2")
}

rm -rf "$logs" && mkdir -p "$logs"
started=$(date -u '+%Y-%m-%d %H:%M UTC')
commit=$(git -C "$repo" rev-parse "$ref")
stage_names=() stage_seconds=() stage_status=()
stage() {  # NAME COMMAND...: runs, times and logs one stage
  local name=$1 start=$SECONDS rc
  shift
  echo "== $name"
  "$@" >"$logs/$name.log" 2>&1
  rc=$?
  stage_names+=("$name") stage_seconds+=($((SECONDS - start))) stage_status+=("$rc")
  echo "   exit $rc after $((SECONDS - start)) s (log: $logs/$name.log)"
  return $rc
}

bootstrap() {
  # The untouched debootstrap result is kept in $fresh.base (Debian's packages only), so a rerun
  # starts from a copy instead of bootstrapping again (25 minutes on a busy 2-core machine).
  rm -rf --one-file-system "$fresh"
  if [ ! -f "$fresh.base/.complete" ]; then
    rm -rf --one-file-system "$fresh.base"
    debootstrap bookworm "$fresh.base" "$mirror" && touch "$fresh.base/.complete" || return 1
  fi
  cp -a "$fresh.base" "$fresh" && rm "$fresh/.complete"
}
enter() {
  # Network access is all that comes from the host: its resolver and, where the host reaches the
  # internet through a TLS-inspecting proxy, the local CA certificates and pip's cert setting.
  cp /etc/resolv.conf "$fresh/etc/resolv.conf"
  # What Debian's installer writes and debootstrap does not: the machine's own name, resolvable
  # (Gloo, under torchrun, resolves it to pick its interface: without it the ranks never meet).
  hostname >"$fresh/etc/hostname"
  grep -q '^127\.0\.1\.1' "$fresh/etc/hosts" 2>/dev/null ||
    printf '127.0.1.1\t%s\n' "$(hostname)" >>"$fresh/etc/hosts"
  mkdir -p "$fresh/usr/local/share/ca-certificates"
  cp /usr/local/share/ca-certificates/*.crt "$fresh/usr/local/share/ca-certificates/" 2>/dev/null
  [ -f /etc/pip.conf ] && cp /etc/pip.conf "$fresh/etc/pip.conf"
  # What a new user does on a fresh Debian 12: apt-get the tools to fetch and run the project.
  chroot "$fresh" /usr/bin/env -i HOME=/root PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 \
    bash -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq git make ca-certificates >/dev/null && update-ca-certificates >/dev/null'
}
clone() {
  # A clean clone of the commit (no build folders, no .venv, no .cache from this checkout).
  git clone -q --no-local "$repo" "$fresh/root/moescope" &&
    git -C "$fresh/root/moescope" checkout -q "$commit"
}
inside() {  # COMMAND: run in the fresh root as a logged-in root user would
  chroot "$fresh" /usr/bin/env -i HOME=/root PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 \
    TERM=dumb bash -lc "cd /root/moescope && $1"
}

overall=fail
# The root a mount point of its own, as / is on a machine (tests make private mount namespaces).
if stage debootstrap bootstrap &&
   mount --bind "$fresh" "$fresh" && mounted+=("$fresh") &&
   mount_into /proc /proc -t proc && mount_into /sys /sys -t sysfs &&
   mount_into /dev /dev --bind && mount_into /dev/pts /dev/pts --bind &&
   mount_into tmpfs /dev/shm -t tmpfs &&
   stage apt-get-git-make enter && stage clone clone &&
   stage make-demo inside "make demo" &&
   stage make-test inside "make test"; then
  overall=pass
fi

{
  echo "# Fresh-machine check"
  echo
  echo "\`scripts/fresh_machine_check.sh\`: a new Debian 12 root (debootstrap bookworm, $mirror),"
  echo "a clean clone of the repository, then the README's two commands inside it (chroot) with"
  echo "nothing from the host but network access. Not part of CI; run it by hand after changes to"
  echo "setup or the build."
  echo
  echo "Last run: $started, commit ${commit:0:10}, host $(nproc) cores (load at the end: $(cut -d' ' -f1-3 /proc/loadavg))."
  echo "Result: **$overall**"
  echo
  echo "| stage | seconds | exit |"
  echo "|---|---|---|"
  for i in "${!stage_names[@]}"; do
    echo "| ${stage_names[i]} | ${stage_seconds[i]} | ${stage_status[i]} |"
  done
  for name in make-demo make-test; do
    [ -f "$logs/$name.log" ] || continue
    echo
    echo "Last lines of \`$name\`:"
    echo
    echo '```'
    if [ $name = make-test ]; then
      grep -E 'tests passed|tests failed|Total Test time|\(Failed\)|\(Not Run\)|\*\*\*Failed|\*\*\*Timeout' "$logs/$name.log" | tail -40
    else
      tail -25 "$logs/$name.log"
    fi
    echo '```'
  done
} >"$result"
echo "fresh_machine_check: $overall; wrote $result"
[ $overall = pass ]
