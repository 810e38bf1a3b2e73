#!/usr/bin/env bash
# Runs COMMAND with a default Debian /etc/hosts, in a private mount namespace of its own:
#
#   127.0.0.1	localhost
#   ::1		localhost ip6-localhost ip6-loopback
#
# There `localhost` resolves to ::1 first, then 127.0.0.1 (glibc's getaddrinfo sorts ::1
# ahead), while a node listens on 127.0.0.1 by default: the case clients/vectors/CONNECT.md
# is about. The connect tests of every client re-run themselves through this script.
#
#   bash clients/with-debian-hosts.sh COMMAND [ARG...]
#
# Needs root (CI runs as root) or, for other users, unprivileged user namespaces. It FAILS,
# never falls back to the machine's own /etc/hosts, when it cannot set the namespace up or
# when `localhost` does not then resolve to ::1 and 127.0.0.1 in that order. The bind mount
# is private to the namespace: the machine's /etc/hosts is never touched.
set -euo pipefail

fail() { echo "with-debian-hosts.sh: $*" >&2; exit 1; }

if [ "${1:-}" = "--inside" ]; then
  hosts="$2"; shift 2
  mount --bind "$hosts" /etc/hosts || fail "cannot bind-mount $hosts over /etc/hosts"
  rm -f "$hosts"
  got="$(getent ahosts localhost | awk '$2 == "STREAM" { print $1 }' | tr '\n' ' ')"
  [ "$got" = "::1 127.0.0.1 " ] ||
    fail "localhost resolves to '${got% }' here, not '::1 127.0.0.1': the test would prove nothing"
  exec "$@"
fi

[ $# -ge 1 ] || { echo "usage: $0 COMMAND [ARG...]" >&2; exit 2; }
command -v unshare >/dev/null || fail "unshare (util-linux) is missing"
hosts="$(mktemp "${TMPDIR:-/tmp}/idgen-hosts.XXXXXX")"
printf '127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n' > "$hosts"
ns=(unshare --mount --propagation private)
[ "$(id -u)" = 0 ] || ns=(unshare --map-root-user --mount --propagation private)
if ! "${ns[@]}" true 2>/dev/null; then
  rm -f "$hosts"
  fail "cannot create a mount namespace ('${ns[*]}' failed): run as root, or enable unprivileged user namespaces"
fi
exec "${ns[@]}" bash "$0" --inside "$hosts" "$@"
