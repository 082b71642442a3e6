"""Turns a fused_dev bench.csv into the markdown table of docs/perf.md: per shape and
precision, the best and worst config (median us, TFLOP/s) and their ratio."""
import csv
import sys
from collections import defaultdict

rows = list(csv.DictReader(open(sys.argv[1])))
groups = defaultdict(list)
for r in rows:
    if r["verified"] != "1":
        continue
    prec = r["config"].split("/")[4]
    groups[(r["problem"], prec)].append(r)
print("| problem | precision | best config | median µs | TFLOP/s | worst config | median µs | worst/best |")
print("|---|---|---|---|---|---|---|---|")
for (prob, prec), rs in groups.items():
    rs.sort(key=lambda r: float(r["median_us"]))
    b, w = rs[0], rs[-1]
    print("| %s | %s | %s | %.1f | %.1f | %s | %.1f | %.2f |" % (
        prob, prec, b["config"], float(b["median_us"]), float(b["tflops"]), w["config"],
        float(w["median_us"]), float(w["median_us"]) / float(b["median_us"])))
