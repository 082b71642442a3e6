#!/usr/bin/env python3
"""The regret study's table (ci/device/regret_study.sh), as markdown for docs/perf.md.

Inputs: the study's tunes.tsv (label, problem key, wall seconds and the sweep's progress line of
tune A and tune B) and the JSON of `fusetune audit --all --json` on each database (a list of
audit summaries, or an object holding one under "audits", or one object per line; per problem:
problem_key, recorded_config_key, best_config_key, recorded_us, best_us, regret, regret_low,
regret_high as fractions; the command itself prints them as problem, recorded_config and
best_config, and both spellings are read). --db-a/--db-b supply the picks (best_configs) where
an audit is missing.

Per shape: the tune seconds (wall, and the sweep's own seconds for the problem), the picks of A
and B, regret A with its 90 % CI, regret B, and the agreement of the two picks: the ratio of
their times, time_A / time_B = (1 + regret_A) / (1 + regret_B) (both audits measure the same
space against its best, so each pick's time over its audit's best compares them; when both
tunes picked the same config the ratio is 1 by definition, and when one audit measured the
other's pick among its contenders that direct ratio is used). Then the median and worst
regret over the shapes (A, B, and both together) and the share of shapes whose picks differ
by <= 1 %, against the targets (median <= 0.5 %, worst <= 2 %, agreement >= 95 %).

Usage: regret_summary.py --tunes tunes.tsv --audit-a audit_A.json --audit-b audit_B.json
         [--db-a A.db --db-b B.db] [--agree 0.01]
       regret_summary.py --self-test"""
import argparse
import csv
import json
import os
import re
import sqlite3
import statistics
import sys
import tempfile

TARGET_MEDIAN, TARGET_WORST, TARGET_AGREEMENT = 0.005, 0.02, 0.95


def load_audits(path):
    """{problem_key: audit dict} from the audit command's JSON (see the module doc)."""
    if not path or not os.path.exists(path):
        return {}, "missing"
    text = open(path).read().strip()
    if not text:
        return {}, "empty"
    entries = []
    try:
        data = json.loads(text)
        if isinstance(data, dict):
            for key in ("audits", "results", "problems"):
                if isinstance(data.get(key), list):
                    data = data[key]
                    break
        entries = data if isinstance(data, list) else [data]
    except json.JSONDecodeError:
        for line in text.splitlines():  # one JSON object per line; skip anything else
            line = line.strip()
            if line.startswith("{"):
                try:
                    entries.append(json.loads(line))
                except json.JSONDecodeError:
                    pass
    out = {}
    for e in entries:
        e = normalized(e)
        if e:
            out[e["problem_key"]] = e
    return out, f"{len(out)} audits" if out else "no audit entries"


# `fusetune audit --json` names the fields problem, recorded_config and best_config; the
# store's AuditSummary (and this script) say problem_key, recorded_config_key, best_config_key.
FIELD_ALIASES = {"problem": "problem_key", "recorded_config": "recorded_config_key", "best_config": "best_config_key"}


def normalized(entry):
    """The audit entry with the store's field names, or None when it names no problem."""
    if not isinstance(entry, dict):
        return None
    e = dict(entry)
    for short, full in FIELD_ALIASES.items():
        if not e.get(full) and e.get(short):
            e[full] = e[short]
    return e if e.get("problem_key") else None


def load_picks(path):
    if not path or not os.path.exists(path) or os.path.getsize(path) == 0:
        return {}
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        return dict(db.execute("SELECT problem_key, config_key FROM best_configs").fetchall())
    except sqlite3.Error:
        return {}


def parse_seconds(progress):
    """The sweep's own seconds for the problem: "... in 3.2 s; ..." or "... in 1m05s; ..."."""
    m = re.search(r" in (\d+)m(\d+)s;", progress or "")
    if m:
        return int(m.group(1)) * 60 + int(m.group(2))
    m = re.search(r" in ([\d.]+) s;", progress or "")
    return float(m.group(1)) if m else None


def load_tunes(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f, delimiter="\t"))


