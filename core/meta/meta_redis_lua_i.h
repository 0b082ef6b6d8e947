/* meta_redis_lua_i.h -- the server-side Lua scripts of the Redis metadata engine.
 *
 * DESIGN
 * Every mutation of the Redis engine is ONE EVALSHA of one of these scripts:
 * a Lua script runs atomically in Redis, so an op either fully happens or not
 * at all.  Scripts validate everything they need first and write afterwards,
 * so they never stop half-way with an error (Redis does not roll back the writes
 * of a script that raises an error).  The key schema is in
 * docs/internals/meta-redis.md.
 *
 * Calling convention (meta_redis.c, mr_eval):
 *   EVALSHA sha 1 "{NS}" now_sec now_nsec sid arg4 arg5 ...
 *   KEYS[1] = "{NS}", the hash-tagged prefix of every key of the volume (one
 *   Redis Cluster slot); ARGV[1..2] = the mounter's clock (the script never
 *   reads the server clock); ARGV[3] = session id ("0": none).
 *   Reply: an array whose first element is 0 (success, results follow) or a
 *   positive Linux errno (the op failed and changed nothing).
 *
 * The first line of each script is a Redis 7 shebang: "flags=no-writes" for
 * read-only scripts (they keep working when Redis is out of memory) and none
 * for writers, which Redis then refuses up front with -OOM when maxmemory is
 * reached -- before any of their writes -- which the engine maps to -ENOSPC.
 * Scripts that free memory or rewrite records in place (unlink, rmdir, purge,
 * session cleanup, setattr, truncate, the heartbeat, unlock) are "allow-oom",
 * so that a full volume can still be cleaned up and used (meta_redis.c).
 *
 * Lua numbers are doubles: inode numbers, slice ids and sizes are exact up to
 * 2^53.  Byte-range lock offsets use the whole 64-bit range, so they travel
 * as 16-digit hex strings (which compare in numeric order as strings).
 *
 * Packed records (little-endian, struct library formats):
 *   attr  '<I4I4I4I4I8I8I8i8i8i8I4I4I4I4I8' (88 bytes): mode uid gid nlink size
 *         rdev parent atime mtime ctime atimensec mtimensec ctimensec chunks alloc
 *         (alloc: regular files, the data bytes written and not truncated away,
 *         at most size: st_blocks.  Records written by older versions are 80
 *         bytes, without alloc: getattr reads them with alloc = size.  The
 *         88-byte form is written only when {NS}counter's attrAlloc is 1, which
 *         `format` sets (a new volume, or --force on an existing one once every
 *         mounter of it reads 88-byte records); until then putattr keeps
 *         writing 80 bytes, so older mounters of the volume keep working)
 *         (chunks: only in records written by older versions: 1 + the highest
 *         chunk index written; such an inode's chunks are indexed into
 *         {NS}C<ino> the first time it is truncated or purged, then it is 0)
 *   {NS}C<ino>: sorted set of the chunk indices that have a slice list (score =
 *         member = indx), maintained by write_slices/truncate/purge, so that
 *         truncate and purge work in proportion to the chunks that exist, never
 *         to the file size (a sparse 1 PB file costs nothing).
 *   Purge drops at most RECLAIM chunks; the rest of a huge file is left in
 *   {NS}C<ino> with ino in the set {NS}reclaim (the inode record is gone), and
 *   every delq_peek call reclaims up to RECLAIM more chunks before it reads the
 *   deletion queue, so no script call blocks the server for long.
 *   dirent value '<I8I2' (10 bytes): ino, S_IFMT type bits
 *   slice '<I8I4I4I4I4' (24 bytes): id size off len pos
 *   write_slices argument: per slice '<I4' indx + the 24-byte slice
 *   plock record (41 chars): type 'R'|'W', start (16 hex), end (16 hex), pid (8 hex)
 */
#ifndef KEG_META_REDIS_LUA_I_H
#define KEG_META_REDIS_LUA_I_H

#define MR_LUA_RO   "#!lua flags=no-writes\n"
#define MR_LUA_RW   "#!lua\n"
#define MR_LUA_FREE "#!lua flags=allow-oom\n"

/* Helpers shared by the scripts.  Each piece is one top-level Lua "local"
 * statement (a constant, a group of constants or a function) and defines the
 * names of its first line.  meta_redis.c builds each script at open from its
 * header (MR_LUA_RO/RW/FREE), the pieces it needs and its body: a piece is
 * needed when one of its names occurs as a whole word, outside string
 * literals, in the body or in a needed piece further down.  Pieces only use
 * names of pieces above them (as Lua requires of locals), keep that order.
 * Defining all of them on every call cost more Redis CPU than the lookup
 * itself (docs/internals/meta-redis.md). */
