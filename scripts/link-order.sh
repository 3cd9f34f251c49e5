#!/usr/bin/env bash
# Remakes Sources/HaulCLI/Link/haul.order: the functions of the release `haul` that a few
# typical runs execute (recorded by valgrind's callgrind), which the release link places
# together so that a run maps fewer of the binary's pages (docs/startup.md). The first runs are
# the shapes the benchmarks measure (a 1 KiB file, one connection, --version, a -q list) and
# their functions come first (scripts/link-order-symbols.py). A stale list is harmless: names it
# lacks are linked where they would be anyway, names it has that are gone are ignored; the old
# list's names that no run sees stay, after those of their kind that one does (empty the file
# first, `: >Sources/HaulCLI/Link/haul.order`, which the link accepts, to start afresh). Needs
# valgrind, objcopy and nm (binutils) and python3; talks only to a server it starts on
# 127.0.0.1 (scripts/link-order-server.py, which sends validators and byte ranges as nginx does).
set -euo pipefail
cd "$(dirname "$0")/.."
for tool in valgrind objcopy nm python3; do
    command -v "$tool" >/dev/null || { echo "link-order.sh: $tool is missing" >&2; exit 1; }
done
export no_proxy='*' NO_PROXY='*'
swift build -c release --product haul
work=$(mktemp -d)
# A directory on tmpfs too, where a small file is not synced at all (another path than on a
# disk); the disk's directory again where there is no /dev/shm.
shm=$(mktemp -d -p /dev/shm 2>/dev/null || mktemp -d)
server=
trap '[ -n "$server" ] && kill "$server" 2>/dev/null || true; rm -rf "$work" "$shm"' EXIT
# valgrind gives up on the release build's debug information ("debuginfo reader: Possibly
# corrupted debuginfo file"); the symbol table is all it needs here.
objcopy --strip-debug .build/release/haul "$work/haul"
head -c 2000000 /dev/urandom >"$work/file.bin"
head -c 8000000 /dev/urandom >"$work/big.bin"
head -c 1024 /dev/urandom >"$work/small.bin"
for n in 1 2 3; do head -c 16384 /dev/urandom >"$work/list$n.bin"; done
python3 -u scripts/link-order-server.py "$work" >"$work/server.log" 2>&1 &
server=$!
for _ in $(seq 50); do grep -q "port" "$work/server.log" && break; sleep 0.1; done
port=$(grep -o 'port [0-9]*' "$work/server.log" | grep -o '[0-9]*' || true)
[ -n "$port" ] || { echo "link-order.sh: the local server did not start" >&2; exit 1; }
base="http://127.0.0.1:$port"
url="$base/file.bin"
printf '%s\n' "$base/list1.bin" "$base/list2.bin" "$base/list3.bin" >"$work/list.txt"
# record NAME STATUS ARGS...: haul ARGS under callgrind, which must end with STATUS (a run that
# failed otherwise would record an error's path instead of the one named).
record() {
    local name=$1 want=$2 status=0
    shift 2
    valgrind --tool=callgrind --demangle=no --callgrind-out-file="$work/cg.$name.out" \
        "$work/haul" "$@" >/dev/null 2>&1 || status=$?
    [ "$status" = "$want" ] || { echo "link-order.sh: $name ended with $status, not $want" >&2; exit 1; }
    [ -s "$work/cg.$name.out" ] || { echo "link-order.sh: valgrind recorded nothing for $name" >&2; exit 1; }
}
# In rank order: the benchmarks' shapes first (Benchmarks/startup.py, single_stream.py,
# many_small.py), then the other ways a run goes.
record 01-small 0 get -q -o "$work/small.bin.out" "$base/small.bin"
record 02-one-connection 0 get -q -x 1 --overwrite -o "$shm/big.bin" "$base/big.bin"
record 03-version 0 --version
record 04-quiet-list 0 get -q -j 3 -i "$work/list.txt" -d "$shm/quiet"
record 05-file 0 get -o "$work/one.bin" "$url"
record 06-tmpfs 0 get -o "$shm/one.bin" "$url"
record 07-stdout 0 get -o - "$url"
record 08-list 0 get -j 3 -i "$work/list.txt" -d "$work/list"
record 09-connections 0 get -x 4 -o "$work/four.bin" "$url"
record 10-refused 3 get "http://127.0.0.1:1/x"
record 11-usage 2 get -P "$work" "$url"
record 12-help 0 --help
cp Sources/HaulCLI/Link/haul.order "$work/previous"
python3 scripts/link-order-symbols.py "$work" haul .build/release/*.build/*.o >"$work/order"
mv "$work/order" Sources/HaulCLI/Link/haul.order
wc -l Sources/HaulCLI/Link/haul.order
# The list is not an input SwiftPM tracks: link again with it.
rm -f .build/release/haul
swift build -c release --product haul