def number(entry, key):
    v = entry.get(key) if entry else None
    return float(v) if isinstance(v, (int, float)) else None


def contender_us(entry, config_key):
    """A config's time in an audit that lists its contenders (any list of objects with
    config_key and median_us), else None."""
    if not entry:
        return None
    for value in entry.values():
        if isinstance(value, list):
            for item in value:
                if isinstance(item, dict) and item.get("config_key") == config_key:
                    us = item.get("median_us", item.get("us"))
                    if isinstance(us, (int, float)) and us > 0:
                        return float(us)
    return None


def pct(x, digits=2):
    return f"{x * 100:.{digits}f} %" if x is not None else "n/a"


def build_rows(tunes, audits_a, audits_b, picks_a, picks_b, agree):
    rows = []
    for t in tunes:
        key = t.get("problem_key") or ""
        a, b = audits_a.get(key), audits_b.get(key)
        pick_a = (a or {}).get("recorded_config_key") or picks_a.get(key)
        pick_b = (b or {}).get("recorded_config_key") or picks_b.get(key)
        ra, rb = number(a, "regret"), number(b, "regret")
        ratio, how = None, ""
        if pick_a and pick_b and pick_a == pick_b:
            ratio, how = 1.0, "same config"
        elif pick_a and pick_b:
            ua, ub = number(a, "recorded_us"), contender_us(a, pick_b)
            if ua and ub:
                ratio, how = ua / ub, "audit A measured both"
            else:
                ua2, ub2 = contender_us(b, pick_a), number(b, "recorded_us")
                if ua2 and ub2:
                    ratio, how = ua2 / ub2, "audit B measured both"
                elif ra is not None and rb is not None:
                    ratio, how = (1 + ra) / (1 + rb), "(1+rA)/(1+rB)"
        rows.append({"label": t.get("label", key), "key": key,
                     "wall_a": _float(t.get("seconds_a")), "wall_b": _float(t.get("seconds_b")),
                     "sweep_a": parse_seconds(t.get("progress_a")), "sweep_b": parse_seconds(t.get("progress_b")),
                     "rc_a": t.get("rc_a"), "rc_b": t.get("rc_b"), "pick_a": pick_a, "pick_b": pick_b,
                     "regret_a": ra, "low_a": number(a, "regret_low"), "high_a": number(a, "regret_high"),
                     "regret_b": rb, "low_b": number(b, "regret_low"), "high_b": number(b, "regret_high"),
                     "best_a": (a or {}).get("best_config_key"), "best_b": (b or {}).get("best_config_key"),
                     "configs_a": number(a, "configs_measured"), "configs_b": number(b, "configs_measured"),
                     "audit_s_a": number(a, "seconds"), "audit_s_b": number(b, "seconds"),
                     "ratio": ratio, "how": how,
                     "agree": (abs(ratio - 1.0) <= agree) if ratio is not None else None})
    return rows