#define MR_LUA_PRELUDE_PIECES \
"local P = KEYS[1]\n", \
"local NOW, NOWNS, SID = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]\n", \
"local EPERM, ENOENT, EIO, EAGAIN, EBUSY, EEXIST = 1, 2, 5, 11, 16, 17\n", \
"local ENOTDIR, EISDIR, EINVAL, ENOSPC = 20, 21, 22, 28\n", \
"local EMLINK, ENOTEMPTY, ENODATA = 31, 39, 61\n", \
"local IFMT, IFDIR, IFREG, IFLNK, ISGID = 61440, 16384, 32768, 40960, 1024\n", \
"local CHUNK = 67108864\n", \
"local AFMT = '<I4I4I4I4I8I8I8i8i8i8I4I4I4I4I8'\n", \
"local CNT = P .. 'counter'\n", \
"local band, bor = bit.band, bit.bor\n", \
"local function N(n) return string.format('%d', n) end\n", \
"local ALLOCREC = nil\n", \
"local function packattr(a)\n" \
"  if ALLOCREC == nil then ALLOCREC = redis.call('HGET', CNT, 'attrAlloc') == '1' end\n" \
"  if not ALLOCREC then\n" \
"    return struct.pack(string.sub(AFMT, 1, -3), a.mode, a.uid, a.gid, a.nlink, a.size,\n" \
"      a.rdev, a.parent, a.atime, a.mtime, a.ctime, a.atimensec, a.mtimensec, a.ctimensec,\n" \
"      a.chunks)\n" \
"  end\n" \
"  return struct.pack(AFMT, a.mode, a.uid, a.gid, a.nlink, a.size, a.rdev, a.parent,\n" \
"    a.atime, a.mtime, a.ctime, a.atimensec, a.mtimensec, a.ctimensec, a.chunks, a.alloc)\n" \
"end\n", \
"local function getattr(ino)\n" \
"  local raw = redis.call('GET', P .. 'i' .. N(ino))\n" \
"  if not raw then return nil end\n" \
"  local a = {ino = ino}\n" \
"  if #raw == 88 then\n" \
"    a.mode, a.uid, a.gid, a.nlink, a.size, a.rdev, a.parent, a.atime, a.mtime, a.ctime,\n" \
"      a.atimensec, a.mtimensec, a.ctimensec, a.chunks, a.alloc = struct.unpack(AFMT, raw)\n" \
"  elseif #raw == 80 then\n" \
"    a.mode, a.uid, a.gid, a.nlink, a.size, a.rdev, a.parent, a.atime, a.mtime, a.ctime,\n" \
"      a.atimensec, a.mtimensec, a.ctimensec, a.chunks = struct.unpack(string.sub(AFMT, 1, -3), raw)\n" \
"    a.alloc = a.size\n" \
"  else\n" \
"    error('kegfs: corrupt attribute record of inode ' .. N(ino))\n" \
"  end\n" \
"  return a\n" \
"end\n", \
"local function putattr(a)\n" \
"  local raw = packattr(a)\n" \
"  redis.call('SET', P .. 'i' .. N(a.ino), raw)\n" \
"  return raw\n" \
"end\n", \
"local function isdir(a) return band(a.mode, IFMT) == IFDIR end\n", \
"local function touch_c(a) a.ctime = NOW; a.ctimensec = NOWNS end\n", \
"local function touch_mc(a) a.mtime = NOW; a.mtimensec = NOWNS; touch_c(a) end\n", \
"local function getdir(ino)\n" \
"  local a = getattr(ino)\n" \
"  if not a then return nil, ENOENT end\n" \
"  if not isdir(a) then return nil, ENOTDIR end\n" \
"  return a\n" \
"end\n", \
"local function dget(dir, name)\n" \
"  local v = redis.call('HGET', P .. 'd' .. N(dir), name)\n" \
"  if not v then return nil end\n" \
"  local ino, typ = struct.unpack('<I8I2', v)\n" \
"  return ino, typ\n" \
"end\n", \
"local function dset(dir, name, ino, typ)\n" \
"  redis.call('HSET', P .. 'd' .. N(dir), name, struct.pack('<I8I2', ino, typ))\n" \
"  redis.call('ZADD', P .. 'D' .. N(dir), 0, name)\n" \
"  redis.call('PUBLISH', P .. 'n', N(dir) .. '/' .. name)\n" \
"end\n", \
"local function ddel(dir, name)\n" \
"  redis.call('HDEL', P .. 'd' .. N(dir), name)\n" \
"  redis.call('ZREM', P .. 'D' .. N(dir), name)\n" \
"end\n", \
"local function charge(sz) return math.floor((sz + 4095) / 4096) * 4096 end\n", \
"local function counter(f) return tonumber(redis.call('HGET', CNT, f) or '0') or 0 end\n", \
"local function space_ok(d)\n" \
"  if d <= 0 then return true end\n" \
"  local cap = counter('capacity')\n" \
"  return cap == 0 or counter('usedSpace') + d <= cap\n" \
"end\n", \
"local function space_add(d)\n" \
"  if d ~= 0 then redis.call('HINCRBY', CNT, 'usedSpace', d) end\n" \
"end\n", \
"local QUEUED = 0\n", \
"local OPEN = nil\n", \
"local function decref(id, size)\n" \
"  if id == 0 then return end\n" \
"  local f = N(id)\n" \
"  if redis.call('HINCRBY', P .. 'sliceRef', f, -1) <= 0 then\n" \
"    redis.call('HDEL', P .. 'sliceRef', f)\n" \
"    redis.call('ZADD', P .. 'delq', id, f .. '_' .. N(size))\n" \
"    QUEUED = QUEUED + 1\n" \
"  end\n" \
"end\n", \
"local function drop_chunk(ino, indx)\n" \
"  local k = P .. 'c' .. N(ino) .. '_' .. N(indx)\n" \
"  local raw = redis.call('GET', k)\n" \
"  redis.call('ZREM', P .. 'C' .. N(ino), N(indx))\n" \
"  if not raw then return end\n" \
"  for i = 1, #raw - 23, 24 do\n" \
"    local id, size = struct.unpack('<I8I4', raw, i)\n" \
"    decref(id, size)\n" \
"  end\n" \
"  redis.call('DEL', k)\n" \
"end\n", \
"local function index_legacy(a)\n" \
"  if a.chunks == 0 then return end\n" \
"  for indx = 0, a.chunks - 1 do\n" \
"    if redis.call('EXISTS', P .. 'c' .. N(a.ino) .. '_' .. N(indx)) == 1 then\n" \
"      redis.call('ZADD', P .. 'C' .. N(a.ino), indx, N(indx))\n" \
"    end\n" \
"  end\n" \
"  a.chunks = 0\n" \
"end\n", \
"local RECLAIM = 1024\n", \
"local function reclaim(ino, budget)\n" \
"  local ck = P .. 'C' .. N(ino)\n" \
"  local idx = redis.call('ZRANGE', ck, 0, budget - 1)\n" \
"  for _, s in ipairs(idx) do drop_chunk(ino, tonumber(s)) end\n" \
"  return #idx, redis.call('EXISTS', ck) == 0\n" \
"end\n", \
"local function del_inode_keys(ino)\n" \
"  local n = N(ino)\n" \
"  redis.call('DEL', P .. 'i' .. n, P .. 's' .. n, P .. 'x' .. n, P .. 'f' .. n, P .. 'p' .. n)\n" \
"end\n", \
"local function del_dir(ino)\n" \
"  local n = N(ino)\n" \
"  del_inode_keys(ino)\n" \
"  redis.call('DEL', P .. 'd' .. n, P .. 'D' .. n)\n" \
"  redis.call('HINCRBY', CNT, 'usedInodes', -1)\n" \
"end\n", \
"local function purge_inode(ino, a)\n" \
"  a = a or getattr(ino)\n" \
"  if not a or a.nlink > 0 then return end\n" \
"  if band(a.mode, IFMT) == IFREG then\n" \
"    index_legacy(a)\n" \
"    local _, done = reclaim(ino, RECLAIM)\n" \
"    if not done then redis.call('SADD', P .. 'reclaim', N(ino)) end\n" \
"    space_add(-charge(a.size))\n" \
"  end\n" \
"  del_inode_keys(ino)\n" \
"  redis.call('HINCRBY', CNT, 'usedInodes', -1)\n" \
"end\n", \
"local function lost_last_link(a)\n" \
"  local open = OPEN == nil or OPEN == '-' or string.find(OPEN, ',' .. N(a.ino) .. ',', 1, true)\n" \
"  if SID ~= '0' and band(a.mode, IFMT) == IFREG and open then\n" \
"    putattr(a)\n" \
"    redis.call('SADD', P .. 'P' .. SID, N(a.ino))\n" \
"    return 0\n" \
"  end\n" \
"  purge_inode(a.ino, a)\n" \
"  return 1\n" \
"end\n", \
"local HMAX = 'ffffffffffffffff'\n", \
"local function hsplit(h) return tonumber(string.sub(h, 1, 8), 16), tonumber(string.sub(h, 9), 16) end\n", \
"local function hinc(h)\n" \
"  if h == HMAX then return h end\n" \
"  local hi, lo = hsplit(h)\n" \
"  lo = lo + 1\n" \
"  if lo == 4294967296 then lo = 0; hi = hi + 1 end\n" \
"  return string.format('%08x%08x', hi, lo)\n" \
"end\n", \
"local function hdec(h)\n" \
"  local hi, lo = hsplit(h)\n" \
"  lo = lo - 1\n" \
"  if lo < 0 then lo = 4294967295; hi = hi - 1 end\n" \
"  return string.format('%08x%08x', hi, lo)\n" \
"end\n", \
"local function plocks(s)\n" \
"  local t = {}\n" \
"  for i = 1, #s - 40, 41 do\n" \
"    t[#t + 1] = {typ = string.sub(s, i, i), s = string.sub(s, i + 1, i + 16),\n" \
"                 e = string.sub(s, i + 17, i + 32), pid = string.sub(s, i + 33, i + 40)}\n" \
"  end\n" \
"  return t\n" \
"end\n"

