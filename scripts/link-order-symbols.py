# The functions of one binary (argv[2], a file name) that callgrind outputs (cg.*.out in argv[1])
# executed, one mangled name a line: the input of scripts/link-order.sh. Callgrind names an
# object or function once as "ob=(id) name" / "fn=(id) name" and after that by "(id)" alone;
# "cob="/"cfn=" lines (the callee of a call) share those tables. A function without a symbol
# is named by its address, a recursion level gets a "'N" suffix: neither is a symbol to order.
import glob, os, re, sys

functions = set()
for path in glob.glob(os.path.join(sys.argv[1], "cg.*.out")):
    objects, names, current = {}, {}, None
    for line in open(path, errors="replace"):
        m = re.match(r"^(c?ob|c?fn)=\((\d+)\)(?: (.*))?$", line.rstrip("\n"))
        if not m:
            continue
        kind, key, name = m.groups()
        table = objects if kind.endswith("ob") else names
        if name:
            table[key] = name
        if kind == "ob":
            current = objects[key]
        elif kind == "fn" and current and os.path.basename(current) == sys.argv[2]:
            functions.add(names[key])

for name in sorted(functions):
    base = re.sub(r"'\d+$", "", name)
    if not base.startswith(("0x", "(")):
        print(base)
