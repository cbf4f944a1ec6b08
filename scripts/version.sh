#!/usr/bin/env bash
# Prints gpu-runtime's version: what `make build` stamps into the binaries (--version) and
# what `make package` names the packages with. One rule, valid as a Debian and an RPM version:
#
#   $VERSION, when set                   used as given (checked below): VERSION=1.2.3 make package
#   on tag v1.2.3 (or 1.2.3)             1.2.3        (a tag v1.2.3-rc1 gives 1.2.3~rc1: before 1.2.3)
#   7 commits after tag v1.2.3           1.2.3+git7.<hash>          (after 1.2.3, before 1.2.4)
#   no tag yet                           0.0.0~git<commits>.<hash>  (before any release)
#   outside a git checkout               0.0.0~unknown
#   uncommitted changes to tracked files .dirty appended
#
# <hash> is the commit's abbreviated hash; <commits> the number of commits up to it, so that
# later untagged builds sort after earlier ones. A version must start with a digit and hold only
# letters, digits and . + ~ (dpkg and rpm both accept these; '-' separates the release).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

check() {
  if [[ ! "$1" =~ ^[0-9][A-Za-z0-9.+~]*$ ]]; then
    echo "version.sh: \"$1\" is not a package version: it must start with a digit and hold only letters, digits and . + ~" >&2
    exit 1
  fi
  printf '%s\n' "$1"
}

if [ -n "${VERSION:-}" ]; then
  check "$VERSION"
  exit 0
fi
if ! git rev-parse --git-dir >/dev/null 2>&1; then
  check 0.0.0~unknown
  exit 0
fi

dirty=""
git diff-index --quiet HEAD -- 2>/dev/null || dirty=".dirty"
hash="$(git rev-parse --short=12 HEAD)"
if desc="$(git describe --tags --long --match '[0-9]*' --match 'v[0-9]*' 2>/dev/null)"; then
  # <tag>-<commits since>-g<hash>
  since="${desc%-g*}"
  since="${since##*-}"
  tag="${desc%-*-g*}"
  tag="${tag#v}"
  tag="${tag//-/\~}"
  if [ "$since" = 0 ]; then
    check "$tag$dirty"
  else
    check "$tag+git$since.$hash$dirty"
  fi
else
  check "0.0.0~git$(git rev-list --count HEAD).$hash$dirty"
fi
