/* The SVG timeline, byte for byte: ledgers filled with fixed events (times,
 * owners, bytes chosen by hand, so nothing depends on the clock or the
 * device) are drawn and compared with the pictures in
 * tests/data/memory_timeline/. The scenes reach every branch of the drawing:
 * an empty ledger; stages with a measured context, releases and marks; a
 * crowded one (clustered and cut mark labels, release labels that run out of
 * rows, more owners than the legend lists, GiB and seconds, a ring that
 * dropped its oldest events, a context whose create was dropped); a context
 * of unknown size. A changed picture fails with the first differing line;
 * EBB_GOLDEN_UPDATE=1 rewrites the files (only for a deliberate change of
 * the drawing). */
#include <errno.h>
#include <sys/stat.h>

#include "memory/internal.h"
#include "memory/ledger_internal.h"
#include "test.h"

#define MS 1000000ull
#define MB (1024ull * 1024ull)

/* The newest event gets the time t_ns after the ledger's t0 (the ring's
 * last written slot), so the picture does not depend on the clock. */
static void set_time(mem_ledger *l, uint64_t t_ns) {
  l->ev[(l->head + l->cap - 1) % l->cap].t_ns = l->t0 + t_ns;
}

static void ev(mem_ledger *l, uint64_t t_ns, mem_ledger_kind k, uint32_t owner, uint64_t bytes,
               uint64_t owner_bytes, uint64_t reserved, uint64_t allocated) {
  mem__ledger_add(l, k, owner, 0x7f0000000000ull + owner * 0x1000000ull, bytes, owner_bytes,
                  reserved, allocated);
  set_time(l, t_ns);
}

static void mark(mem_ledger *l, uint64_t t_ns, const char *label) {
  mem_ledger_mark(l, label);
  set_time(l, t_ns);
}

static mem_ledger *new_ledger(size_t cap, const char *device) {
  mem_ledger *l = NULL;
  if (mem__ledger_create(cap, device, &l)) {
    fprintf(stderr, "mem__ledger_create(%zu): %s\n", cap, ebb_errmsg());
    exit(1);
  }
  return l;
}

static mem_ledger *scene_empty(void) { return new_ledger(16, "cpu"); }

/* Three stages in turn on a GPU whose context was measured at 300 MiB. */
static mem_ledger *scene_stages(void) {
  mem_ledger *l = new_ledger(256, "cuda:0");
  mem__ledger_owner_name(l, 1, "decode");
  mem__ledger_owner_name(l, 2, "separate");
  mem__ledger_owner_name(l, 3, "transcribe <&> \"q\"");
  uint64_t res = 0, al = 0;
  ev(l, 0, EBB_EV_CTX_CREATE, 0, 300 * MB, 0, 0, 0);
  mark(l, 1 * MS, "decode start");
  ev(l, 2 * MS, EBB_EV_SEG_MAP, 0, 20 * MB, 0, res += 20 * MB, al);
  ev(l, 3 * MS, EBB_EV_ALLOC, 1, 12 * MB, 12 * MB, res, al += 12 * MB);
  ev(l, 9 * MS, EBB_EV_FREE, 1, 12 * MB, 0, res, al -= 12 * MB);
  ev(l, 10 * MS, EBB_EV_TRIM, 0, 20 * MB, 0, res -= 20 * MB, al);
  ev(l, 10 * MS, EBB_EV_RELEASE, 0, 20 * MB, 0, res, al);
  mark(l, 11 * MS, "separate start");
  ev(l, 12 * MS, EBB_EV_SEG_MAP, 0, 400 * MB, 0, res += 400 * MB, al);
  ev(l, 12 * MS, EBB_EV_ALLOC, 2, 256 * MB, 256 * MB, res, al += 256 * MB);
  ev(l, 13 * MS, EBB_EV_ALLOC, 2, 100 * MB, 356 * MB, res, al += 100 * MB);
  ev(l, 20 * MS, EBB_EV_FREE, 2, 100 * MB, 256 * MB, res, al -= 100 * MB);
  ev(l, 22 * MS, EBB_EV_LEAK_FREE, 2, 256 * MB, 0, res, al -= 256 * MB);
  ev(l, 23 * MS, EBB_EV_TRIM, 0, 400 * MB, 0, res -= 400 * MB, al);
  ev(l, 23 * MS, EBB_EV_RELEASE, 0, 400 * MB, 0, res, al);
  mark(l, 24 * MS, "transcribe start");
  ev(l, 25 * MS, EBB_EV_SEG_MAP, 0, 2 * MB, 0, res += 2 * MB, al);
  ev(l, 25 * MS, EBB_EV_ALLOC, 3, 512 * 1024, 512 * 1024, res, al += 512 * 1024);
  ev(l, 26 * MS, EBB_EV_PIN_ALLOC, 3, 4 * MB, 512 * 1024, res, al);
  ev(l, 30 * MS, EBB_EV_PIN_FREE, 3, 4 * MB, 512 * 1024, res, al);
  ev(l, 31 * MS, EBB_EV_FREE, 3, 512 * 1024, 0, res, al -= 512 * 1024);
  ev(l, 32 * MS, EBB_EV_TRIM, 0, 2 * MB, 0, res -= 2 * MB, al);
  ev(l, 33 * MS, EBB_EV_CTX_RELEASE, 0, 300 * MB, 0, res, al);
  ev(l, 33 * MS, EBB_EV_RELEASE, 0, 302 * MB, 0, res, al);
  return l;
}

