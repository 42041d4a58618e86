#!/usr/bin/env bash
# TEMPORARY: GPU checkpoint/resume check (deleted after the run).
set -u
export PYTHONPATH=$PWD/trainer_image
W=${W:-4}; B=${B:-4}; S=${S:-20}; E=${E:-2}; STOP=${STOP:-5}; WL=${WL:-resnet}
T="python3 -m decor_trainer.train --workload $WL --epochs $E --steps-per-epoch $S --batch-size $B --width $W --seed 3 --device cuda --checkpoint-every-s 0 $*"
d=$(mktemp -d)
$T --checkpoint-dir $d/a --progress-file $d/a.json 2>$d/a.err || { cat $d/a.err; exit 1; }
$T --checkpoint-dir $d/b --progress-file $d/b.json 2>$d/b.err
$T --checkpoint-dir $d/c --progress-file $d/c.json --step-log $d/c.log 2>$d/c.err &
pid=$!
python3 - "$d/c.json" "$STOP" <<'PY'
import json, sys, time
deadline = time.monotonic() + 300
while time.monotonic() < deadline:
    try:
        if json.load(open(sys.argv[1]))["steps"] >= int(sys.argv[2]): break
    except Exception: pass
    time.sleep(0.005)
PY
kill -TERM $pid; wait $pid; echo "stopped rc=$?"
$T --checkpoint-dir $d/c --progress-file $d/c.json --step-log $d/c.log 2>>$d/c.err; echo "resumed rc=$?"
grep -h -E "training|resumed|checkpoint|signal|done" $d/a.err $d/c.err | cut -c25-
python3 - "$d" <<'PY'
import sys, torch
d = sys.argv[1]
load = lambda n: torch.load(f"{d}/{n}/checkpoint.pt", map_location="cpu", weights_only=True)
a, b, c = load("a"), load("b"), load("c")
steps = [int(x) for x in open(f"{d}/c.log").read().split()]
print("steps", a["step"], c["step"], "log ok:", steps == list(range(a["step"])))
def diff(x, y):
    return max((x["model"][k].double() - y["model"][k].double()).abs().max().item() for k in x["model"])
print("max |straight1 - straight2|", diff(a, b))
print("max |straight1 - stopped+resumed|", diff(a, c))
print(open(f"{d}/c.json").read())
PY
