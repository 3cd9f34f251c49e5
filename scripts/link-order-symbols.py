# The order of scripts/link-order.sh: the functions of one binary (argv[2], a file name) that
# callgrind saw executed in the runs of argv[1] (cg.NN-name.out, NN the run's rank), one mangled
# name a line, most wanted first. The release link places them in that order (docs/startup.md):
# - the package's own functions (those the object files argv[3:] define) before the rest: its
#   Swift code is compiled with a section per function; a function of the Swift runtime or
#   Dispatch may share one with a megabyte of others, which would split the run's code where it
#   fell (the package's C targets share one per file too, but they are small);
# - within each of the two, by the first run that executes a function, so that the first runs
#   (the benchmarks' shapes) touch a short stretch of the binary, and last the names of an older
#   list (argv[1]/previous, if any) that no run saw. (All such names last, after the runtime's
#   too, measured 0.5 MiB more at the 1 GiB run's peak: the runtime's shared sections then fell
#   elsewhere.)
# Callgrind names an object or function once as "ob=(id) name" / "fn=(id) name" and after that
# by "(id)" alone; "cob="/"cfn=" lines (the callee of a call) share those tables. A function
# without a symbol is named by its address, a recursion level gets a "'N" suffix: neither is a
# symbol to order.
import glob, os, re, subprocess, sys

work, binary, objects = sys.argv[1], sys.argv[2], sys.argv[3:]


def executed(path):
    functions, objects_seen, names, current = set(), {}, {}, None
    for line in open(path, errors="replace"):
        m = re.match(r"^(c?ob|c?fn)=\((\d+)\)(?: (.*))?$", line.rstrip("\n"))
        if not m:
            continue
        kind, key, name = m.groups()
        table = objects_seen if kind.endswith("ob") else names
        if name:
            table[key] = name
        if kind == "ob":
            current = objects_seen[key]
        elif kind == "fn" and current and os.path.basename(current) == binary:
            base = re.sub(r"'\d+$", "", names[key])
            if not base.startswith(("0x", "(")):
                functions.add(base)
    return functions


first_run = {}
for rank, path in enumerate(sorted(glob.glob(os.path.join(work, "cg.*.out")))):
    for name in executed(path):
        first_run.setdefault(name, rank)
later = max(first_run.values(), default=-1) + 1
previous = os.path.join(work, "previous")
if os.path.exists(previous):
    for name in open(previous).read().split():
        first_run.setdefault(name, later)

ours = set()
for chunk in range(0, len(objects), 200):
    listing = subprocess.run(["nm", "--defined-only", *objects[chunk:chunk + 200]],
                             capture_output=True, text=True, check=True).stdout
    ours.update(f[2] for f in (line.split() for line in listing.splitlines()) if len(f) == 3 and f[1] in "tTwW")

for name in sorted(first_run, key=lambda n: (n not in ours, first_run[n], n)):
    print(name)