/* Seconds and GiB; six owners in turn; marks in clusters with long labels;
 * more releases than label rows; the ring (cap 64) drops the oldest events,
 * among them the context's create: its release says it was alive from the
 * start of the window. */
static mem_ledger *scene_crowded(void) {
  mem_ledger *l = new_ledger(64, "cuda:1");
  char name[64];
  for (uint32_t id = 1; id <= 6; id++) {
    snprintf(name, sizeof name, id % 5 ? "stage %u" : "st%u <&> caf\xc3\xa9", id);
    mem__ledger_owner_name(l, id, name);
  }
  uint64_t res = 0, al = 0, t = 0;
  uint64_t held[7] = {0};
  ev(l, t, EBB_EV_CTX_CREATE, 0, 0, 0, 0, 0);
  for (uint32_t step = 1; step <= 26; step++) {
    uint32_t id = step % 6 + 1, prev = (step + 5 - 1) % 6 + 1;
    uint64_t b = (uint64_t)(40 + 7 * step) * MB;
    t += 180 * MS;
    if (step % 3 == 1)
      ev(l, t, EBB_EV_SEG_MAP, 0, 2 * b, 0, res += 2 * b, al);
    held[id] += b;
    ev(l, t + MS, EBB_EV_ALLOC, id, b, held[id], res, al += b);
    if (step % 4 == 0) {
      snprintf(name, sizeof name, "st%u <&> run with a rather long label %u", id, step);
      mark(l, t + 2 * MS, name);
      snprintf(name, sizeof name, "st%u <&> load", id);
      mark(l, t + 3 * MS, name);
      mark(l, t + 4 * MS, "caf\xc3\xa9 \xe2\x80\x94 une \xc3\xa9tape tr\xc3\xa8s longue");
    }
    if (step % 2 == 0 && held[prev]) {
      ev(l, t + 50 * MS, EBB_EV_FREE, prev, held[prev], 0, res, al -= held[prev]);
      held[prev] = 0;
      ev(l, t + 51 * MS, EBB_EV_TRIM, 0, 30 * MB, 0, res -= 30 * MB, al);
      ev(l, t + 51 * MS, EBB_EV_RELEASE, 0, (uint64_t)step * 30 * MB, 0, res, al);
    }
  }
  t += 100 * MS;
  ev(l, t, EBB_EV_CTX_RELEASE, 0, 310 * MB, 0, res, al);
  ev(l, t, EBB_EV_RELEASE, 0, 2600ull * MB, 0, res, al);
  ev(l, t + MS, EBB_EV_CTX_CREATE, 0, 0, 0, res, al);
  ev(l, t + 400 * MS, EBB_EV_PARK, 1, held[1], held[1], res, al);
  ev(l, t + 600 * MS, EBB_EV_RELEASE, 0, 5ull << 30, 0, res, al);
  return l;
}

/* 26 owners: the legend lists 24 and says how many more. Each owner's area
 * is a path over every pixel column (about 19 KiB), so this picture is
 * compared by its size and FNV-1a hash, not kept whole. */
