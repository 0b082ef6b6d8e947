#!/usr/bin/env python3
"""report.py -- the report of bench/run.sh: results.json, results.md and PNG charts
(gnuplot) from OUT/raw.txt and OUT/machine.txt, with the performance goals checked.

    bench/report.py OUT

raw.txt: one line per measurement, "TARGET REP NAME KEY=VALUE ...", NAME one of
smallfile.{create,randmod,append,empty} (ops_s), meta.{create,readdir,rename,stat,unlink}
(n, total_s), fio.RW.BS.JOBS (json=FIO_OUTPUT), seq.{write,read} (mib_s, ok; bench/seqio),
tar / git / build / mfiles.{create,ls,rm}
(secs, ok), with durable_s for the targets that buffer writes and, on mfiles.rm, deleted_s
for the targets that delete objects after the unlink.  machine.txt: key=value lines
(bench/run.sh writes them; a "note" line is printed under the method).
Exit status: 0 every goal met, 1 a goal missed or not measurable.
"""
import json
import os
import statistics
import subprocess
import sys

TARGETS = ["disk", "pthp", "pthpwb", "kpt", "sqlite", "s3wb", "s3", "rclone", "s3fs"]
LABEL = {
    "disk": "local disk", "pthp": "passthrough_hp",
    "pthpwb": "passthrough_hp writeback cache", "kpt": "keg_passthrough",
    "sqlite": "KegFS SQLite+file", "s3wb": "KegFS Redis+S3 writeback",
    "s3": "KegFS Redis+S3", "rclone": "rclone mount", "s3fs": "s3fs",
}
# one colour per target in every chart (gnuplot's own 8 colours, then brown): gnuplot's
# default cycle gave the 9th column the 1st one's colour
COLOR = {
    "disk": "#9400d3", "pthp": "#009e73", "pthpwb": "#56b4e9", "kpt": "#e69f00",
    "sqlite": "#f0e442", "s3wb": "#0072b2", "s3": "#e51e10", "rclone": "#000000",
    "s3fs": "#8c564b",
}
SMALL = ["create", "randmod", "append", "empty"]
SMALL_LABEL = {"create": "sequential writes", "randmod": "data modifications",
               "append": "single-file append", "empty": "empty files"}
META = ["create", "readdir", "rename", "stat", "unlink"]
# times measured after a step (raw key KEY_s) and how a table cell shows them
AFTER = {"durable": " (+%s s to durable)", "deleted": " (objects deleted +%s s)"}
REAL = ["tar", "git", "build", "mfiles.create", "mfiles.ls", "mfiles.rm"]
REAL_LABEL = {"tar": "tar -xf /usr/include", "git": "git clone", "build": "build (make -j2)",
              "mfiles.create": "files in dirs: create", "mfiles.ls": "files in dirs: ls -lR",
              "mfiles.rm": "files in dirs: rm -rf"}
FIO_RW = ["write", "read", "randwrite", "randread"]
SEQ = ["seq.write", "seq.read"]
SEQ_LABEL = {"seq.write": "write + fsync", "seq.read": "read (every byte checked)"}


def load(out):
    raw = []
    with open(os.path.join(out, "raw.txt")) as f:
        for line in f:
            p = line.split()
            if len(p) < 3:
                continue
            kv = {}
            for x in p[3:]:
                if "=" in x:
                    k, v = x.split("=", 1)
                    kv[k] = v
            raw.append((p[0], int(p[1]), p[2], kv))
    machine = {}
    with open(os.path.join(out, "machine.txt")) as f:
        for line in f:
            if "=" in line:
                k, v = line.rstrip("\n").split("=", 1)
                machine[k] = v
    return raw, machine


