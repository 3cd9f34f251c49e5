# The functions of one binary (argv[2], a file name) that callgrind outputs (cg.*.out in argv[1])
# executed, one mangled name a line: the input of scripts/link-order.sh.
import glob, re, sys
syms=set()
for f in glob.glob(sys.argv[1] + "/cg.*.out"):
    obs={}; fns={}; cur_ob=None; cfn_ob=None
    for line in open(f, errors="replace"):
        line=line.rstrip("\n")
        m=re.match(r"^(c?ob)=\((\d+)\)(?: (.*))?$", line)
        if m:
            if m.group(3): obs[m.group(2)]=m.group(3)
            if m.group(1)=="ob": cur_ob=obs[m.group(2)]
            else: cfn_ob=obs[m.group(2)]
            continue
        m=re.match(r"^(c?fn)=\((\d+)\)(?: (.*))?$", line)
        if m:
            if m.group(3): fns[m.group(2)]=(m.group(3), cur_ob if m.group(1)=="fn" else (cfn_ob or cur_ob))
            if m.group(1)=="fn" and cur_ob and cur_ob.endswith(sys.argv[2]): syms.add(fns[m.group(2)][0])
            cfn_ob=None

for s in sorted(syms): print(s)
