/* A stateful harness for the caching allocator and its ledger on the CPU
 * device. The input is a program: each byte picks an operation (create an
 * owner, allocate, free a live block, free something that is not a block,
 * trim, mark, destroy/reclaim an owner, quota, release, pinned buffers,
 * lookup, JSON export) and the following bytes its arguments. A model of the
 * live blocks is kept beside the allocator and after every operation:
 *   allocated <= reserved, cached = reserved - allocated, peaks >= current,
 *   allocated/blocks equal the model's, per-owner bytes/blocks/tree_bytes
 *   equal the model's, live blocks never overlap, every free of a live block
 *   succeeds and every free of a non-block fails with EBB_ENOTFOUND, quota
 *   refusals happen exactly when the model says, leak reports list exactly
 *   the model's live blocks; and the ledger's JSON export always parses
 *   with jansson. Names and mark labels are raw input bytes (with
 *   EBB_FUZZ_KNOWN=1 printable ASCII only: raw bytes that are not UTF-8 give
 *   JSON that does not parse, a known bug). */
#include <jansson.h>

#include "device/device.h"
#include "fuzz_util.h"
#include "memory/memory.h"

#define MAX_OWNERS 12
#define MAX_BLOCKS 96
#define MAX_PINNED 8
#define MAX_LIVE_BYTES (96ull << 20)
#define MiB (1ull << 20)

typedef struct m_owner {
  ebb_owner *h;
  int parent; /* -1: none */
  uint64_t quota;
  int alive;
} m_owner;

typedef struct m_block {
  uint64_t addr;
  size_t req, size;
  int owner;
} m_block;

typedef struct m_pin {
  void *p;
  int owner;
} m_pin;

typedef struct reader {
  const uint8_t *p;
  size_t n, off;
} reader;

static int rd(reader *r, uint8_t *b) {
  if (r->off >= r->n)
    return 0;
  *b = r->p[r->off++];
  return 1;
}
static uint32_t rd_u(reader *r, int nbytes) {
  uint32_t v = 0;
  uint8_t b;
  for (int i = 0; i < nbytes && rd(r, &b); i++)
    v |= (uint32_t)b << (8 * i);
  return v;
}

static m_owner owners[MAX_OWNERS];
static int nowners;
static m_block blocks[MAX_BLOCKS];
static int nblocks;
static m_pin pins[MAX_PINNED];
static int npins;
static int ascii_only;
static dev_device *dev;

static void read_name(reader *r, char *buf, size_t cap) {
  size_t len = rd_u(r, 1) % 24, k = 0;
  uint8_t b;
  for (size_t i = 0; i < len && k + 1 < cap && rd(r, &b); i++) {
    if (ascii_only)
      b = (uint8_t)(' ' + b % 95);
    if (b) /* a C string: NUL would end it */
      buf[k++] = (char)b;
  }
  buf[k] = '\0';
}

static int in_tree(int o, int root) {
  for (; o >= 0; o = owners[o].parent)
    if (o == root)
      return 1;
  return 0;
}

static uint64_t model_tree_bytes(int root) {
  uint64_t s = 0;
  for (int i = 0; i < nblocks; i++)
    if (in_tree(blocks[i].owner, root))
      s += blocks[i].size;
  return s;
}

static void drop_block(int i) { blocks[i] = blocks[--nblocks]; }

static void leak_cb(const mem_leak_report *r, void *ctx) {
  (void)r;
  (*(int *)ctx)++;
}

static void check_json(mem_allocator *a) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  FUZZ_CHECK(f, "open_memstream");
  int rc = mem_ledger_write_json(mem_allocator_ledger(a), f);
  fclose(f);
  FUZZ_CHECK(rc == 0, "ledger JSON export failed: %s", ebb_errmsg());
  json_error_t e;
  json_t *j = json_loadb(text, len, 0, &e);
  FUZZ_CHECK(j, "the ledger's JSON does not parse: %s at line %d column %d (byte %d); JSON:\n%s",
             e.text, e.line, e.column, e.position, text);
  FUZZ_CHECK(json_is_array(json_object_get(j, "events")) &&
                 json_is_array(json_object_get(j, "owners")),
             "ledger JSON without events/owners arrays");
  size_t nev = json_array_size(json_object_get(j, "events"));
  FUZZ_CHECK(nev == mem_ledger_count(mem_allocator_ledger(a)), "JSON has %zu events, ledger %zu",
             nev, mem_ledger_count(mem_allocator_ledger(a)));
  json_decref(j);
  free(text);
}