/*--------------------------------------------------------------------------
 * Namespace
 *------------------------------------------------------------------------*/

/* ARGV: 4 parent, 5 name, 6 want.  -> {0, attr, ino}; when there is no such
 * name and the directory has at most want (> 0) names: {0, '', 0, {names}}
 * (the directory name cache's fill, meta_redis_names.c). */
#define MR_LUA_LOOKUP \
"local parent = tonumber(ARGV[4])\n" \
"local ino = dget(parent, ARGV[5])\n" \
"if ino then\n" \
"  local raw = redis.call('GET', P .. 'i' .. N(ino))\n" \
"  if raw then return {0, raw, ino} end\n" \
"  return {ENOENT}\n" \
"end\n" \
"local _, e = getdir(parent)\n" \
"if e then return {e} end\n" \
"local want = tonumber(ARGV[6]) or 0\n" \
"local dk = P .. 'd' .. N(parent)\n" \
"if want > 0 and redis.call('HLEN', dk) <= want then\n" \
"  return {0, '', 0, redis.call('HKEYS', dk)}\n" \
"end\n" \
"return {ENOENT}\n"

/* ARGV: 4 parent, 5 name, 6 ino, 7 mode, 8 uid, 9 gid, 10 rdev, 11 target,
 * 12 reserve: when > 0, also reserve that many inode numbers (as alloc_ids
 * does), so that creating files needs no separate alloc_ids call.
 * -> {0, attr, parent attr, first reserved number or 0} */
#define MR_LUA_MKNOD \
"local parent, name, ino = tonumber(ARGV[4]), ARGV[5], tonumber(ARGV[6])\n" \
"local mode, gid = tonumber(ARGV[7]), tonumber(ARGV[9])\n" \
"local pa, e = getdir(parent)\n" \
"if not pa then return {e} end\n" \
"if pa.nlink == 0 then return {ENOENT} end\n" \
"if redis.call('HEXISTS', P .. 'd' .. N(parent), name) == 1 then return {EEXIST} end\n" \
"local q = counter('inodes')\n" \
"if q > 0 and counter('usedInodes') + 1 > q then return {ENOSPC} end\n" \
"if redis.call('EXISTS', P .. 'i' .. N(ino)) == 1 then return {EIO, 'inode number in use'} end\n" \
"local typ = band(mode, IFMT)\n" \
"if typ == 0 then typ = IFREG; mode = bor(mode, IFREG) end\n" \
"if band(pa.mode, ISGID) ~= 0 then\n" \
"  gid = pa.gid\n" \
"  if typ == IFDIR then mode = bor(mode, ISGID) end\n" \
"end\n" \
"local a = {ino = ino, mode = mode, uid = tonumber(ARGV[8]), gid = gid, nlink = 1, size = 0,\n" \
"  rdev = tonumber(ARGV[10]), parent = 0, atime = NOW, mtime = NOW, ctime = NOW,\n" \
"  atimensec = NOWNS, mtimensec = NOWNS, ctimensec = NOWNS, chunks = 0, alloc = 0}\n" \
"if typ == IFDIR then\n" \
"  a.nlink = 2; a.size = 4096; a.parent = parent; pa.nlink = pa.nlink + 1\n" \
"elseif typ == IFLNK then\n" \
"  a.size = #ARGV[11]\n" \
"  redis.call('SET', P .. 's' .. N(ino), ARGV[11])\n" \
"end\n" \
"touch_mc(pa)\n" \
"local praw = putattr(pa)\n" \
"local raw = putattr(a)\n" \
"dset(parent, name, ino, typ)\n" \
"redis.call('HINCRBY', CNT, 'usedInodes', 1)\n" \
"local want, first = tonumber(ARGV[12]) or 0, 0\n" \
"if want > 0 then\n" \
"  if redis.call('HEXISTS', CNT, 'lastInode') == 0 then redis.call('HSET', CNT, 'lastInode', 1) end\n" \
"  first = redis.call('HINCRBY', CNT, 'lastInode', want) - want + 1\n" \
"end\n" \
"return {0, raw, praw, first}\n"