def _float(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _audit_seconds(r):
    if r["audit_s_a"] is None and r["audit_s_b"] is None:
        return ""
    return " ({}/{})".format(*(f"{v:.1f}" if v is not None else "—" for v in (r["audit_s_a"], r["audit_s_b"])))


def _count(v):
    return f"{v:.0f}" if v is not None else "—"


def short_config(key):
    return key if key else "—"


def render(rows, agree, notes):
    out = ["| shape | tune A s (sweep) | tune B s (sweep) | pick A | pick B | regret A [90 % CI] | regret B [90 % CI] "
           "| time A / time B | agree (≤ {:g} %) | configs audited A/B (audit s) |".format(agree * 100),
           "|---|---:|---:|---|---|---:|---:|---:|---|---:|"]

    def secs(wall, sweep, rc):
        if wall is None:
            return "not run" if rc == "skipped" else "—"
        s = f"{wall:.1f}"
        if sweep is not None:
            s += f" ({sweep:.1f})"
        if rc not in (None, "", "0"):
            s += f" rc={rc}"
        return s

    def regret(r, lo, hi):
        if r is None:
            return "n/a"
        ci = f" [{lo * 100:.2f}, {hi * 100:.2f}]" if lo is not None and hi is not None else ""
        return f"{r * 100:.2f} %{ci}"
    for r in rows:
        ratio = f"{r['ratio']:.4f} ({r['how']})" if r["ratio"] is not None else "n/a"
        agreed = "yes" if r["agree"] else ("no" if r["agree"] is not None else "n/a")
        out.append(f"| {r['label']} | {secs(r['wall_a'], r['sweep_a'], r['rc_a'])} | "
                   f"{secs(r['wall_b'], r['sweep_b'], r['rc_b'])} | {short_config(r['pick_a'])} | "
                   f"{short_config(r['pick_b'])} | {regret(r['regret_a'], r['low_a'], r['high_a'])} | "
                   f"{regret(r['regret_b'], r['low_b'], r['high_b'])} | {ratio} | {agreed} | "
                   f"{_count(r['configs_a'])}/{_count(r['configs_b'])}{_audit_seconds(r)} |")
    out.append("")
    ra = [r["regret_a"] for r in rows if r["regret_a"] is not None]
    rb = [r["regret_b"] for r in rows if r["regret_b"] is not None]
    for name, vals in (("A", ra), ("B", rb), ("A and B", ra + rb)):
        if vals:
            med, worst = statistics.median(vals), max(vals)
            out.append(f"- regret {name}: median {pct(med)} (target ≤ {pct(TARGET_MEDIAN, 1)}: "
                       f"{'met' if med <= TARGET_MEDIAN else 'missed'}), worst {pct(worst)} "
                       f"(target ≤ {pct(TARGET_WORST, 0)}: {'met' if worst <= TARGET_WORST else 'missed'}) "
                       f"over {len(vals)} shapes")
        else:
            out.append(f"- regret {name}: no audit results")
    judged = [r for r in rows if r["agree"] is not None]
    if judged:
        share = sum(1 for r in judged if r["agree"]) / len(judged)
        out.append(f"- agreement: {sum(1 for r in judged if r['agree'])}/{len(judged)} shapes "
                   f"({share * 100:.0f} %) have picks within {agree * 100:g} % of each other "
                   f"(target ≥ {TARGET_AGREEMENT * 100:.0f} %: {'met' if share >= TARGET_AGREEMENT else 'missed'}); "
                   f"{sum(1 for r in judged if r['how'] == 'same config')} picked the same config")
    else:
        out.append("- agreement: n/a (no pair of picks with audit results)")
    walls = [(r["label"], r["sweep_a"] if r["sweep_a"] is not None else r["wall_a"]) for r in rows]
    walls = [(label, s) for label, s in walls if s is not None]
    if walls:
        out.append(f"- tune seconds (sweep's own, A): median {statistics.median(s for _, s in walls):.1f}, "
                   f"max {max(s for _, s in walls):.1f} ({max(walls, key=lambda w: w[1])[0]})")
    unmatched = [r["label"] for r in rows if r["best_a"] and r["pick_a"] and r["best_a"] != r["pick_a"]]
    if unmatched:
        out.append(f"- audit A found a faster config than A's pick on: {', '.join(unmatched)}")
    out += [f"- {n}" for n in notes]
    return "\n".join(out) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tunes")
    ap.add_argument("--audit-a")
    ap.add_argument("--audit-b")
    ap.add_argument("--db-a")
    ap.add_argument("--db-b")
    ap.add_argument("--agree", type=float, default=0.01, help="picks agree when their times differ by <= this")
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args(argv)
    if args.self_test:
        return self_test()
    if not args.tunes:
        ap.error("--tunes is required")
    tunes = load_tunes(args.tunes)
    audits_a, state_a = load_audits(args.audit_a)
    audits_b, state_b = load_audits(args.audit_b)
    rows = build_rows(tunes, audits_a, audits_b, load_picks(args.db_a), load_picks(args.db_b), args.agree)
    missing = [r["label"] for r in rows if r["key"] and r["key"] not in audits_a]
    notes = [f"audit A: {state_a}; audit B: {state_b}"]
    if missing:
        notes.append(f"no audit A result for: {', '.join(missing)}")
    sys.stdout.write(render(rows, args.agree, notes))
    return 0


def self_test():
    d = tempfile.mkdtemp(prefix="regret-summary-")
    tunes = os.path.join(d, "tunes.tsv")
    with open(tunes, "w") as f:
        f.write("label\tproblem_key\tseconds_a\trc_a\tprogress_a\tseconds_b\trc_b\tprogress_b\tflags\n")
        f.write("s1\tp1\t2.5\t0\t[1/1] p1: 20 trials (0 resumed, 18 ok) in 1.9 s; best x\t2.4\t0\t"
                "[1/1] p1: 20 trials (0 resumed, 18 ok) in 1.8 s; best x\t--seq 1\n")
        f.write("s2\tp2\t70.1\t0\t[1/1] p2: 30 trials in 1m05s; best y\t5.0\t124\t\t--seq 2\n")
        f.write("s3\tp3\t3.0\t0\t\t3.0\t0\t\t--seq 3\n")
    a = [{"problem_key": "p1", "recorded_config_key": "c1", "best_config_key": "c1", "regret": 0.0,
          "regret_low": -0.002, "regret_high": 0.003, "recorded_us": 40.0, "best_us": 40.0, "configs_measured": 31},
         {"problem_key": "p2", "recorded_config_key": "c2", "best_config_key": "c3", "regret": 0.05,
          "regret_low": 0.04, "regret_high": 0.06, "recorded_us": 105.0, "best_us": 100.0},
         {"problem_key": "p3", "recorded_config_key": "c5", "best_config_key": "c5", "regret": 0.001,
          "regret_low": 0.0, "regret_high": 0.002, "recorded_us": 10.0, "best_us": 10.0,
          "contenders": [{"config_key": "c5", "median_us": 10.0}, {"config_key": "c6", "median_us": 10.5}]}]
    b = [{"problem": "p1", "recorded_config": "c1", "regret": 0.001, "regret_low": 0.0, "regret_high": 0.002},
         {"problem": "p2", "recorded_config": "c3", "best_config": "c3", "regret": 0.0, "regret_low": -0.01,
          "regret_high": 0.01},
         {"problem": "p3", "recorded_config": "c6", "regret": 0.04, "regret_low": 0.03, "regret_high": 0.05}]
    pa, pb = os.path.join(d, "a.json"), os.path.join(d, "b.json")
    json.dump({"audits": a}, open(pa, "w"))
    with open(pb, "w") as f:  # one object per line, with a stray log line
        f.write("audit: 3 problems\n" + "\n".join(json.dumps(x) for x in b) + "\n")
    audits_a, _ = load_audits(pa)
    audits_b, _ = load_audits(pb)
    assert set(audits_a) == set(audits_b) == {"p1", "p2", "p3"}
    assert load_audits(os.path.join(d, "absent.json")) == ({}, "missing")
    assert parse_seconds("[1/1] p: 3 trials in 1m05s; best") == 65
    assert parse_seconds("x in 1.9 s; best") == 1.9 and parse_seconds("") is None
    rows = build_rows(load_tunes(tunes), audits_a, audits_b, {}, {}, 0.01)
    by = {r["label"]: r for r in rows}
    assert by["s1"]["ratio"] == 1.0 and by["s1"]["agree"] and by["s1"]["how"] == "same config"
    assert abs(by["s2"]["ratio"] - 1.05) < 1e-12 and not by["s2"]["agree"] and by["s2"]["how"] == "(1+rA)/(1+rB)"
    assert abs(by["s3"]["ratio"] - 10.0 / 10.5) < 1e-12 and by["s3"]["how"] == "audit A measured both"
    assert by["s2"]["sweep_a"] == 65 and by["s1"]["sweep_b"] == 1.8
    assert by["s2"]["pick_b"] == "c3" and by["s2"]["best_b"] == "c3"
    text = render(rows, 0.01, ["self-test"])
    assert "regret A: median 0.10 %" in text and "worst 5.00 %" in text, text
    assert "1/3 shapes (33 %)" in text, text
    assert "| 31/— |" in text, text
    sys.stdout.write(text)
    print("self-test passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
