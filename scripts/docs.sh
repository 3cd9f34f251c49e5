#!/usr/bin/env bash
# Builds the library's DocC documentation with the toolchain's own tools (no plugin, nothing
# fetched): the symbol graph of the Haul module (and what it re-exports from HaulCore), then the
# Sources/Haul/Haul.docc catalog with warnings as errors (a broken symbol link fails), a check
# that every top-level symbol is curated, then a static site.
#   scripts/docs.sh            -> builds the Haul module, then .build/docs/Haul.doccarchive and
#                                 .build/docs/site/
#   scripts/docs.sh --no-build -> the same from the last `swift build` (as .ci/run does)
# View the site: python3 -m http.server -d .build/docs/site, then /documentation/haul/.
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
"") swift build --target Haul ;;
--no-build) ;;
*)
    echo "usage: scripts/docs.sh [--no-build]" >&2
    exit 2
    ;;
esac
bin=$(swift build --show-bin-path)
if [ ! -d "$bin/Modules" ] || [ ! -e "$bin/CHaulCurl.build/module.modulemap" ]; then
    echo "docs: no build of the Haul module in $bin: run swift build first (or scripts/docs.sh)" >&2
    exit 1
fi
# The target as the compiler names it (with the OS version on macOS, which the module needs).
triple=$(swiftc -print-target-info | sed -n 's/^ *"triple": "\(.*\)",*$/\1/p' | head -n 1)
out=.build/docs
rm -rf "$out" && mkdir -p "$out/symbols"
swift-symbolgraph-extract -module-name Haul -target "$triple" -I "$bin/Modules" \
    -Xcc -fmodule-map-file="$bin/CHaulCurl.build/module.modulemap" \
    -Xcc -fmodule-map-file="$bin/CHaulStart.build/module.modulemap" \
    -minimum-access-level public -experimental-allowed-reexported-modules=HaulCore \
    -output-dir "$out/symbols"
docc convert Sources/Haul/Haul.docc --additional-symbol-graph-dir "$out/symbols" \
    --fallback-display-name Haul --fallback-bundle-identifier dev.haul.Haul \
    --warnings-as-errors --output-path "$out/Haul.doccarchive"
# Every top-level symbol is in a topic group of Haul.md (DocC puts the others in groups it makes).
python3 - "$out/Haul.doccarchive/data/documentation/haul.json" <<'PY'
import json, sys
generated = [t.get("title") for t in json.load(open(sys.argv[1]))["topicSections"] if t.get("generated")]
if generated:
    sys.exit(f"docs: symbols not curated in Haul.md, under DocC's own groups: {generated}")
PY
docc process-archive transform-for-static-hosting "$out/Haul.doccarchive" --output-path "$out/site"
echo "docs: $out/Haul.doccarchive, $out/site (open /documentation/haul/)"