static mem_ledger *scene_many_owners(void) {
  mem_ledger *l = new_ledger(256, "cuda:0");
  char name[32];
  uint64_t res = 0, al = 0;
  for (uint32_t id = 1; id <= 26; id++) {
    snprintf(name, sizeof name, "owner %u", id);
    mem__ledger_owner_name(l, id, name);
    ev(l, id * 3 * MS, EBB_EV_SEG_MAP, 0, 20 * MB, 0, res += 20 * MB, al);
    ev(l, id * 3 * MS + MS, EBB_EV_ALLOC, id, id * MB, id * MB, res, al += id * MB);
  }
  for (uint32_t k = 0; k < 6; k++) {
    uint32_t id = 26 - 5 * k;
    ev(l, 100 * MS + id * MS, EBB_EV_FREE, id, id * MB, 0, res, al -= id * MB);
  }
  return l;
}

/* A context created and released without a measured size: a thin strip. */
static mem_ledger *scene_unknown_context(void) {
  mem_ledger *l = new_ledger(64, "cuda:0");
  mem__ledger_owner_name(l, 1, "only");
  ev(l, 0, EBB_EV_SEG_MAP, 0, 2 * MB, 0, 2 * MB, 0);
  ev(l, 1 * MS, EBB_EV_CTX_CREATE, 0, 0, 0, 2 * MB, 0);
  ev(l, 2 * MS, EBB_EV_ALLOC, 1, MB, MB, 2 * MB, MB);
  mark(l, 2 * MS, "only start");
  ev(l, 700 * MS, EBB_EV_FREE, 1, MB, 0, 2 * MB, 0);
  ev(l, 900 * MS, EBB_EV_CTX_RELEASE, 0, 0, 0, 2 * MB, 0);
  ev(l, 1300 * MS, EBB_EV_CTX_CREATE, 0, 0, 0, 2 * MB, 0);
  mark(l, 1990 * MS, "only late mark near the right edge");
  ev(l, 1999 * MS, EBB_EV_RELEASE, 0, 2 * MB, 0, 0, 0);
  return l;
}

/* A context whose release measured more than its create said, and one
 * created unmeasured whose release says its size. */
static mem_ledger *scene_context_sizes(void) {
  mem_ledger *l = new_ledger(64, "cuda:0");
  mem__ledger_owner_name(l, 1, "small");
  ev(l, 0, EBB_EV_CTX_CREATE, 0, 50 * MB, 0, 0, 0);
  ev(l, 1 * MS, EBB_EV_SEG_MAP, 0, 2 * MB, 0, 2 * MB, 0);
  ev(l, 2 * MS, EBB_EV_ALLOC, 1, MB, MB, 2 * MB, MB);
  ev(l, 5 * MS, EBB_EV_FREE, 1, MB, 0, 2 * MB, 0);
  ev(l, 6 * MS, EBB_EV_TRIM, 0, 2 * MB, 0, 0, 0);
  ev(l, 6 * MS, EBB_EV_CTX_RELEASE, 0, 90 * MB, 0, 0, 0);
  ev(l, 6 * MS, EBB_EV_RELEASE, 0, 92 * MB, 0, 0, 0);
  ev(l, 8 * MS, EBB_EV_CTX_CREATE, 0, 0, 0, 0, 0);
  ev(l, 9 * MS, EBB_EV_ALLOC, 1, MB, MB, 2 * MB, MB);
  ev(l, 12 * MS, EBB_EV_CTX_RELEASE, 0, 70 * MB, 0, 0, 0);
  return l;
}

static char *read_all(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return NULL;
  size_t cap = 1 << 16, n = 0;
  char *buf = malloc(cap + 1);
  size_t k;
  while (buf && (k = fread(buf + n, 1, cap - n, f)) > 0) {
    n += k;
    if (n == cap) {
      char *nb = realloc(buf, (cap *= 2) + 1);
      if (!nb) {
        free(buf);
        buf = NULL;
        break;
      }
      buf = nb;
    }
  }
  fclose(f);
  if (buf) {
    buf[n] = 0;
    *len = n;
  }
  return buf;
}

/* Line number and both lines of the first difference, or 0 when equal. */
static int first_diff(const char *a, const char *b, char *why, size_t cap) {
  int line = 1;
  const char *la = a, *lb = b;
  for (; *a && *a == *b; a++, b++)
    if (*a == '\n') {
      line++;
      la = a + 1;
      lb = b + 1;
    }
  if (!*a && !*b)
    return 0;
  snprintf(why, cap, "line %d:\n  drawn: %.*s\n  want:  %.*s", line, (int)strcspn(la, "\n"), la,
           (int)strcspn(lb, "\n"), lb);
  return line;
}