static void check_stats(mem_allocator *a) {
  mem_alloc_stats st = {.size = sizeof st};
  FUZZ_CHECK(mem_allocator_get_stats(a, &st) == 0, "get_stats: %s", ebb_errmsg());
  uint64_t sum = 0;
  for (int i = 0; i < nblocks; i++)
    sum += blocks[i].size;
  FUZZ_CHECK(st.allocated.current == sum, "allocated %llu, the live blocks sum to %llu",
             (unsigned long long)st.allocated.current, (unsigned long long)sum);
  FUZZ_CHECK(st.blocks.current == (uint64_t)nblocks, "blocks %llu, model %d",
             (unsigned long long)st.blocks.current, nblocks);
  FUZZ_CHECK(st.allocated.current <= st.reserved.current, "allocated %llu > reserved %llu",
             (unsigned long long)st.allocated.current, (unsigned long long)st.reserved.current);
  FUZZ_CHECK(st.cached.current == st.reserved.current - st.allocated.current,
             "cached %llu != reserved %llu - allocated %llu", (unsigned long long)st.cached.current,
             (unsigned long long)st.reserved.current, (unsigned long long)st.allocated.current);
#define PEAK_OK(name, doc)                                                                     \
  FUZZ_CHECK(st.name.peak >= st.name.current && st.name.total >= st.name.current,              \
             #name ": current %llu peak %llu total %llu", (unsigned long long)st.name.current, \
             (unsigned long long)st.name.peak, (unsigned long long)st.name.total);
  EBB_ALLOC_STAT_FIELDS(PEAK_OK)
  FUZZ_CHECK(st.pinned_allocated.current <= st.pinned_reserved.current,
             "pinned allocated %llu > pinned reserved %llu",
             (unsigned long long)st.pinned_allocated.current,
             (unsigned long long)st.pinned_reserved.current);
  FUZZ_CHECK(st.reserved.current == 0 || st.segments.current > 0, "reserved without segments");
  for (int o = 0; o < nowners; o++) {
    if (!owners[o].alive)
      continue;
    mem_owner_stats os = {.size = sizeof os};
    FUZZ_CHECK(mem_owner_get_stats(owners[o].h, &os) == 0, "owner stats");
    uint64_t own = 0, cnt = 0;
    for (int i = 0; i < nblocks; i++)
      if (blocks[i].owner == o) {
        own += blocks[i].size;
        cnt++;
      }
    FUZZ_CHECK(os.bytes.current == own && os.blocks.current == cnt,
               "owner %d: %llu bytes in %llu blocks, model %llu in %llu", o,
               (unsigned long long)os.bytes.current, (unsigned long long)os.blocks.current,
               (unsigned long long)own, (unsigned long long)cnt);
    FUZZ_CHECK(os.tree_bytes == model_tree_bytes(o), "owner %d: tree_bytes %llu, model %llu", o,
               (unsigned long long)os.tree_bytes, (unsigned long long)model_tree_bytes(o));
    FUZZ_CHECK(os.bytes.peak >= os.bytes.current, "owner %d: peak < current", o);
  }
}

/* Destroys (destroy=1) or reclaims owner o; its subtree's blocks are leaks. */
static void owner_gone(int o, int destroy) {
  int want = 0;
  uint64_t want_bytes = 0;
  for (int i = 0; i < nblocks; i++)
    if (in_tree(blocks[i].owner, o)) {
      want++;
      want_bytes += blocks[i].req;
    }
  int wantpins = 0;
  for (int i = 0; i < npins; i++)
    if (in_tree(pins[i].owner, o))
      wantpins++;
  mem_leak_report *rep = NULL;
  if (destroy)
    mem_owner_destroy(owners[o].h, &rep);
  else
    FUZZ_CHECK(mem_owner_reclaim(owners[o].h, &rep) == 0, "reclaim: %s", ebb_errmsg());
  size_t dev_leaks = 0;
  uint64_t bytes = 0;
  for (size_t i = 0; rep && i < rep->nleaks; i++)
    if (!rep->leaks[i].pinned) {
      dev_leaks++;
      bytes += rep->leaks[i].size;
    }
  FUZZ_CHECK(dev_leaks == (size_t)want && bytes == want_bytes,
             "owner %d: leak report of %zu blocks / %llu bytes, model %d / %llu", o, dev_leaks,
             (unsigned long long)bytes, want, (unsigned long long)want_bytes);
  FUZZ_CHECK((rep != NULL) == (want + wantpins > 0), "leak report %p with %d+%d leaks", (void *)rep,
             want, wantpins);
  mem_leak_report_free(rep);
  for (int i = nblocks - 1; i >= 0; i--)
    if (in_tree(blocks[i].owner, o))
      drop_block(i);
  for (int i = npins - 1; i >= 0; i--)
    if (in_tree(pins[i].owner, o))
      pins[i] = pins[--npins];
  if (destroy)
    for (int i = 0; i < nowners; i++)
      if (owners[i].alive && in_tree(i, o))
        owners[i].alive = 0;
}