/* ARGV: 4 ino, 5 newparent, 6 newname.  -> {0, attr, newparent attr} */
#define MR_LUA_LINK \
"local ino, np, name = tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6]\n" \
"local a = getattr(ino)\n" \
"if not a then return {ENOENT} end\n" \
"local pa, e = getdir(np)\n" \
"if not pa then return {e} end\n" \
"if redis.call('HEXISTS', P .. 'd' .. N(np), name) == 1 then return {EEXIST} end\n" \
"if isdir(a) then return {EPERM} end\n" \
"if a.nlink == 0 then return {ENOENT} end\n" \
"if a.nlink >= 65000 then return {EMLINK} end\n" \
"a.nlink = a.nlink + 1\n" \
"touch_c(a)\n" \
"touch_mc(pa)\n" \
"local praw = putattr(pa)\n" \
"local raw = putattr(a)\n" \
"dset(np, name, ino, band(a.mode, IFMT))\n" \
"return {0, raw, praw}\n"

/* ARGV: 4 parent, 5 name, 6 open set: ",ino,ino," of inodes open in the
 * mounter (a regular file listed there stays pending), or "-" (no inline purge).
 * -> {0, gone_ino, gone_mode, gone_size, gone_purged, slices queued, parent attr} */
#define MR_LUA_UNLINK \
"local parent, name = tonumber(ARGV[4]), ARGV[5]\n" \
"OPEN = ARGV[6]\n" \
"local pa, e = getdir(parent)\n" \
"if not pa then return {e} end\n" \
"local ino, typ = dget(parent, name)\n" \
"if not ino then return {ENOENT} end\n" \
"if typ == IFDIR then return {EISDIR} end\n" \
"local a = getattr(ino)\n" \
"ddel(parent, name)\n" \
"touch_mc(pa)\n" \
"local praw = putattr(pa)\n" \
"if not a then return {0, 0, 0, 0, 0, 0, praw} end\n" \
"if a.nlink > 0 then a.nlink = a.nlink - 1 end\n" \
"touch_c(a)\n" \
"if a.nlink > 0 then\n" \
"  putattr(a)\n" \
"  return {0, 0, 0, 0, 0, 0, praw}\n" \
"end\n" \
"local purged = lost_last_link(a)\n" \
"return {0, ino, a.mode, a.size, purged, QUEUED, praw}\n"

/* ARGV: 4 parent, 5 name.  -> {0, parent attr} */
#define MR_LUA_RMDIR \
"local parent, name = tonumber(ARGV[4]), ARGV[5]\n" \
"local pa, e = getdir(parent)\n" \
"if not pa then return {e} end\n" \
"local ino, typ = dget(parent, name)\n" \
"if not ino then return {ENOENT} end\n" \
"if typ ~= IFDIR then return {ENOTDIR} end\n" \
"if ino == 1 then return {EBUSY} end\n" \
"if redis.call('HLEN', P .. 'd' .. N(ino)) > 0 then return {ENOTEMPTY} end\n" \
"ddel(parent, name)\n" \
"if pa.nlink > 2 then pa.nlink = pa.nlink - 1 end\n" \
"touch_mc(pa)\n" \
"local praw = putattr(pa)\n" \
"del_dir(ino)\n" \
"return {0, praw}\n"

/* ARGV: 4 parent, 5 name, 6 newparent, 7 newname, 8 flags, 9 open set (as unlink).
 * -> {0, moved attr, moved ino, gone_ino, gone_mode, gone_size, gone_purged, queued,
 *     parent attr[, newparent attr when it differs]} (same-inode no-op: no parent attrs) */
#define MR_LUA_RENAME \
"local spi, sname, dpi, dname = tonumber(ARGV[4]), ARGV[5], tonumber(ARGV[6]), ARGV[7]\n" \
"OPEN = ARGV[9]\n" \
"local flags = tonumber(ARGV[8])\n" \
"local norep, exch = band(flags, 1) ~= 0, band(flags, 2) ~= 0\n" \
"local sp, e = getdir(spi)\n" \
"if not sp then return {e} end\n" \
"local dp = sp\n" \
"if dpi ~= spi then\n" \
"  dp, e = getdir(dpi)\n" \
"  if not dp then return {e} end\n" \
"end\n" \
"local sino, styp = dget(spi, sname)\n" \
"if not sino then return {ENOENT} end\n" \
"local sa = getattr(sino)\n" \
"if not sa then return {ENOENT} end\n" \
"local dino, dtyp = dget(dpi, dname)\n" \
"local da\n" \
"if dino then\n" \
"  da = getattr(dino)\n" \
"  if not da then return {EIO, 'entry without inode'} end\n" \
"end\n" \
"if exch and not dino then return {ENOENT} end\n" \
"if norep and dino then return {EEXIST} end\n" \
"if dino == sino then return {0, packattr(sa), sino, 0, 0, 0, 0, 0} end\n" \
"local function inside(dir, x)\n" \
"  for _ = 1, 100000 do\n" \
"    if x == dir then return true end\n" \
"    if x == 1 then return false end\n" \
"    local xa = getattr(x)\n" \
"    if not xa then return false end\n" \
"    x = xa.parent\n" \
"  end\n" \
"  return true\n" \
"end\n" \
"if spi ~= dpi then\n" \
"  if styp == IFDIR and inside(sino, dpi) then return {EINVAL} end\n" \
"  if exch and dtyp == IFDIR and inside(dino, spi) then return {EINVAL} end\n" \
"end\n" \
"local function move_dir(d, from, to)\n" \
"  d.parent = to.ino\n" \
"  if from.nlink > 2 then from.nlink = from.nlink - 1 end\n" \
"  to.nlink = to.nlink + 1\n" \
"end\n" \
"local gi, gm, gs, gp = 0, 0, 0, 0\n" \
"if exch then\n" \
"  dset(spi, sname, dino, dtyp)\n" \
"  dset(dpi, dname, sino, styp)\n" \
"  if spi ~= dpi then\n" \
"    if styp == IFDIR then move_dir(sa, sp, dp) end\n" \
"    if dtyp == IFDIR then move_dir(da, dp, sp) end\n" \
"  end\n" \
"  touch_c(da)\n" \
"  putattr(da)\n" \
"else\n" \
"  if dino then\n" \
"    if styp == IFDIR and dtyp ~= IFDIR then return {ENOTDIR} end\n" \
"    if styp ~= IFDIR and dtyp == IFDIR then return {EISDIR} end\n" \
"    if dtyp == IFDIR and redis.call('HLEN', P .. 'd' .. N(dino)) > 0 then return {ENOTEMPTY} end\n" \
"  end\n" \
"  ddel(spi, sname)\n" \
"  dset(dpi, dname, sino, styp)\n" \
"  if dino then\n" \
"    if dtyp == IFDIR then\n" \
"      if dp.nlink > 2 then dp.nlink = dp.nlink - 1 end\n" \
"      gi, gm, gs, gp = dino, da.mode, da.size, 1\n" \
"      del_dir(dino)\n" \
"    else\n" \
"      if da.nlink > 0 then da.nlink = da.nlink - 1 end\n" \
"      touch_c(da)\n" \
"      if da.nlink > 0 then\n" \
"        putattr(da)\n" \
"      else\n" \
"        gi, gm, gs = dino, da.mode, da.size\n" \
"        gp = lost_last_link(da)\n" \
"      end\n" \
"    end\n" \
"  end\n" \
"  if styp == IFDIR and spi ~= dpi then move_dir(sa, sp, dp) end\n" \
"end\n" \
"touch_c(sa)\n" \
"local raw = putattr(sa)\n" \
"touch_mc(sp)\n" \
"local out = {0, raw, sino, gi, gm, gs, gp, QUEUED, putattr(sp)}\n" \
"if dp ~= sp then\n" \
"  touch_mc(dp)\n" \
"  out[10] = putattr(dp)\n" \
"end\n" \
"return out\n"

