#!/usr/bin/env python3
"""GPU busy from an NVML utilization log (gpu-run.sh's multi phase writes one per
stream: `nvidia-smi --query-gpu=timestamp,index,utilization.gpu --format=csv,noheader
-lms 250`). Per device: the window from the first to the last sample at >= 50% (the
GPU-active part of the stream, without the fill before the first partition) and the
mean utilization over it.

    python3 scripts/nvml-busy.py run23-x2-multi-22-devall-pcie1-nvml.csv
"""
import csv
import datetime
import sys

for name in sys.argv[1:]:
    rows = []
    for r in csv.reader(open(name)):
        if len(r) < 3:
            continue
        t = datetime.datetime.strptime(r[0].strip(), "%Y/%m/%d %H:%M:%S.%f").timestamp()
        rows.append((t, int(r[1]), int(r[2].strip().split()[0])))
    out = []
    for dev in sorted({r[1] for r in rows}):
        rr = [r for r in rows if r[1] == dev]
        active = [r for r in rr if r[2] >= 50]
        if not active:
            out.append(f"device {dev}: idle")
            continue
        t0, t1 = active[0][0], active[-1][0]
        w = [r[2] for r in rr if t0 <= r[0] <= t1]
        out.append(f"device {dev}: window {t1 - t0:.2f} s, mean {sum(w) / len(w):.1f}% ({len(w)} samples)")
    print(f"{name}: " + "; ".join(out))