static uint64_t fnv1a(const char *p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i++)
    h = (h ^ (unsigned char)p[i]) * 0x100000001b3ull;
  return h;
}

/* A picture kept as "<bytes> <fnv1a64 hex>" in NAME.sum. */
static void check_sum(const char *name, const char *got, size_t ng, const char *sum_path,
                      int update) {
  char line[128];
  snprintf(line, sizeof line, "%zu %016" PRIx64 "\n", ng, fnv1a(got, ng));
  if (update) {
    FILE *f = fopen(sum_path, "w");
    CHECK_MSG(f && fputs(line, f) >= 0 && fclose(f) == 0, "%s: cannot write", sum_path);
    return;
  }
  size_t nw = 0;
  char *want = read_all(sum_path, &nw);
  CHECK_MSG(want != NULL, "%s: the golden sum is missing (%s)", sum_path, strerror(errno));
  if (want)
    CHECK_MSG(strcmp(want, line) == 0, "%s: the picture drawn is %s but %s says %s", name, line,
              sum_path, want);
  free(want);
}

/* Draws l into $EBB_TEST_TMP/NAME.svg and compares it with the golden
 * NAME.svg (whole) or NAME.sum (size and hash). */
static void check_scene(const char *name, mem_ledger *l, const char *title, int whole) {
  const char *src = getenv("EBB_SOURCE_DIR");
  const char *tmp = getenv("EBB_TEST_TMP");
  REQUIRE(src != NULL && tmp != NULL);
  mkdir(tmp, 0755);
  const char *upd = getenv("EBB_GOLDEN_UPDATE");
  int update = upd && strcmp(upd, "1") == 0;
  char got_path[1024], want_path[1024];
  snprintf(got_path, sizeof got_path, "%s/%s.svg", tmp, name);
  snprintf(want_path, sizeof want_path, "%s/tests/data/memory_timeline/%s.%s", src, name,
           whole ? "svg" : "sum");
  FILE *f = fopen(got_path, "w");
  CHECK_MSG(f != NULL, "%s: cannot write: %s", got_path, strerror(errno));
  if (!f)
    return;
  CHECK_EQ_INT(mem_ledger_write_svg(l, f, title), 0);
  fclose(f);
  mem__ledger_destroy(l);
  size_t ng = 0, nw = 0;
  char *got = read_all(got_path, &ng);
  REQUIRE(got != NULL);
  if (!whole) {
    check_sum(name, got, ng, want_path, update);
    free(got);
    return;
  }
  if (update) {
    FILE *w = fopen(want_path, "w");
    CHECK_MSG(w && fwrite(got, 1, ng, w) == ng && fclose(w) == 0, "%s: cannot write", want_path);
  }
  char *want = read_all(want_path, &nw);
  CHECK_MSG(want != NULL, "%s: the golden picture is missing (%s)", want_path, strerror(errno));
  char why[2048];
  if (want)
    CHECK_MSG(ng == nw && !first_diff(got, want, why, sizeof why),
              "%s differs from %s (%zu vs %zu bytes) at %s", got_path, want_path, ng, nw,
              first_diff(got, want, why, sizeof why) ? why : "(same lines, other length)");
  free(got);
  free(want);
}

static void test_empty(void) { check_scene("empty", scene_empty(), NULL, 1); }
static void test_stages(void) { check_scene("stages", scene_stages(), NULL, 1); }
static void test_crowded(void) { check_scene("crowded", scene_crowded(), "crowded <&> window", 1); }
static void test_unknown_context(void) {
  check_scene("unknown_context", scene_unknown_context(), "a context of unknown size", 1);
}
static void test_context_sizes(void) {
  check_scene("context_sizes", scene_context_sizes(), NULL, 1);
}
static void test_many_owners(void) { check_scene("many_owners", scene_many_owners(), NULL, 0); }

int main(void) {
  RUN(test_empty);
  RUN(test_stages);
  RUN(test_crowded);
  RUN(test_unknown_context);
  RUN(test_context_sizes);
  RUN(test_many_owners);
  return TEST_END();
}