/* ARGV: 4 ino, 5 set, 6 mode, 7 uid, 8 gid, 9 atime, 10 atimensec, 11 mtime,
 * 12 mtimensec, 13 ctime, 14 ctimensec.  -> {0, attr} */
#define MR_LUA_SETATTR \
"local a = getattr(tonumber(ARGV[4]))\n" \
"if not a then return {ENOENT} end\n" \
"local set = tonumber(ARGV[5])\n" \
"if set == 0 then return {0, packattr(a)} end\n" \
"if band(set, 1) ~= 0 then a.mode = bor(band(a.mode, IFMT), band(tonumber(ARGV[6]), 4095)) end\n" \
"if band(set, 2) ~= 0 then a.uid = tonumber(ARGV[7]) end\n" \
"if band(set, 4) ~= 0 then a.gid = tonumber(ARGV[8]) end\n" \
"if band(set, 8) ~= 0 then a.atime = tonumber(ARGV[9]); a.atimensec = tonumber(ARGV[10]) end\n" \
"if band(set, 16) ~= 0 then a.mtime = tonumber(ARGV[11]); a.mtimensec = tonumber(ARGV[12]) end\n" \
"if band(set, 32) ~= 0 then a.atime = NOW; a.atimensec = NOWNS end\n" \
"if band(set, 64) ~= 0 then a.mtime = NOW; a.mtimensec = NOWNS end\n" \
"touch_c(a)\n" \
"if band(set, 128) ~= 0 then a.ctime = tonumber(ARGV[13]); a.ctimensec = tonumber(ARGV[14]) end\n" \
"return {0, putattr(a)}\n"

/* ARGV: 4 dir ino, 5 has_after, 6 after, 7 max, 8 plus.
 * -> {0, names scanned, last name scanned, name1, dirent1[, attr1, has xattrs1], name2, ...}
 * (has xattrs: 1 or 0, with plus)
 * (an entry whose hash value or inode vanished is scanned but not returned) */
#define MR_LUA_READDIR \
"local ino = tonumber(ARGV[4])\n" \
"local _, e = getdir(ino)\n" \
"if e then return {e} end\n" \
"local min = '-'\n" \
"if ARGV[5] == '1' then min = '(' .. ARGV[6] end\n" \
"local names = redis.call('ZRANGEBYLEX', P .. 'D' .. N(ino), min, '+', 'LIMIT', 0, tonumber(ARGV[7]))\n" \
"local out = {0, #names, names[#names] or ''}\n" \
"if #names == 0 then return out end\n" \
"local vals = redis.call('HMGET', P .. 'd' .. N(ino), unpack(names))\n" \
"local plus = ARGV[8] == '1'\n" \
"for i = 1, #names do\n" \
"  local v = vals[i]\n" \
"  if v then\n" \
"    local raw = ''\n" \
"    local cino = N(struct.unpack('<I8', v))\n" \
"    if plus then raw = redis.call('GET', P .. 'i' .. cino) end\n" \
"    if raw then\n" \
"      out[#out + 1] = names[i]\n" \
"      out[#out + 1] = v\n" \
"      if plus then\n" \
"        out[#out + 1] = raw\n" \
"        out[#out + 1] = redis.call('EXISTS', P .. 'x' .. cino)\n" \
"      end\n" \
"    end\n" \
"  end\n" \
"end\n" \
"return out\n"

/* ARGV: 4 ino.  -> {0, target} */
#define MR_LUA_READLINK \
"local v = redis.call('GET', P .. 's' .. ARGV[4])\n" \
"if v then return {0, v} end\n" \
"if redis.call('EXISTS', P .. 'i' .. ARGV[4]) == 1 then return {EINVAL} end\n" \
"return {ENOENT}\n"

/* ARGV: 4 ino, 5 from.  -> {0, indx} | {ENOENT} | {ENOSYS} (chunks not indexed yet) */
#define MR_LUA_NEXT_CHUNK \
"local a = getattr(tonumber(ARGV[4]))\n" \
"if not a then return {ENOENT} end\n" \
"if a.chunks ~= 0 then return {38} end\n" \
"local r = redis.call('ZRANGEBYSCORE', P .. 'C' .. ARGV[4], ARGV[5], '+inf', 'LIMIT', 0, 1)\n" \
"if #r == 0 then return {ENOENT} end\n" \
"return {0, tonumber(r[1])}\n"

/* ARGV: 4 ino.  -> {0} */
#define MR_LUA_PURGE \
"purge_inode(tonumber(ARGV[4]))\n" \
"if SID ~= '0' then redis.call('SREM', P .. 'P' .. SID, ARGV[4]) end\n" \
"return {0}\n"

/*--------------------------------------------------------------------------
 * Data
 *------------------------------------------------------------------------*/

/* ARGV: 4 ino, 5 min_size, 6 flags, 7 packed (indx, slice) records; records
 * with indx 4294967295 (KEG_INDX_APPEND, last) go at the end of the file as it
 * is once the others are in, split at chunk boundaries.
 * -> {0, attr, longest slice list} */
