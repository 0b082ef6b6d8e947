#!/usr/bin/env bash
# spare_readers.sh -- the file store reuses the files of deleted blocks (OBJSTORE.md §4,
# spare files) while a second mounter reads with the layouts it read at open. A rewrites
# random 4 KiB of a 256 KiB file with the bytes already there (its content never changes,
# its slices do, and compaction deletes the replaced ones); B opens the file and reads it
# whole in 16 KiB reads, again and again, after dropping its page cache, with a 1 MiB read
# cache, so that its reads go to the store. Every byte B reads is right, no read fails,
# nothing is reported corrupt, and a pool of spares was made. The moment in which B opens
# a block file just before it is retired and reads it after its reuse is microseconds wide
# and rarely met here; test_obj_file's test_spare_files shows that step (the identity check
# refuses the bytes, and the key is gone when it is read again).
# timeout: 300
. "$(dirname "$0")/../lib.sh"
need_kegfs
need_cmd python3
[ "$STORAGE" = file ] || skip "spare files belong to the file store (--storage file)"

B=$WORK/mnt2
mkdir -p "$B"
# a 1 MiB read cache: B's reads of blocks it does not hold go to the store
# shellcheck disable=SC2086
"$KEGFS" mount -d --log-file "$WORK/mnt2.log" --mem-cache-size 1 $MT_MOUNT_EXTRA "$META" "$B" ||
  fail "second mount failed"
trap '"$KEGFS" umount "$B" >/dev/null 2>&1' EXIT

python3 - "$MNT/f" "$B/f" > "$WORK/spare_readers.out" 2>&1 <<'EOF'
import os, random, sys, threading, time
a, b = sys.argv[1], sys.argv[2]
size = 256 * 1024
data = random.Random(7).randbytes(size)
with open(a, "wb") as f:
    f.write(data)
time.sleep(2)                           # B's attribute and entry caches
stop = threading.Event()
res = {"passes": 0, "bad": 0, "errors": 0, "ops": 0}

def reader():
    while not stop.is_set():
        fd = os.open(b, os.O_RDONLY)    # a fresh layout, soon stale
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            got = b""
            while len(got) < size:      # 16 KiB at a time: A commits meanwhile
                piece = os.pread(fd, 16384, len(got))
                if not piece:
                    break
                got += piece
        except OSError as e:
            res["errors"] += 1
            print("read error:", e)
            continue
        finally:
            os.close(fd)
        res["passes"] += 1
        if got != data:
            res["bad"] += 1
            at = next((i for i in range(min(len(got), size)) if got[i] != data[i]), len(got))
            print("mismatch: %d bytes read, first difference at %d" % (len(got), at))

t = threading.Thread(target=reader)
t.start()
rnd = random.Random(11)
end = time.monotonic() + 8
while time.monotonic() < end:
    off = rnd.randrange(size // 4096) * 4096
    fd = os.open(a, os.O_WRONLY)
    os.pwrite(fd, data[off:off + 4096], off)
    os.close(fd)
    res["ops"] += 1
stop.set()
t.join()
print("ops=%d passes=%d bad=%d errors=%d" % (res["ops"], res["passes"], res["bad"], res["errors"]))
EOF
rc=$?
while read -r line; do note "$line"; done < "$WORK/spare_readers.out"
[ $rc = 0 ] || fail "the workload failed (rc=$rc)"
sum=$(tail -n 1 "$WORK/spare_readers.out")
case "$sum" in
  *" bad=0 errors=0") ;;
  *) fail "B read wrong bytes or got errors: $sum" ;;
esac
passes=$(sed -n 's/.*passes=\([0-9]*\).*/\1/p' <<< "$sum")
ops=$(sed -n 's/^ops=\([0-9]*\).*/\1/p' <<< "$sum")
[ "${passes:-0}" -ge 20 ] || fail "B read the file only ${passes:-0} times"
[ "${ops:-0}" -ge 500 ] || fail "A rewrote only ${ops:-0} times"
# the replaced blocks went to A's (or B's) pool of spare files
ls -d "$OBJDIR"/.tmp.spare/*/ > /dev/null 2>&1 || fail "no pool of spare files under $OBJDIR/.tmp.spare"
if grep -h "is corrupt" "$MT_LOG" "$WORK/mnt2.log" 2>/dev/null; then
  fail "a mounter reported a corrupt block"
fi
note "reads that met a reused file and read the key again: $(grep -c 'reading it again' "$WORK/mnt2.log" 2>/dev/null)"
cmp <(cat "$MNT/f") <(cat "$B/f") || fail "A and B differ after the run"
"$KEGFS" umount "$B" || fail "umount of the second mount"
trap - EXIT
