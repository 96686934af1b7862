#!/usr/bin/env bash
# Packs what a GPU machine without Node.js needs to run `pnpm test:cuda` and `pnpm bench:cuda` from built output:
# this node binary, the workspace's node_modules (without the WebGPU, tfjs, TypeScript and lint packages,
# which those runs never load), every dist folder, and the shared traces (read from ../shared, never committed).
# Writes .node-carry/bundle.tar.xz (git-ignored); scripts/device-cuda.sh unpacks it there and runs both.
set -euo pipefail
cd "$(dirname "$0")/.."
npx tsc -b tsconfig.json tsconfig.test.json tools/lab/tsconfig.bench.json
rm -rf .node-carry && mkdir -p .node-carry/stage/.node-carry/bin
cp "$(command -v node)" .node-carry/stage/.node-carry/bin/node
cp -r ../shared/traces .node-carry/stage/.node-carry/traces
mapfile -t built < <(find . -path ./node_modules -prune -o -path ./.node-carry -prune -o \
  \( -name node_modules -o -name 'dist' -o -name 'dist-test' -o -name 'dist-bench' \) -type d -print -prune)
tar -cf - --exclude='node_modules/.pnpm/webgpu@*' --exclude='node_modules/.pnpm/@tensorflow*' \
  --exclude='node_modules/.pnpm/typescript@*' \
  --exclude='node_modules/.pnpm/*eslint*' \
  node_modules "${built[@]}" -C .node-carry/stage .node-carry | xz -T2 -6 > .node-carry/bundle.tar.xz
rm -rf .node-carry/stage
ls -la .node-carry/bundle.tar.xz