#define MR_LUA_WRITE \
"local ino = tonumber(ARGV[4])\n" \
"local a = getattr(ino)\n" \
"if not a then return {ENOENT} end\n" \
"local t = band(a.mode, IFMT)\n" \
"if t == IFDIR then return {EISDIR} end\n" \
"if t ~= IFREG then return {EPERM} end\n" \
"local flags, recs = tonumber(ARGV[6]), ARGV[7]\n" \
"local APP = 4294967295\n" \
"if band(flags, 1) ~= 0 then\n" \
"  for i = 1, #recs - 27, 28 do\n" \
"    local _, id = struct.unpack('<I4I8', recs, i)\n" \
"    if id ~= 0 and redis.call('HEXISTS', P .. 'sliceRef', N(id)) == 0 then return {EAGAIN} end\n" \
"  end\n" \
"end\n" \
"local new = math.max(a.size, tonumber(ARGV[5]))\n" \
"for i = 1, #recs - 27, 28 do\n" \
"  local indx, _, _, _, len = struct.unpack('<I4I8I4I4I4', recs, i)\n" \
"  if indx == APP then new = new + len end\n" \
"end\n" \
"if new >= 9007199254740992 then return {27} end\n" \
"local delta = charge(new) - charge(a.size)\n" \
"if not space_ok(delta) then return {ENOSPC} end\n" \
"local maxn = 0\n" \
"local function add(indx, id, rec)\n" \
"  local len = redis.call('APPEND', P .. 'c' .. N(ino) .. '_' .. N(indx), rec)\n" \
"  if len / 24 > maxn then maxn = len / 24 end\n" \
"  if len == 24 then redis.call('ZADD', P .. 'C' .. N(ino), indx, N(indx)) end\n" \
"  if id ~= 0 then\n" \
"    redis.call('HINCRBY', P .. 'sliceRef', N(id), 1)\n" \
"    a.alloc = a.alloc + struct.unpack('<I4', rec, 17)\n" \
"  end\n" \
"end\n" \
"local cur = math.max(a.size, tonumber(ARGV[5]))\n" \
"for i = 1, #recs - 27, 28 do\n" \
"  local indx, id, size, off, len = struct.unpack('<I4I8I4I4I4', recs, i)\n" \
"  if indx ~= APP then\n" \
"    add(indx, id, string.sub(recs, i + 4, i + 27))\n" \
"  else\n" \
"    local done = 0\n" \
"    while done < len do\n" \
"      local cpos = cur % CHUNK\n" \
"      local l = math.min(len - done, CHUNK - cpos)\n" \
"      add(math.floor(cur / CHUNK), id, struct.pack('<I8I4I4I4I4', id, size, off + done, l, cpos))\n" \
"      done = done + l\n" \
"      cur = cur + l\n" \
"    end\n" \
"  end\n" \
"end\n" \
"space_add(delta)\n" \
"a.size = new\n" \
"if a.alloc > new then a.alloc = new end\n" \
"if band(flags, 2) == 0 then touch_mc(a) end\n" \
"return {0, putattr(a), maxn}\n"

/* ARGV: 4 ino, 5 size.  -> {0, attr} */
#define MR_LUA_TRUNCATE \
"local a = getattr(tonumber(ARGV[4]))\n" \
"if not a then return {ENOENT} end\n" \
"local t = band(a.mode, IFMT)\n" \
"if t == IFDIR then return {EISDIR} end\n" \
"if t ~= IFREG then return {EPERM} end\n" \
"local old, new = a.size, tonumber(ARGV[5])\n" \
"local delta = charge(new) - charge(old)\n" \
"if not space_ok(delta) then return {ENOSPC} end\n" \
"if new < old then\n" \
"  local keep = math.ceil(new / CHUNK)\n" \
"  index_legacy(a)\n" \
"  local idx = redis.call('ZRANGEBYSCORE', P .. 'C' .. N(a.ino), keep, '+inf')\n" \
"  for _, s in ipairs(idx) do drop_chunk(a.ino, tonumber(s)) end\n" \
"  local pos = new % CHUNK\n" \
"  if pos ~= 0 then\n" \
"    local indx = math.floor(new / CHUNK)\n" \
"    local k = P .. 'c' .. N(a.ino) .. '_' .. N(indx)\n" \
"    if redis.call('EXISTS', k) == 1 then\n" \
"      redis.call('APPEND', k, struct.pack('<I8I4I4I4I4', 0, CHUNK - pos, 0, CHUNK - pos, pos))\n" \
"    end\n" \
"  end\n" \
"end\n" \
"space_add(delta)\n" \
"a.size = new\n" \
"if a.alloc > new then a.alloc = new end\n" \
"touch_mc(a)\n" \
"return {0, putattr(a)}\n"

/* ARGV: 4 ino, 5 indx, 6 packed old slices, 7 packed replacement, 8 how many
 * old slices stay in front of it.  -> {0} */
#define MR_LUA_COMPACT \
"local k = P .. 'c' .. ARGV[4] .. '_' .. ARGV[5]\n" \
"local old, repl = ARGV[6], ARGV[7]\n" \
"local kept = tonumber(ARGV[8]) * 24\n" \
"local cur = redis.call('GET', k) or ''\n" \
"if #old == 0 or string.sub(cur, 1, #old) ~= old then return {EAGAIN} end\n" \
"redis.call('SET', k, string.sub(old, 1, kept) .. repl .. string.sub(cur, #old + 1))\n" \
"local rid = struct.unpack('<I8', repl)\n" \
"if rid ~= 0 then redis.call('HINCRBY', P .. 'sliceRef', N(rid), 1) end\n" \
"for i = kept + 1, #old - 23, 24 do\n" \
"  local id, size = struct.unpack('<I8I4', old, i)\n" \
"  decref(id, size)\n" \
"end\n" \
"return {0}\n"

/* ARGV: 4 max.  First drops up to RECLAIM chunks of purged inodes still
 * listed in {NS}reclaim (their slices go to the queue), then reads the queue.
 * -> {0, "id_size", ...} (at most max, in slice id order) */
#define MR_LUA_DELQ_PEEK \
"local rk = P .. 'reclaim'\n" \
"local budget = RECLAIM\n" \
"while budget > 0 do\n" \
"  local ino = redis.call('SRANDMEMBER', rk)\n" \
"  if not ino then break end\n" \
"  local n, done = reclaim(tonumber(ino), budget)\n" \
"  if done then redis.call('SREM', rk, ino) end\n" \
"  budget = budget - math.max(n, 1)\n" \
"end\n" \
"local out = redis.call('ZRANGE', P .. 'delq', 0, tonumber(ARGV[4]) - 1)\n" \
"table.insert(out, 1, 0)\n" \
"return out\n"

