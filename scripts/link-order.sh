#!/usr/bin/env bash
# Remakes Sources/HaulCLI/Link/haul.order: the functions of the release `haul` that a few
# typical runs execute (recorded by valgrind's callgrind), which the release link places
# together so that a run maps fewer of the binary's pages (docs/startup.md). A stale list is
# harmless: names it lacks are linked where they would be anyway, names it has that are gone
# are ignored. A run adds to the list (a function one run misses another may catch); empty the
# file (`: >Sources/HaulCLI/Link/haul.order`, which the link accepts) to start afresh. Needs
# valgrind, objcopy (binutils) and python3; talks only to a server it starts on 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/.."
for tool in valgrind objcopy python3; do
    command -v "$tool" >/dev/null || { echo "link-order.sh: $tool is missing" >&2; exit 1; }
done
export no_proxy='*' NO_PROXY='*'
swift build -c release --product haul
work=$(mktemp -d)
# A directory on tmpfs too, where a small file is synced by the file worker itself (another
# path than on a disk); the disk's directory again where there is no /dev/shm.
shm=$(mktemp -d -p /dev/shm 2>/dev/null || mktemp -d)
server=
trap '[ -n "$server" ] && kill "$server" 2>/dev/null || true; rm -rf "$work" "$shm"' EXIT
# valgrind gives up on the release build's debug information ("debuginfo reader: Possibly
# corrupted debuginfo file"); the symbol table is all it needs here.
objcopy --strip-debug .build/release/haul "$work/haul"
head -c 2000000 /dev/urandom >"$work/file.bin"
python3 -u -m http.server -b 127.0.0.1 0 -d "$work" >"$work/server.log" 2>&1 &
server=$!
for _ in $(seq 50); do grep -q "port" "$work/server.log" && break; sleep 0.1; done
port=$(grep -o 'port [0-9]*' "$work/server.log" | grep -o '[0-9]*' || true)
[ -n "$port" ] || { echo "link-order.sh: the local server did not start" >&2; exit 1; }
url="http://127.0.0.1:$port/file.bin"
printf '%s\n' "$url?a" "$url?b" "$url?c" >"$work/list.txt"
record() {
    local name=$1
    shift
    valgrind --tool=callgrind --demangle=no --callgrind-out-file="$work/cg.$name.out" \
        "$work/haul" "$@" >/dev/null 2>&1 || true
    [ -s "$work/cg.$name.out" ] || { echo "link-order.sh: valgrind recorded nothing for $name" >&2; exit 1; }
}
record file get -o "$work/one.bin" "$url"
record tmpfs get -o "$shm/one.bin" "$url"
record version --version
record stdout get -o - "$url"
record list get -j 3 -i "$work/list.txt" -d "$work/list"
record quiet-list get -q -j 3 -i "$work/list.txt" -d "$work/quiet"
record connections get -x 4 -o "$work/four.bin" "$url"
record refused get "http://127.0.0.1:1/x"
record usage get -P "$work" "$url"
record help --help
{ cat Sources/HaulCLI/Link/haul.order; python3 scripts/link-order-symbols.py "$work" haul; } | LC_ALL=C sort -u >"$work/order"
mv "$work/order" Sources/HaulCLI/Link/haul.order
wc -l Sources/HaulCLI/Link/haul.order
# The list is not an input SwiftPM tracks: link again with it.
rm -f .build/release/haul
swift build -c release --product haul
