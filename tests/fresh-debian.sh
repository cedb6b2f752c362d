#!/usr/bin/env bash
# Runs the README's test command (.ci/run) as CI would on a fresh Debian 12
# machine: in a chroot made by debootstrap (bookworm, nothing else installed:
# no Rust, none of the test packages), on a clone of this repository's HEAD.
# The chroot shares this machine's kernel, so the network namespaces, taps and
# QEMU guests the tests make are real; everything they start still talks only
# to 127.0.0.0/8 or inside their own namespaces.
#
# Usage: sudo tests/fresh-debian.sh [DIR]   (DIR: the chroot, /srv/fresh)
#   KEEP=1 reuses an existing chroot this script made (packages already
#   installed there), so only the clone is fresh; REUSE_CLONE=1 (implies
#   KEEP) also keeps the clone's target/, moving the clone to HEAD (a re-run
#   after a fix). ../shared (the provider
#   specs the controller tests read) is bind-mounted read-only beside the
#   clone, as it sits beside this checkout. Needs root, debootstrap (apt),
#   ~6 GB of disk.
# Output: the chroot's .ci/run output on stdout; its exit status.
set -euo pipefail
DIR=$(realpath -m "${1:-/srv/fresh}")
cd "$(dirname "$0")/.."
. tests/lib/harness.sh
harness_init fresh-debian.sh
KEEP=${KEEP:-0}
REUSE_CLONE=${REUSE_CLONE:-0}
[[ $REUSE_CLONE != 1 ]] || KEEP=1
# Written once debootstrap has finished: only a directory with it is reused or
# removed by this script (a mistyped existing directory is neither).
MARK=.fresh-debian
MIRROR=${MIRROR:-http://deb.debian.org/debian}

[[ $(id -u) -eq 0 ]] || fail "must run as root"
[[ $DIR == /?*/?* ]] || fail "$DIR: give a directory at least two levels deep"
# Something still mounted inside (a run that was killed before its cleanup):
# removing or re-mounting over it could reach the host's /dev or /sys.
if awk -v d="$DIR" '$2 == d || index($2, d "/") == 1 {found = 1} END {exit !found}' /proc/self/mounts; then
  fail "something is still mounted below $DIR; unmount it first (umount -R $DIR)"
fi
command -v debootstrap >/dev/null || apt-get install -y -q debootstrap

# Everything mounted below is unmounted at exit, last first.
mounted=()
# shellcheck disable=SC2317  # run by the exit hook
unmount_all() {
  local i
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount -R "${mounted[$i]}" 2>/dev/null || umount -l "${mounted[$i]}" || true; done
}
on_exit unmount_all

if [[ $KEEP != 1 || ! -e $DIR/$MARK ]]; then
  if [[ -e $DIR && ! -e $DIR/$MARK ]] && [[ -n $(ls -A "$DIR") ]]; then
    fail "$DIR is not empty and not a chroot this script made; not touching it"
  fi
  rm -rf --one-file-system "$DIR"
  log "debootstrap bookworm $DIR"
  debootstrap bookworm "$DIR" "$MIRROR" >&2
  touch "$DIR/$MARK"
fi
cp /etc/resolv.conf "$DIR/etc/resolv.conf"
# This machine's own trust anchors (/usr/local/share/ca-certificates: e.g. an
# egress proxy's CA) are part of the network the machine is on, not of the
# tests; a fresh machine there has them too. The ca-certificates package
# (deps.sh installs it) adds them to the system store.
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
  mkdir -p "$DIR/usr/local/share/ca-certificates"
  cp /usr/local/share/ca-certificates/*.crt "$DIR/usr/local/share/ca-certificates/"
  chroot "$DIR" sh -c 'command -v update-ca-certificates >/dev/null && update-ca-certificates >/dev/null' || true
fi

mnt() { # fstype-or-bind source target
  mkdir -p "$3"
  if [[ $1 == bind ]]; then mount --rbind "$2" "$3"; else mount -t "$1" "$2" "$3"; fi
  mounted+=("$3") # before anything else can fail, so cleanup undoes it
  if [[ $1 == bind ]]; then mount --make-rslave "$3"; fi
}
# The chroot's / must be a mount point: `ip netns exec` makes it a slave.
mnt bind "$DIR" "$DIR"
mnt proc proc "$DIR/proc"
mnt bind /sys "$DIR/sys"
mnt bind /dev "$DIR/dev"
mnt tmpfs tmpfs "$DIR/run"

if [[ -d ../shared ]]; then
  mnt bind "$(cd ../shared && pwd)" "$DIR/srv/shared"
  mount -o remount,bind,ro "$DIR/srv/shared"
fi

# The clone goes where a CI runner's checkout is: a directory every user
# can traverse (/srv/ci). The tests run programs from it as other users
# (bootd after dropping to nobody, keepalived's check scripts as nobody);
# root's home (0700) is not such a place.
if [[ $REUSE_CLONE != 1 || ! -d $DIR/srv/ci/.git ]]; then
  rm -rf "$DIR/srv/ci"
  git clone -q "$PWD" "$DIR/srv/ci"
else
  # The same clone, moved to this checkout's HEAD; nothing else of it kept but target/.
  git -C "$DIR/srv/ci" fetch -q "$PWD" HEAD
  git -C "$DIR/srv/ci" reset -q --hard FETCH_HEAD
  git -C "$DIR/srv/ci" clean -qfdx -e target
fi
log ".ci/run on $(git -C "$DIR/srv/ci" log --oneline -1)"
rc=0
chroot "$DIR" /usr/bin/env -i HOME=/root TERM=dumb CI=true LANG=C.UTF-8 \
  PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  bash -c 'cd /srv/ci && bash .ci/run' || rc=$?
log ".ci/run exited $rc"
exit "$rc"