/*--------------------------------------------------------------------------
 * Extended attributes
 *------------------------------------------------------------------------*/

/* ARGV: 4 ino, 5 name.  -> {0, value} */
#define MR_LUA_XGET \
"local v = redis.call('HGET', P .. 'x' .. ARGV[4], ARGV[5])\n" \
"if v then return {0, v} end\n" \
"if redis.call('EXISTS', P .. 'i' .. ARGV[4]) == 1 then return {ENODATA} end\n" \
"return {ENOENT}\n"

/* ARGV: 4 ino, 5 name, 6 value, 7 flags (1 XATTR_CREATE, 2 XATTR_REPLACE).  -> {0} */
#define MR_LUA_XSET \
"local a = getattr(tonumber(ARGV[4]))\n" \
"if not a then return {ENOENT} end\n" \
"local k = P .. 'x' .. ARGV[4]\n" \
"local flags = tonumber(ARGV[7])\n" \
"local has = redis.call('HEXISTS', k, ARGV[5]) == 1\n" \
"if band(flags, 1) ~= 0 and has then return {EEXIST} end\n" \
"if band(flags, 2) ~= 0 and not has then return {ENODATA} end\n" \
"redis.call('HSET', k, ARGV[5], ARGV[6])\n" \
"touch_c(a)\n" \
"putattr(a)\n" \
"return {0}\n"

/* ARGV: 4 ino.  -> {0, name1, name2, ...} sorted */
#define MR_LUA_XLIST \
"if redis.call('EXISTS', P .. 'i' .. ARGV[4]) == 0 then return {ENOENT} end\n" \
"local names = redis.call('HKEYS', P .. 'x' .. ARGV[4])\n" \
"table.sort(names)\n" \
"table.insert(names, 1, 0)\n" \
"return names\n"

/* ARGV: 4 ino, 5 name.  -> {0} */
#define MR_LUA_XREMOVE \
"local a = getattr(tonumber(ARGV[4]))\n" \
"if not a then return {ENOENT} end\n" \
"if redis.call('HDEL', P .. 'x' .. ARGV[4], ARGV[5]) == 0 then return {ENODATA} end\n" \
"touch_c(a)\n" \
"putattr(a)\n" \
"return {0}\n"

/*--------------------------------------------------------------------------
 * Locks: fields "sid:owner" of {NS}f<ino> (flock: 'R'|'W') and {NS}p<ino>
 * (plock records); {NS}L<sid> lists the lock hashes a session touched.
 *------------------------------------------------------------------------*/

/* ARGV: 4 ino, 5 owner, 6 type (0 F_RDLCK, 1 F_WRLCK, 2 F_UNLCK).  -> {0} */
#define MR_LUA_FLOCK \
"local k, me, typ = P .. 'f' .. ARGV[4], SID .. ':' .. ARGV[5], tonumber(ARGV[6])\n" \
"if redis.call('EXISTS', P .. 'i' .. ARGV[4]) == 0 then return {ENOENT} end\n" \
"if typ == 2 then\n" \
"  redis.call('HDEL', k, me)\n" \
"  return {0}\n" \
"end\n" \
"local h = redis.call('HGETALL', k)\n" \
"for i = 1, #h, 2 do\n" \
"  if h[i] ~= me and (typ == 1 or h[i + 1] == 'W') then return {EAGAIN} end\n" \
"end\n" \
"redis.call('HSET', k, me, (typ == 1) and 'W' or 'R')\n" \
"if SID ~= '0' then redis.call('SADD', P .. 'L' .. SID, 'f' .. ARGV[4]) end\n" \
"return {0}\n"

/* ARGV: 4 ino, 5 owner, 6 type, 7 start (hex16), 8 end (hex16).
 * -> {0, 'U'} or {0, 'R'|'W', start, end, pid} */
#define MR_LUA_GETLK \
"local me, wr, s, e = SID .. ':' .. ARGV[5], ARGV[6] == '1', ARGV[7], ARGV[8]\n" \
"if redis.call('EXISTS', P .. 'i' .. ARGV[4]) == 0 then return {ENOENT} end\n" \
"local h = redis.call('HGETALL', P .. 'p' .. ARGV[4])\n" \
"local hit\n" \
"for i = 1, #h, 2 do\n" \
"  if h[i] ~= me then\n" \
"    for _, r in ipairs(plocks(h[i + 1])) do\n" \
"      if r.s <= e and s <= r.e and (wr or r.typ == 'W') and (not hit or r.s < hit.s) then\n" \
"        hit = r\n" \
"      end\n" \
"    end\n" \
"  end\n" \
"end\n" \
"if not hit then return {0, 'U'} end\n" \
"return {0, hit.typ, hit.s, hit.e, hit.pid}\n"

/* ARGV: 4 ino, 5 owner, 6 type, 7 start, 8 end, 9 pid (hex8).  -> {0} */
#define MR_LUA_SETLK \
"local k, me, typ = P .. 'p' .. ARGV[4], SID .. ':' .. ARGV[5], tonumber(ARGV[6])\n" \
"local s, e, pid = ARGV[7], ARGV[8], ARGV[9]\n" \
"if redis.call('EXISTS', P .. 'i' .. ARGV[4]) == 0 then return {ENOENT} end\n" \
"local h = redis.call('HGETALL', k)\n" \
"local mine = {}\n" \
"for i = 1, #h, 2 do\n" \
"  if h[i] == me then\n" \
"    mine = plocks(h[i + 1])\n" \
"  elseif typ ~= 2 then\n" \
"    for _, r in ipairs(plocks(h[i + 1])) do\n" \
"      if r.s <= e and s <= r.e and (typ == 1 or r.typ == 'W') then return {EAGAIN} end\n" \
"    end\n" \
"  end\n" \
"end\n" \
"local out = {}\n" \
"for _, r in ipairs(mine) do\n" \
"  if r.e < s or r.s > e then\n" \
"    out[#out + 1] = r\n" \
"  else\n" \
"    if r.s < s then out[#out + 1] = {typ = r.typ, s = r.s, e = hdec(s), pid = r.pid} end\n" \
"    if r.e > e then out[#out + 1] = {typ = r.typ, s = hinc(e), e = r.e, pid = r.pid} end\n" \
"  end\n" \
"end\n" \
"if typ ~= 2 then out[#out + 1] = {typ = (typ == 1) and 'W' or 'R', s = s, e = e, pid = pid, new = true} end\n" \
"table.sort(out, function(x, y) return x.s < y.s end)\n" \
"local m = {}\n" \
"for _, r in ipairs(out) do\n" \
"  local l = m[#m]\n" \
"  if l and l.typ == r.typ and (l.e == HMAX or hinc(l.e) >= r.s) then\n" \
"    if r.e > l.e then l.e = r.e end\n" \
"    if r.new then l.pid = r.pid; l.new = true end\n" \
"  else\n" \
"    m[#m + 1] = r\n" \
"  end\n" \
"end\n" \
"if #m == 0 then\n" \
"  redis.call('HDEL', k, me)\n" \
"  return {0}\n" \
"end\n" \
"local parts = {}\n" \
"for _, r in ipairs(m) do parts[#parts + 1] = r.typ .. r.s .. r.e .. r.pid end\n" \
"redis.call('HSET', k, me, table.concat(parts))\n" \
"if SID ~= '0' then redis.call('SADD', P .. 'L' .. SID, 'p' .. ARGV[4]) end\n" \
"return {0}\n"