def num(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def fio_values(path):
    """(MiB/s, IOPS) of a fio JSON output (group_reporting: one job entry)."""
    try:
        with open(path) as f:
            text = f.read()
        d = json.loads(text[text.index("{"):])
        j = d["jobs"][0]
        side = j["write"] if j["write"]["io_bytes"] > 0 else j["read"]
        return side["bw"] / 1024.0, side["iops"]
    except (OSError, ValueError, KeyError, IndexError):
        return None, None


def collect(raw):
    """{(target, name): {"value": [...], "durable": [...], "ok": [...], "unit": u}}"""
    res = {}
    for t, _rep, name, kv in raw:
        e = res.setdefault((t, name), {"value": [], "durable": [], "deleted": [], "ok": [],
                                       "iops": []})
        if name.startswith("smallfile."):
            v, unit = num(kv.get("ops_s")), "ops/s"
            e["ok"].append(kv.get("ok") == kv.get("n"))
        elif name.startswith("meta."):
            n, s = num(kv.get("n")), num(kv.get("total_s"))
            v, unit = (n / s if n and s else None), "ops/s"
            e["ok"].append(True)
        elif name.startswith("seq."):
            v, unit = num(kv.get("mib_s")), "MiB/s"
            e["ok"].append(kv.get("ok") == "1")
        elif name.startswith("fio."):
            v, iops = fio_values(kv.get("json", ""))
            unit = "MiB/s"
            e["iops"].append(iops)
            e["ok"].append(v is not None)
        else:
            v, unit = num(kv.get("secs")), "s"
            e["ok"].append(kv.get("ok") == "1")
        e["unit"] = unit
        if v is not None:
            e["value"].append(v)
        for k in AFTER:
            d = kv.get(k + "_s")
            if d is not None:
                e[k].append(num(d) if d not in ("timeout", "error") else float("inf"))
    return res


def stats(vals):
    vals = [v for v in vals if v is not None]
    if not vals:
        return None
    s = sorted(vals)
    return {"median": statistics.median_low(s), "min": s[0], "max": s[-1], "n": len(s)}


def fmt(v, unit=""):
    if v is None:
        return "–"
    if v == float("inf"):
        return "timeout"
    if unit == "s" or abs(v) < 10:
        return "%.2f" % v if abs(v) < 10 else "%.1f" % v
    return "{:,.0f}".format(v)


def cell(st, unit):
    if not st:
        return "–"
    if st["n"] == 1 or st["min"] == st["max"]:
        return fmt(st["median"], unit)
    return "%s (%s–%s)" % (fmt(st["median"], unit), fmt(st["min"], unit), fmt(st["max"], unit))


def main():
    out = sys.argv[1]
    raw, machine = load(out)
    res = collect(raw)
    targets = [t for t in TARGETS if any(k[0] == t for k in res)]
    summary = {}
    for (t, name), e in res.items():
        summary.setdefault(name, {})[t] = {
            "unit": e["unit"], **(stats(e["value"]) or {}),
            "values": e["value"], "all_ok": all(e["ok"]) if e["ok"] else False,
            "iops": stats(e["iops"]) if e["iops"] else None,
        }
        for k in AFTER:
            summary[name][t][k + "_s"] = stats([d for d in e[k] if d != float("inf")]) if e[k] else None
            summary[name][t][k + "_timeouts"] = sum(1 for d in e[k] if d == float("inf"))

    def med(name, t):
        x = summary.get(name, {}).get(t)
        return x.get("median") if x else None

    def dur(name, t):
        x = summary.get(name, {}).get(t)
        if not x:
            return None
        if x.get("durable_timeouts"):
            return float("inf")
        d = x.get("durable_s")
        return d["median"] if d else 0.0

    md = []
    md.append("# KegFS benchmark results\n")
    md.append("Machine: %s, %s cores, %s GiB RAM, kernel %s, %s; run dir on %s." % (
        machine.get("cpu"), machine.get("cores"), machine.get("ram_gib"), machine.get("kernel"),
        machine.get("os"), machine.get("disk")))
    md.append("Load average (1/5/15 min) at the start %s, at the end %s; run took %s min, started %s." % (
        machine.get("load_start"), machine.get("load_end"), machine.get("run_minutes"),
        machine.get("started")))
    md.append("Versions: %s; libfuse %s (%s); %s; %s; %s; %s." % (
        machine.get("kegfs"), machine.get("libfuse"), machine.get("passthrough_hp"),
        machine.get("s3fs", "s3fs –"), machine.get("rclone", "rclone –"), machine.get("fio"),
        machine.get("ceph")))
    sizes = ["small files N=%s" % machine.get("smallfile_n"),
             "metadata ops M=%s (readdir: %s names)" % (machine.get("meta_n"),
                                                        machine.get("readdir_n", machine.get("meta_n"))),
             "fio %s MiB per job, at most %s s" % (machine.get("fio_mib"), machine.get("fio_secs")),
             "sequential %s MiB (%s: %s MiB)" % (machine.get("seq_mib"), machine.get("slow_targets"),
                                                 machine.get("seq_slow_mib")),
             "files in dirs: %s files in %s dirs" % tuple(machine.get("mfiles", "? in ? dirs")
                                                        .replace(" dirs", "").split(" in "))]
    if machine.get("git_repo_files"):
        sizes.append("git repository of %s files" % machine["git_repo_files"])
    if machine.get("build_sources"):
        sizes.append("build: %s" % machine["build_sources"])
    md.append("Method: medians of %s repetitions (%s: %s; fio: %s), spread min–max in "
              "parentheses; %s." % (
                  machine.get("reps"), machine.get("slow_targets"), machine.get("slow_reps"),
                  machine.get("fio_reps"), "; ".join(sizes)))
    if machine.get("note"):
        md.append("Note: %s" % machine["note"])
    md.append("")
    cols = targets

    def table(title, names, labels, unit, durable_col=True):
        rows = [n for n in names if n in summary]
        if not rows:
            return
        md.append("## %s\n" % title)
        md.append("| workload | " + " | ".join(LABEL[t] for t in cols) + " |")
        md.append("|---" * (len(cols) + 1) + "|")
        for n in rows:
            cells = []
            for t in cols:
                x = summary[n].get(t)
                st = x if x and "median" in x else None
                c = cell(st, unit)
                cap = num(machine.get("cap_s"))
                if x and unit == "s" and cap and st and st["max"] >= cap - 1 and not x["all_ok"]:
                    c = "> %d (cut at the cap)" % cap if st["median"] >= cap - 1 else c + " ⚠"
                elif x and not x["all_ok"]:
                    c += " ⚠"
                for k, note in AFTER.items():
                    if x and (k != "durable" or durable_col) and (x.get(k + "_s") or x.get(k + "_timeouts")):
                        d = "timeout" if x[k + "_timeouts"] else fmt(x[k + "_s"]["median"], "s")
                        c += note % d
                cells.append(c)
            md.append("| %s | %s |" % (labels.get(n, n), " | ".join(cells)))
        md.append("")

    table("Small files, ops/s (higher is better)", ["smallfile." + w for w in SMALL],
          {"smallfile." + w: SMALL_LABEL[w] for w in SMALL}, "ops/s")
    table("Metadata, ops/s (readdir: entries/s)", ["meta." + w for w in META],
          {"meta." + w: w for w in META}, "ops/s", False)
    fio_names = sorted({n for n in summary if n.startswith("fio.")},
                       key=lambda n: (n.split(".")[2] != "4m", FIO_RW.index(n.split(".")[1]),
                                      n.split(".")[3]))
    table("Sequential I/O of one large file in 1 MiB calls, MiB/s (higher is better)", SEQ,
          SEQ_LABEL, "MiB/s")
    table("fio, MiB/s (higher is better)", fio_names,
          {n: "%s %s, %s job%s" % (n.split(".")[1], n.split(".")[2].upper().replace("M", " MiB").replace("K", " KiB"),
                                  n.split(".")[3], "" if n.split(".")[3] == "1" else "s")
           for n in fio_names}, "MiB/s", False)
    table("Real work, seconds (lower is better)", REAL, REAL_LABEL, "s")
    if any("⚠" in line for line in md):
        md.append("⚠: at least one repetition failed (a non-zero exit, e.g. tar on rclone "
                  "cannot create symlinks) or did not finish within the cap; its time is still "
                  "shown.\n")

    # ratios: KegFS targets against the passthrough and the peers (>1: KegFS is faster)
    keg = [t for t in ("sqlite", "s3wb", "s3") if t in targets]
    refs = [t for t in ("pthp", "pthpwb", "kpt", "rclone", "s3fs") if t in targets]
    ratios = {}
    if keg and refs:
        md.append("## Speed relative to the reference and the peers (× ; >1 is faster than it)\n")
        md.append("Throughput: KegFS / other; time: other / KegFS. Against rclone and s3fs, "
                  "times include the wait until the data is durable (both sides).\n")
        md.append("| workload | " + " | ".join("%s vs %s" % (LABEL[k].replace("KegFS ", ""), r)
                                               for k in keg for r in refs) + " |")
        md.append("|---" * (len(keg) * len(refs) + 1) + "|")
        for n in ["smallfile." + w for w in SMALL] + ["meta." + w for w in META] + \
                 SEQ + [f for f in fio_names if ".4m." in f] + REAL:
            if n not in summary:
                continue
            row = []
            for k in keg:
                for r in refs:
                    a, b = med(n, k), med(n, r)
                    v = None
                    if a and b:
                        if summary[n][k]["unit"] == "s":
                            if r in ("rclone", "s3fs"):
                                a2, b2 = a + (dur(n, k) or 0), b + (dur(n, r) or 0)
                            else:
                                a2, b2 = a, b
                            v = b2 / a2 if a2 else None
                        else:
                            v = a / b
                    ratios.setdefault(n, {})["%s/%s" % (k, r)] = v
                    row.append("%.2f" % v if v not in (None, float("inf")) else "–")
            md.append("| %s | %s |" % (n, " | ".join(row)))
        md.append("")

    # performance goals, same run, medians
    goals = []

    def goal(text, value, limit, higher=True, unit="×"):
        if value is None:
            goals.append({"goal": text, "value": None, "limit": limit, "met": False,
                          "note": "not measured"})
            return
        met = value >= limit if higher else value <= limit
        goals.append({"goal": text, "value": round(value, 3), "limit": limit, "met": met})

    def speed(n, k, r, durable=False):
        a, b = med(n, k), med(n, r)
        if not a or not b:
            return None
        if summary[n][k]["unit"] != "s":
            return a / b
        if durable:
            a, b = a + (dur(n, k) or 0), b + (dur(n, r) or 0)
        return b / a

    for w in SMALL:
        n = "smallfile." + w
        goal("SQLite+file %s ≥ 0.8× passthrough_hp" % w, speed(n, "sqlite", "pthp"), 0.8)
        goal("Redis+S3 writeback %s ≥ 0.5× passthrough_hp" % w, speed(n, "s3wb", "pthp"), 0.5)
    for n in REAL:
        for k in ("sqlite", "s3wb"):
            s = speed(n, k, "pthp")
            goal("%s %s time ≤ 1.5× passthrough_hp's (speed ≥ 0.67×)" % (LABEL[k], n),
                 s, round(1 / 1.5, 3))
        if n not in ("mfiles.ls", "mfiles.rm") and "s3wb" in targets:
            goal("Redis+S3 writeback %s durable within 5 s after it ends" % n, dur(n, "s3wb"), 5.0,
                 higher=False, unit="s")
        if n in ("mfiles.ls",):
            continue
        goal("Redis+S3 writeback %s ≥ 10× s3fs with the data durable" % n,
             speed(n, "s3wb", "s3fs", True), 10.0)
        goal("Redis+S3 writeback %s ≥ 2× rclone with the data durable" % n,
             speed(n, "s3wb", "rclone", True), 2.0)
    for rw in ("write", "read"):
        n = "seq." + rw
        for k in ("sqlite", "s3wb"):
            goal("%s sequential %s (%s MiB) ≥ 0.9× passthrough_hp" % (LABEL[k], rw,
                                                                       machine.get("seq_mib")),
                 speed(n, k, "pthp"), 0.9)

    md.append("## Goals\n")
    md.append("| goal | measured | limit | |")
    md.append("|---|---|---|---|")
    for g in goals:
        v = "not measured" if g["value"] is None else (
            "timeout" if g["value"] == float("inf") else "%.2f" % g["value"])
        md.append("| %s | %s | %s | %s |" % (g["goal"], v, g["limit"], "met" if g["met"] else "**missed**"))
    nmet = sum(1 for g in goals if g["met"])
    md.append("\n%d of %d goals met.\n" % (nmet, len(goals)))

    charts = draw(out, summary, targets, fio_names)
    for c, title in charts:
        md.append("![%s](%s)" % (title, c))
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump({"machine": machine, "targets": {t: LABEL[t] for t in targets},
                   "results": summary, "ratios": ratios, "goals": goals,
                   "charts": [c for c, _ in charts]}, f, indent=1, default=str)

    for g in goals:
        v = "not measured" if g["value"] is None else g["value"]
        print("goal %s: %s (%s; limit %s)" % ("met   " if g["met"] else "MISSED", g["goal"], v,
                                              g["limit"]))
    print("%d of %d goals met" % (nmet, len(goals)))
    return 0 if goals and nmet == len(goals) else 1


def draw(out, summary, targets, fio_names):
    """Clustered bar charts, one PNG per group; returns [(file, title)]."""
    groups = [
        ("smallfile.png", "Small files (ops/s, higher is better)",
         ["smallfile." + w for w in SMALL], [SMALL_LABEL[w] for w in SMALL], False),
        ("meta.png", "Metadata operations (ops/s, higher is better)",
         ["meta." + w for w in META], META, False),
        ("fio.png", "fio 4 MiB blocks (MiB/s, higher is better)",
         [n for n in fio_names if ".4m." in n], [n[4:].replace(".4m.", " j") for n in fio_names if ".4m." in n], False),
        ("fio4k.png", "fio 4 KiB blocks (MiB/s, higher is better)",
         [n for n in fio_names if ".4k." in n], [n[4:].replace(".4k.", " j") for n in fio_names if ".4k." in n], False),
        ("seq.png", "Sequential I/O of one large file (MiB/s, higher is better)",
         SEQ, [SEQ_LABEL[n] for n in SEQ], False),
        ("realwork.png", "Real work (seconds, lower is better; log scale)",
         REAL, [REAL_LABEL[n] for n in REAL], True),
    ]
    made = []
    for fname, title, names, labels, logy in groups:
        rows = [(n, l) for n, l in zip(names, labels) if n in summary]
        if not rows:
            continue
        dat = os.path.join(out, fname.replace(".png", ".dat"))
        with open(dat, "w") as f:
            f.write("workload " + " ".join('"%s"' % LABEL[t] for t in targets) + "\n")
            for n, l in rows:
                vals = []
                for t in targets:
                    x = summary[n].get(t)
                    v = x.get("median") if x else None
                    vals.append("%.4g" % v if v else "NaN")
                f.write('"%s" %s\n' % (l, " ".join(vals)))
        gp = os.path.join(out, fname.replace(".png", ".gp"))
        with open(gp, "w") as f:
            f.write('set terminal pngcairo noenhanced size 1100,520 font "sans,9"\n')
            f.write('set output "%s"\n' % os.path.join(out, fname))
            f.write('set title "%s"\n' % title)
            f.write("set style data histograms\nset style histogram clustered gap 1\n")
            f.write("set style fill solid 0.85 border -1\nset boxwidth 0.9\n")
            f.write("set key outside right top vertical\nset grid ytics\nset yrange [0:*]\n")
            f.write("set xtics nomirror rotate by -15\n")
            if logy:
                f.write("set logscale y\nset yrange [*:*]\n")
            f.write("set datafile missing 'NaN'\n")
            for i, t in enumerate(targets):
                f.write('set linetype %d lc rgb "%s"\n' % (i + 1, COLOR[t]))
            f.write("plot for [i=2:%d] '%s' using i:xtic(1) title columnheader(i)\n"
                    % (len(targets) + 1, dat))
        r = subprocess.run(["gnuplot", gp], capture_output=True, text=True)
        if r.returncode == 0:
            made.append((fname, title))
        else:
            sys.stderr.write("report.py: gnuplot %s: %s\n" % (gp, r.stderr.strip()[:300]))
    return made


if __name__ == "__main__":
    sys.exit(main())