static int pick_owner(reader *r) {
  if (!nowners)
    return -1;
  int o = (int)(rd_u(r, 1) % (uint32_t)nowners);
  return owners[o].alive ? o : -1;
}

static void op_alloc(mem_allocator *a, reader *r) {
  int o = pick_owner(r);
  uint8_t cls = (uint8_t)rd_u(r, 1);
  size_t req;
  switch (cls % 4) {
  case 0: req = 1 + rd_u(r, 2) % 4096; break;
  case 1: req = 1 + rd_u(r, 3) % (2 * MiB); break;
  case 2: req = 1 + rd_u(r, 3) % (24 * MiB); break;
  default: req = 512u * (1 + rd_u(r, 2) % 4096); break;
  }
  if (o < 0 || nblocks == MAX_BLOCKS)
    return;
  size_t size = (req + 511) / 512 * 512;
  uint64_t live = 0;
  for (int i = 0; i < nblocks; i++)
    live += blocks[i].size;
  if (live + size > MAX_LIVE_BYTES)
    return;
  int over = 0;
  for (int q = o; q >= 0; q = owners[q].parent)
    if (owners[q].quota && model_tree_bytes(q) + size > owners[q].quota)
      over = 1;
  uint64_t addr = 0;
  int rc = mem_alloc(owners[o].h, req, "fuzz_ledger.c:alloc", &addr);
  if (over) {
    FUZZ_CHECK(rc == EBB_EQUOTA, "alloc of %zu over quota: rc %d (%s)", req, rc, ebb_errmsg());
    return;
  }
  FUZZ_CHECK(rc == 0, "alloc of %zu bytes: rc %d (%s)", req, rc, ebb_errmsg());
  FUZZ_CHECK(addr && addr % 512 == 0, "address 0x%llx not 512-aligned", (unsigned long long)addr);
  for (int i = 0; i < nblocks; i++)
    FUZZ_CHECK(addr + size <= blocks[i].addr || blocks[i].addr + blocks[i].size <= addr,
               "new block [0x%llx, +%zu) overlaps live block [0x%llx, +%zu)",
               (unsigned long long)addr, size, (unsigned long long)blocks[i].addr, blocks[i].size);
  /* CPU device: the block is host memory; touch both ends (ASan checks) */
  ((volatile uint8_t *)(uintptr_t)addr)[0] = 0xA5;
  ((volatile uint8_t *)(uintptr_t)addr)[req - 1] = 0x5A;
  blocks[nblocks++] = (m_block){addr, req, size, o};
}