/*--------------------------------------------------------------------------
 * Volume, counters, sessions
 *------------------------------------------------------------------------*/

/* ARGV: 4 setting text, 5 root mode, 6 uid, 7 gid, 8 force, 9 capacity, 10 inodes.  -> {0} */
#define MR_LUA_FORMAT \
"local sk = P .. 'setting'\n" \
"if redis.call('EXISTS', sk) == 1 then\n" \
"  if ARGV[8] ~= '1' then return {EEXIST} end\n" \
"  redis.call('SET', sk, ARGV[4])\n" \
"  redis.call('HSET', CNT, 'capacity', ARGV[9], 'inodes', ARGV[10], 'attrAlloc', 1)\n" \
"  return {0}\n" \
"end\n" \
"redis.call('SET', sk, ARGV[4])\n" \
"redis.call('HSET', CNT, 'capacity', ARGV[9], 'inodes', ARGV[10], 'lastInode', 1,\n" \
"  'lastSlice', 0, 'lastSession', 0, 'usedSpace', 0, 'usedInodes', 0, 'attrAlloc', 1)\n" \
"putattr({ino = 1, mode = bor(IFDIR, band(tonumber(ARGV[5]), 4095)), uid = tonumber(ARGV[6]),\n" \
"  gid = tonumber(ARGV[7]), nlink = 2, size = 4096, rdev = 0, parent = 1, atime = NOW,\n" \
"  mtime = NOW, ctime = NOW, atimensec = NOWNS, mtimensec = NOWNS, ctimensec = NOWNS, chunks = 0,\n" \
"  alloc = 0})\n" \
"return {0}\n"

/* ARGV: 4 kind (0 inode, 1 slice), 5 n.  -> {0, first} */
#define MR_LUA_ALLOC \
"local f = (ARGV[4] == '0') and 'lastInode' or 'lastSlice'\n" \
"local n = tonumber(ARGV[5])\n" \
"if redis.call('HEXISTS', CNT, f) == 0 then\n" \
"  redis.call('HSET', CNT, f, (f == 'lastInode') and 1 or 0)\n" \
"end\n" \
"local last = redis.call('HINCRBY', CNT, f, n)\n" \
"return {0, last - n + 1}\n"

/* ARGV: 4 info.  -> {0, sid} */
#define MR_LUA_SESS_BEGIN \
"local sid = redis.call('HINCRBY', CNT, 'lastSession', 1)\n" \
"redis.call('ZADD', P .. 'sessions', NOW, sid)\n" \
"redis.call('HSET', P .. 'sessionInfo', sid, ARGV[4])\n" \
"return {0, sid}\n"

/* ARGV: [4 info: a takeover (session_resume) also sets it].  -> {0}; ENOENT
 * when the session was ended or cleaned up as stale meanwhile */
#define MR_LUA_SESS_BEAT \
"if not redis.call('ZSCORE', P .. 'sessions', SID) then return {ENOENT} end\n" \
"redis.call('ZADD', P .. 'sessions', NOW, SID)\n" \
"if ARGV[4] then redis.call('HSET', P .. 'sessionInfo', SID, ARGV[4]) end\n" \
"return {0}\n"

/* -> {0, sid1, heartbeat1, info1, ...} */
#define MR_LUA_SESS_LIST \
"local z = redis.call('ZRANGE', P .. 'sessions', 0, -1, 'WITHSCORES')\n" \
"local t = {}\n" \
"for i = 1, #z, 2 do t[#t + 1] = {tonumber(z[i]), z[i], z[i + 1]} end\n" \
"table.sort(t, function(x, y) return x[1] < y[1] end)\n" \
"local out = {0}\n" \
"for _, r in ipairs(t) do\n" \
"  out[#out + 1] = r[2]\n" \
"  out[#out + 1] = r[3]\n" \
"  out[#out + 1] = redis.call('HGET', P .. 'sessionInfo', r[2]) or ''\n" \
"end\n" \
"return out\n"

/* Release up to ARGV[5] locks / pending inodes of session ARGV[4]; when none
 * are left, remove the session.  -> {0, done (1) or more to do (0)} */
#define MR_LUA_SESS_CLEAN \
"local t, limit = ARGV[4], tonumber(ARGV[5])\n" \
"local pre = t .. ':'\n" \
"local n = 0\n" \
"local lk = P .. 'L' .. t\n" \
"for _, item in ipairs(redis.call('SMEMBERS', lk)) do\n" \
"  if n >= limit then return {0, 0} end\n" \
"  local k = P .. item\n" \
"  for _, f in ipairs(redis.call('HKEYS', k)) do\n" \
"    if string.sub(f, 1, #pre) == pre then redis.call('HDEL', k, f) end\n" \
"  end\n" \
"  redis.call('SREM', lk, item)\n" \
"  n = n + 1\n" \
"end\n" \
"local pk = P .. 'P' .. t\n" \
"for _, ino in ipairs(redis.call('SMEMBERS', pk)) do\n" \
"  if n >= limit then return {0, 0} end\n" \
"  purge_inode(tonumber(ino))\n" \
"  redis.call('SREM', pk, ino)\n" \
"  n = n + 1\n" \
"end\n" \
"redis.call('ZREM', P .. 'sessions', t)\n" \
"redis.call('HDEL', P .. 'sessionInfo', t)\n" \
"return {0, 1}\n"

#endif
