#!/usr/bin/env bash
# Installs what web-tests/bench/peers.mjs runs against:
#   - the npm packages pinned in package-lock.json (@y/websocket-server,
#     @hocuspocus/server, ws, yjs) by `npm ci` in this folder;
#   - y-sweet 0.9.1 by `cargo install --locked` into $PEERS_ROOT (default
#     /work/.peers, outside the repository; without --locked it does not
#     build). Its build directory is $PEERS_ROOT/target, kept for reuse.
# Idempotent: a step whose result is already there is skipped (FORCE=1 redoes
# both). Margin itself is not built here:
#   cargo build --release -p margin-server --bin margin
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PEERS_ROOT="${PEERS_ROOT:-/work/.peers}"
YSWEET_VERSION="0.9.1"
FORCE="${FORCE:-0}"

echo "== npm packages in $here"
if [[ "$FORCE" != 1 && -d "$here/node_modules/@hocuspocus/server" && -d "$here/node_modules/@y/websocket-server" \
      && "$here/node_modules/.package-lock.json" -nt "$here/package-lock.json" ]]; then
  echo "   already installed (node_modules newer than package-lock.json); skipping npm ci"
else
  echo "   npm ci"
  (cd "$here" && npm ci --no-audit --no-fund)
fi

echo "== y-sweet $YSWEET_VERSION in $PEERS_ROOT"
bin="$PEERS_ROOT/bin/y-sweet"
if [[ "$FORCE" != 1 && -x "$bin" ]] && "$bin" version 2>/dev/null | grep -q "$YSWEET_VERSION"; then
  echo "   $bin is $YSWEET_VERSION; skipping cargo install"
else
  mkdir -p "$PEERS_ROOT"
  echo "   cargo install y-sweet --locked --version $YSWEET_VERSION --root $PEERS_ROOT (takes a few minutes)"
  CARGO_TARGET_DIR="$PEERS_ROOT/target" cargo install y-sweet --locked --version "$YSWEET_VERSION" --root "$PEERS_ROOT"
fi
"$bin" version || true

echo "== done. Run: node $here/peers.mjs   (see $here/README.md)"
