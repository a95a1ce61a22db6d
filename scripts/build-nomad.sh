#!/usr/bin/env bash
# Builds the real Nomad agent the Nomad bridge's end-to-end tests drive
# (test/peers/e2e/nomad_*), from the Go module proxy, into a cache outside
# the repository: $NOMAD_CACHE/nomad (default
# $HOME/.cache/volhost/nomad-$NOMAD_VERSION/nomad). Skips when present.
#
# Nomad is BUSL-1.1: the binary is built for local tests only and is never
# committed nor vendored. Only its api module (MPL-2.0) is a volhost
# dependency.
#
# Nomad's go.mod replaces github.com/hashicorp/nomad/api with ./api, which
# the module zip does not hold (api is its own module), so `go install`
# refuses it. The script copies the module source to a temporary folder,
# drops that replace, requires the api pseudo-version published from the
# same release branch, and builds with GOFLAGS=-mod=mod (about 10 minutes
# of CPU on 2 cores the first time; the Go build cache keeps later builds
# short). Release builds' tags (hashicorpmetrics) are kept; the web UI
# (tag ui) is not needed.
#
# Usage: scripts/build-nomad.sh        (FORCE=1 rebuilds; prints the path)
set -euo pipefail
NOMAD_VERSION=${NOMAD_VERSION:-v1.11.3}
NOMAD_API_VERSION=${NOMAD_API_VERSION:-v0.0.0-20261016150620-df630b26e78a}
NOMAD_CACHE=${NOMAD_CACHE:-$HOME/.cache/volhost/nomad-$NOMAD_VERSION}
bin=$NOMAD_CACHE/nomad
if [[ -x $bin && -z ${FORCE:-} ]]; then
	echo "$bin"
	exit 0
fi
mkdir -p "$NOMAD_CACHE"
src=$(go mod download -json "github.com/hashicorp/nomad@$NOMAD_VERSION" |
	awk -F'"' '/"Dir":/ { print $4 }')
[[ -d $src ]] || { echo "build-nomad: no source for nomad@$NOMAD_VERSION" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'chmod -R u+w "$tmp"; rm -rf "$tmp"' EXIT
cp -r "$src/." "$tmp/"
chmod -R u+w "$tmp"
cd "$tmp"
go mod edit -dropreplace github.com/hashicorp/nomad/api \
	-require "github.com/hashicorp/nomad/api@$NOMAD_API_VERSION"
echo "build-nomad: building nomad $NOMAD_VERSION (api $NOMAD_API_VERSION) into $bin" >&2
start=$(date +%s)
GOFLAGS=-mod=mod go build -trimpath -tags hashicorpmetrics -o "$bin.tmp" .
mv "$bin.tmp" "$bin"
echo "build-nomad: built in $(( $(date +%s) - start ))s" >&2
echo "$bin"
