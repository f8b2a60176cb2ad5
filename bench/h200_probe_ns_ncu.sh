#!/usr/bin/env bash
# Probe for issues 14 and 15 on the H200, before building on them: does ncu read hardware counters, does
# CUDA work inside new network/mount/PID namespaces, and does ncu still work inside a network namespace
# whose only link is loopback. Writes $OUT/probe.txt.
OUT=${OUT:-/tmp/probe}; mkdir -p "$OUT"
exec > >(tee "$OUT/probe.txt") 2>&1
cat > /tmp/mm.py <<'PY'
import socket, torch
a = torch.randn(1024, 1024, device="cuda")
for _ in range(3):
    b = a @ a
torch.cuda.synchronize()
s = socket.socket()
try:
    s.settimeout(2); s.connect(("127.0.0.1", 22)); print("connect 127.0.0.1:22 reached")
except OSError as e:
    print("connect 127.0.0.1:22 fails:", e)
print("cuda ok", torch.cuda.get_device_name(), float(b.sum()))
PY
id -u; which ncu compute-sanitizer unshare; ncu --version | tail -1
echo "== ncu, host namespaces"
time timeout 80 ncu --clock-control none --section SpeedOfLight --section Occupancy --section WarpStateStats \
  -k regex:gemm -c 1 --csv --page details python3 /tmp/mm.py > "$OUT/ncu.csv"; echo "ncu rc $?"
head -c 2500 "$OUT/ncu.csv"; echo
echo "== CUDA inside new net+mount+pid namespaces"
time timeout 40 unshare --net --mount --pid --fork sh -c 'ip link set lo up 2>/dev/null || echo "no ip tool"; mount -o remount,ro --bind /tmp /tmp 2>&1 | head -1; touch /tmp/x 2>&1 | head -1; python3 /tmp/mm.py'; echo "ns rc $?"
echo "== ncu inside a net namespace"
time timeout 80 unshare --net --fork sh -c 'ip link set lo up 2>/dev/null; ncu --clock-control none --section SpeedOfLight -k regex:gemm -c 1 --csv --page details python3 /tmp/mm.py' > "$OUT/ncu_netns.csv"; echo "ncu netns rc $?"
tail -c 800 "$OUT/ncu_netns.csv"