static void op_free_bad(mem_allocator *a, reader *r) {
  uint8_t how = (uint8_t)rd_u(r, 1);
  uint64_t addr;
  if (nblocks && how % 3 == 0)
    addr = blocks[how % nblocks].addr + 1 +
           rd_u(r, 2) % (blocks[how % nblocks].size - 1 ? blocks[how % nblocks].size - 1 : 1);
  else if (how % 3 == 1)
    addr = (uint64_t)rd_u(r, 4) << (rd_u(r, 1) % 32);
  else
    addr = 0;
  for (int i = 0; i < nblocks; i++)
    if (blocks[i].addr == addr)
      return; /* it is a block after all */
  int rc = mem_free(a, addr);
  FUZZ_CHECK(rc == EBB_ENOTFOUND, "free of non-block 0x%llx: rc %d (%s)", (unsigned long long)addr,
             rc, ebb_errmsg());
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!dev) {
    ascii_only = fuzz_known();
    FUZZ_CHECK(dev_open("cpu", &dev) == 0, "cpu device: %s", ebb_errmsg());
  }
  mem_alloc_opts opts = {.size = sizeof opts,
                         .seg_kind = EBB_SEG_AUTO,
                         .ledger_events = 48,
                         .backtraces = 0};
  mem_allocator *a = NULL;
  FUZZ_CHECK(mem_allocator_create(dev, &opts, &a) == 0, "allocator: %s", ebb_errmsg());
  int leak_calls = 0;
  mem_allocator_on_leak(a, leak_cb, &leak_calls);
  nowners = nblocks = npins = 0;
  reader r = {data, size, 0};
  uint8_t op;
  int nops = 0;
  while (rd(&r, &op) && nops++ < 200) {
    switch (op % 14) {
    case 0: { /* owner */
      char name[32];
      read_name(&r, name, sizeof name);
      uint8_t pb = (uint8_t)rd_u(&r, 1);
      if (nowners == MAX_OWNERS)
        break;
      int parent = -1;
      if (pb >= 0x80 && nowners && owners[pb % nowners].alive)
        parent = pb % nowners;
      ebb_owner *h = NULL;
      int rc = mem_owner_create(a, name, parent >= 0 ? owners[parent].h : NULL, &h);
      FUZZ_CHECK(rc == 0 && h, "owner_create '%s': %s", name, ebb_errmsg());
      owners[nowners++] = (m_owner){h, parent, 0, 1};
      break;
    }
    case 1:
    case 2: op_alloc(a, &r); break;
    case 3: { /* free a live block */
      uint32_t k = rd_u(&r, 1);
      if (!nblocks)
        break;
      int i = (int)(k % (uint32_t)nblocks);
      int rc = mem_free(a, blocks[i].addr);
      FUZZ_CHECK(rc == 0, "free of live block 0x%llx: %s", (unsigned long long)blocks[i].addr,
                 ebb_errmsg());
      uint64_t addr = blocks[i].addr;
      drop_block(i);
      int still = 0;
      for (int j = 0; j < nblocks; j++)
        still |= blocks[j].addr == addr;
      if (!still) /* a double free must fail cleanly */
        FUZZ_CHECK(mem_free(a, addr) == EBB_ENOTFOUND, "double free of 0x%llx accepted",
                   (unsigned long long)addr);
      break;
    }
    case 4: op_free_bad(a, &r); break;
    case 5: { /* trim */
      mem_alloc_stats b = {.size = sizeof b}, c = {.size = sizeof c};
      mem_allocator_get_stats(a, &b);
      uint64_t got = 0;
      FUZZ_CHECK(mem_allocator_trim(a, &got) == 0, "trim: %s", ebb_errmsg());
      mem_allocator_get_stats(a, &c);
      FUZZ_CHECK(c.reserved.current + got == b.reserved.current,
                 "trim returned %llu bytes but reserved went %llu -> %llu", (unsigned long long)got,
                 (unsigned long long)b.reserved.current, (unsigned long long)c.reserved.current);
      FUZZ_CHECK(c.allocated.current == b.allocated.current, "trim changed allocated");
      break;
    }
    case 6: { /* mark */
      char label[32];
      read_name(&r, label, sizeof label);
      mem_ledger_mark(mem_allocator_ledger(a), label);
      break;
    }
    case 7:
    case 8: { /* destroy / reclaim */
      int o = pick_owner(&r);
      if (o >= 0)
        owner_gone(o, op % 14 == 7);
      break;
    }
    case 9: { /* quota */
      int o = pick_owner(&r);
      uint64_t q = (uint64_t)(rd_u(&r, 1) % 9) * 4 * MiB;
      if (o >= 0) {
        FUZZ_CHECK(mem_owner_set_quota(owners[o].h, q) == 0, "set_quota");
        owners[o].quota = q;
      }
      break;
    }
    case 10: check_json(a); break;
    case 11: { /* release: trim + pinned (no callbacks: the registry is process-wide) */
      mem_release_result res = {.size = sizeof res};
      FUZZ_CHECK(mem_release(a, EBB_RELEASE_TRIM | EBB_RELEASE_PINNED, &res) == 0, "release: %s",
                 ebb_errmsg());
      FUZZ_CHECK(res.released_bytes == res.segment_bytes + res.context_bytes,
                 "released %llu != segments %llu + context %llu",
                 (unsigned long long)res.released_bytes, (unsigned long long)res.segment_bytes,
                 (unsigned long long)res.context_bytes);
      FUZZ_CHECK(!res.context_released, "release without the CONTEXT flag released the context");
      break;
    }
    case 12: { /* pinned alloc or free */
      uint8_t k = (uint8_t)rd_u(&r, 1);
      int o = pick_owner(&r);
      if ((k & 1) && npins) {
        int i = k % npins;
        FUZZ_CHECK(mem_pinned_free(a, pins[i].p) == 0, "pinned free: %s", ebb_errmsg());
        pins[i] = pins[--npins];
      } else if (o >= 0 && npins < MAX_PINNED) {
        void *p = NULL;
        size_t want = 1 + (size_t)k * 1024;
        FUZZ_CHECK(mem_pinned_alloc(owners[o].h, want, &p) == 0 && p, "pinned alloc: %s",
                   ebb_errmsg());
        ((volatile uint8_t *)p)[want - 1] = 1;
        pins[npins++] = (m_pin){p, o};
      }
      break;
    }
    case 13: { /* lookup */
      uint32_t k = rd_u(&r, 1);
      if (!nblocks)
        break;
      m_block *b = &blocks[k % (uint32_t)nblocks];
      ebb_owner *who = NULL;
      size_t sz = 0;
      FUZZ_CHECK(mem_lookup(a, b->addr, &who, &sz) == 0, "lookup of a live block: %s",
                 ebb_errmsg());
      FUZZ_CHECK(who == owners[b->owner].h && sz == b->req, "lookup: owner/size mismatch");
      break;
    }
    }
    check_stats(a);
  }
  check_json(a);
  mem_allocator_destroy(a);
  return 0;
}
