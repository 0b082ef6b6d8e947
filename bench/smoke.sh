#!/usr/bin/env bash
# smoke.sh -- keeps the benchmark tools working: `bench/run.sh --quick` on the local targets
# (disk, keg_passthrough, KegFS SQLite + file) must run every workload and write the whole
# report (raw figures, JSON, Markdown, the charts, the machine), and `bench/profile.sh` must
# break a create and a randmod down into FUSE, metadata and object-store requests and
# give their CPU time per operation.
# It checks that the tools work, not how fast anything is: the goals are the full run's.
#
#   bench/smoke.sh BUILD_DIR
#
# Needs root, /dev/fuse, fio, gnuplot and git (`make deps-bench`); exit 77 without them.
# Prints one PASS or FAIL line per check and "N passed, M failed"; exit 0 or 1.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
[ $# -eq 1 ] || { echo "usage: bench/smoke.sh BUILD_DIR" >&2; exit 2; }
BUILD=$(cd "$1" 2>/dev/null && pwd) || { echo "smoke.sh: no build dir '$1'" >&2; exit 2; }
[ "$(id -u)" = 0 ] && [ -c /dev/fuse ] || { echo "SKIP: needs root and /dev/fuse"; exit 77; }
for c in fio gnuplot git curl; do
  command -v "$c" >/dev/null || { echo "SKIP: $c is not installed (make deps-bench)"; exit 77; }
done

T=$(mktemp -d /tmp/bench-smoke.XXXXXX)
trap 'rm -rf "$T"' EXIT
pass=0 fail=0
check() {   # check WHAT CONDITION-COMMAND...
  local what=$1
  shift
  if "$@"; then pass=$((pass + 1)); echo "PASS  $what"
  else fail=$((fail + 1)); echo "FAIL  $what"; fi
}

TARGETS=disk,kpt,sqlite
KEG_BENCH_DIR=$T/run "$here/run.sh" "$BUILD" --quick --targets "$TARGETS" --out "$T/out" \
  > "$T/run.log" 2>&1
rc=$?
# 1 is "a goal missed": the goals need the targets left out here
check "run.sh --quick --targets $TARGETS ends (rc $rc; 0 or 1)" [ "$rc" = 0 -o "$rc" = 1 ]
[ "$rc" = 0 ] || [ "$rc" = 1 ] || tail -20 "$T/run.log"

for f in raw.txt results.json results.md machine.txt; do
  check "the report has $f" test -s "$T/out/$f"
done
check "every repetition of every workload ran and succeeded (raw.txt)" \
  python3 - "$T/out/raw.txt" "$TARGETS" <<'EOF'
import json, sys
lines = [l.split() for l in open(sys.argv[1]) if l.strip()]
want = {"smallfile.create", "smallfile.randmod", "smallfile.append", "smallfile.empty",
        "meta.create", "meta.stat", "meta.rename", "meta.unlink", "meta.readdir",
        "seq.write", "seq.read", "tar", "git", "build", "mfiles.create", "mfiles.ls",
        "mfiles.rm", "fio.write.4m.1", "fio.read.4m.1"}
# a failed step is not recorded (run.sh logs it): each workload must have its lines
def ok(l):   # ok=1; a small-file line counts its operations: ok=N of n=N; fio: its JSON
    kv = dict(x.split("=", 1) for x in l[3:] if "=" in x)
    if "json" in kv:
        try:
            jobs = json.load(open(kv["json"]))["jobs"]
        except (OSError, ValueError, KeyError):
            return False
        return bool(jobs) and all(j.get("error") == 0 for j in jobs)
    return "ok" not in kv or kv["ok"] == kv.get("n", "1")
bad = [" ".join(l) for l in lines if not ok(l)]
for t in sys.argv[2].split(","):
    missing = want - {l[2] for l in lines if l[0] == t}
    if missing:
        bad.append("%s: no %s" % (t, ", ".join(sorted(missing))))
for b in bad[:10]:
    print("  " + b)
sys.exit(1 if bad or not lines else 0)
EOF
check "no step failed (run.sh's log has no FAILED line)" sh -c "! grep -q 'run.sh: FAILED' '$T/run.log'"
grep 'run.sh: FAILED' "$T/run.log" | head -5 | sed 's/^/  /'
check "results.json names the targets, has results, ratios and every goal" \
  python3 - "$T/out/results.json" "$TARGETS" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
ok = set(sys.argv[2].split(",")) <= set(d["targets"]) and d["results"] and d["ratios"]
ok = ok and len(d["goals"]) >= 30 and all({"goal", "limit", "met"} <= set(g) for g in d["goals"])
sys.exit(0 if ok else 1)
EOF
check "results.md has its tables" grep -q '^## Small files' "$T/out/results.md"
for c in smallfile meta fio fio4k seq realwork; do
  check "chart $c.png is a PNG" sh -c "head -c 8 '$T/out/$c.png' | od -An -c | grep -q 'P   N   G'"
done

PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
KEG_BENCH_DIR=$T/profile "$here/profile.sh" "$BUILD" -n 50 -w create,randmod --port "$PORT" \
  > "$T/profile.out" 2> "$T/profile.err"
rc=$?
check "profile.sh -n 50 -w create,randmod (rc $rc)" [ "$rc" = 0 ]
[ "$rc" = 0 ] || { cat "$T/profile.err"; tail -20 "$T/profile.out"; }
for w in create randmod; do
  check "profile.sh breaks $w down: FUSE flush, metadata write_slices, object store put" \
    awk -v w="$w" '$1 == w":" {on = 1; next} /^[a-z]+:/ {on = 0}
      on && $1 == "FUSE" && $2 == "flush" {a = 1}
      on && $1 == "metadata" && $2 == "write_slices" {b = 1}
      on && $1 == "object" && $3 == "put" {c = 1}
      END {exit !(a && b && c)}' "$T/profile.out"
  check "profile.sh gives $w's CPU per operation: the mounter's FUSE handlers, passthrough_hp" \
    awk -v w="$w" '$1 == w":" {on = 1; next} /^[a-z]+:/ {on = 0}
      on && /CPU µs per op, KegFS: application [0-9]+ .*mounter [0-9]+ \(.*kegfs [0-9]+/ {a = 1}
      on && /CPU µs per op, passthrough_hp: application [0-9]+ .*daemon [0-9]+/ {b = 1}
      END {exit !(a && b)}' "$T/profile.out"
done

echo "smoke: $pass passed, $fail failed"
[ "$fail" = 0 ]
