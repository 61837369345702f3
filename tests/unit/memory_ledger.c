/* The ledger: every event recorded with a monotonic timestamp and owner, the
 * ring bounded, JSON export that parses (jansson) and matches the events, an
 * SVG timeline that is well-formed XML with one colour per owner, a legend,
 * release labels and axes. Writes $EBB_TEST_TMP/timeline.svg for a look. */
#include <inttypes.h>
#include <jansson.h>
#include <sys/stat.h>
#include <time.h>

#include "memory_util.h"
#include "test.h"

/* A small XML well-formedness check: tags nest and close, attributes are
 * quoted, text has no raw '<' or stray '&'. Returns NULL or what is wrong. */
static const char *xml_check(const char *s) {
  static char why[256];
  const char *stack[64];
  size_t lens[64];
  int depth = 0;
  const char *p = s;
  if (strncmp(p, "<?xml", 5) == 0) {
    p = strstr(p, "?>");
    if (!p)
      return "unterminated XML declaration";
    p += 2;
  }
  int root_seen = 0;
  while (*p) {
    if (*p != '<') {
      if (*p == '&') {
        const char *e = strchr(p, ';');
        if (!e || e - p > 8)
          return "stray '&' in text";
      }
      if (!depth && !strchr(" \t\r\n", *p))
        return "text outside the root element";
      p++;
      continue;
    }
    if (p[1] == '/') {
      const char *e = strchr(p, '>');
      if (!e || !depth)
        return "bad closing tag";
      size_t n = (size_t)(e - p - 2);
      depth--;
      if (n != lens[depth] || strncmp(p + 2, stack[depth], n) != 0) {
        snprintf(why, sizeof why, "closing </%.*s> does not match <%.*s>", (int)n, p + 2,
                 (int)lens[depth], stack[depth]);
        return why;
      }
      p = e + 1;
      continue;
    }
    const char *name = p + 1;
    size_t n = strcspn(name, " \t\r\n/>");
    if (!n)
      return "empty tag name";
    const char *q = name + n;
    int inq = 0;
    char qc = 0;
    while (*q && (inq || (*q != '>'))) {
      if (inq && *q == qc)
        inq = 0;
      else if (!inq && (*q == '"' || *q == '\''))
        inq = 1, qc = *q;
      else if (inq && *q == '<')
        return "'<' inside an attribute value";
      else if (!inq && *q == '=' && q[1] != '"' && q[1] != '\'')
        return "unquoted attribute";
      q++;
    }
    if (!*q)
      return "unterminated tag";
    int selfclose = q[-1] == '/';
    if (!selfclose) {
      if (depth == 64)
        return "too deep";
      if (!depth && root_seen)
        return "two root elements";
      stack[depth] = name;
      lens[depth++] = n;
      root_seen = 1;
    }
    p = q + 1;
  }
  return depth ? "unclosed element" : root_seen ? NULL : "no root element";
}

static char *read_all(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f)
    return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  rewind(f);
  char *b = malloc((size_t)n + 1);
  if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
    free(b);
    b = NULL;
  }
  if (b)
    b[n] = 0;
  fclose(f);
  return b;
}

static size_t count(const char *s, const char *needle) {
  size_t n = 0;
  for (const char *p = s; (p = strstr(p, needle)); p++)
    n++;
  return n;
}

/* The y axis's top in bytes: the largest class="ytick" label times the unit
 * named in the axis title; -1 when the SVG has no such ticks or unit. */
static double svg_ytop_bytes(const char *svg) {
  double unit = strstr(svg, "device memory (GiB)")   ? 1024.0 * 1024 * 1024
                : strstr(svg, "device memory (MiB)") ? 1024.0 * 1024
                                                     : -1;
  double top = -1;
  for (const char *p = svg; (p = strstr(p, "class=\"ytick\"")); p++) {
    const char *gt = strchr(p, '>');
    if (!gt)
      break;
    double v = strtod(gt + 1, NULL);
    if (v > top)
      top = v;
  }
  return unit < 0 || top < 0 ? -1 : top * unit;
}

/* Every "released ..." label starts inside the picture and, at about 7 px a
 * character (11 px bold), ends inside it too (width 1000). */
static int release_labels_inside(const char *svg) {
  for (const char *p = svg; (p = strstr(p, ">released ")); p++) {
    const char *t = p;
    while (t > svg && strncmp(t, "<text", 5) != 0)
      t--;
    const char *x = strstr(t, " x=\"");
    const char *end = strchr(p, '<');
    if (!x || x > p || !end)
      return 0;
    double x0 = strtod(x + 4, NULL);
    if (x0 < 0 || x0 + 7.0 * (double)(end - p - 1) > 1000)
      return 0;
  }
  return 1;
}

static void test_events_and_exports(void) {
  const char *tmp = getenv("EBB_TEST_TMP");
  REQUIRE(tmp != NULL);
  mkdir(tmp, 0755);
  dev_device *d = mt_open("cuda:0");
  mem_allocator *a = NULL;
  REQUIRE(mem_allocator_create(d, NULL, &a) == 0);
  mem_ledger *l = mem_allocator_ledger(a);
  REQUIRE(l != NULL);
  const char *names[] = {"decode", "separate", "transcribe <&> \"q\""};
  ebb_owner *o[3];
  for (int i = 0; i < 3; i++)
    REQUIRE(mem_owner_create(a, names[i], NULL, &o[i]) == 0);
  struct timespec ts = {0, 3000000};
  for (int i = 0; i < 3; i++) {
    char mark[64];
    snprintf(mark, sizeof mark, "%s start", names[i]);
    mem_ledger_mark(l, mark);
    uint64_t w = 0, act[4] = {0};
    CHECK_EQ_INT(mem_alloc(o[i], (size_t)(50 + 75 * i) * MiB, "l.c:1", &w), 0);
    for (int s = 0; s < 4; s++) {
      nanosleep(&ts, NULL);
      CHECK_EQ_INT(mem_alloc(o[i], (size_t)(12 + 10 * s) * MiB, "l.c:2", &act[s]), 0);
    }
    for (int s = 3; s >= 0; s--) {
      nanosleep(&ts, NULL);
      CHECK_EQ_INT(mem_free(a, act[s]), 0);
    }
    CHECK_EQ_INT(mem_free(a, w), 0);
    nanosleep(&ts, NULL);
    mem_release_result r = {.size = sizeof r};
    CHECK_EQ_INT(mem_release(a, EBB_RELEASE_DEFAULT | (i == 2 ? EBB_RELEASE_CONTEXT : 0), &r), 0);
    CHECK(r.released_bytes > 0);
    nanosleep(&ts, NULL);
  }
  /* events: monotonic, every kind we caused is there */
  size_t n = mem_ledger_count(l);
  mem_ledger_event *ev = calloc(n, sizeof *ev);
  size_t got = 0;
  uint64_t dropped = 1;
  CHECK_EQ_INT(mem_ledger_events(l, ev, n, &got, &dropped), 0);
  CHECK_EQ_U64(got, n);
  CHECK_EQ_U64(dropped, 0);
  int kinds[32] = {0}, mono = 1;
  for (size_t i = 0; i < got; i++) {
    kinds[ev[i].kind]++;
    if (i && ev[i].t_ns < ev[i - 1].t_ns)
      mono = 0;
  }
  CHECK(mono);
  CHECK_EQ_INT(kinds[EBB_EV_ALLOC], 15);
  CHECK_EQ_INT(kinds[EBB_EV_FREE], 15);
  CHECK_EQ_INT(kinds[EBB_EV_RELEASE], 3);
  CHECK_EQ_INT(kinds[EBB_EV_MARK], 3);
  CHECK_EQ_INT(kinds[EBB_EV_CTX_CREATE], 1);
  CHECK_EQ_INT(kinds[EBB_EV_CTX_RELEASE], 1);
  CHECK(kinds[EBB_EV_SEG_MAP] >= 15 && kinds[EBB_EV_SEG_MAP] == kinds[EBB_EV_SEG_UNMAP]);
  CHECK(kinds[EBB_EV_TRIM] == 3);
  /* an alloc event names its owner and its bytes */
  for (size_t i = 0; i < got; i++)
    if (ev[i].kind == EBB_EV_ALLOC) {
      CHECK_EQ_STR(ev[i].label, "decode");
      CHECK_EQ_U64(ev[i].bytes, 50 * MiB);
      CHECK_EQ_U64(ev[i].owner_bytes, 50 * MiB);
      break;
    }
  /* JSON */
  char path[4096];
  snprintf(path, sizeof path, "%s/timeline.json", tmp);
  CHECK_EQ_INT(mem_ledger_write(l, path), 0);
  json_error_t jerr;
  json_t *root = json_load_file(path, 0, &jerr);
  CHECK_MSG(root != NULL, "timeline JSON does not parse: %s line %d", jerr.text, jerr.line);
  if (root) {
    json_t *events = json_object_get(root, "events");
    CHECK(json_is_array(events));
    CHECK_EQ_U64(json_array_size(events), got);
    CHECK_EQ_STR(json_string_value(json_object_get(root, "device")), "cuda:0");
    CHECK_EQ_U64(json_array_size(json_object_get(root, "owners")), 3);
    json_t *e0 = json_array_get(events, 0);
    CHECK_EQ_STR(json_string_value(json_object_get(e0, "kind")), "mark");
    CHECK_EQ_STR(json_string_value(json_object_get(e0, "label")), "decode start");
    int found = 0;
    size_t i;
    json_t *e;
    json_array_foreach(events, i, e) {
      const char *ow = json_string_value(json_object_get(e, "owner"));
      if (ow && strcmp(ow, names[2]) == 0)
        found = 1;
    }
    CHECK_MSG(found, "owner with quotes and <&> not round-tripped through JSON");
    json_decref(root);
  }
  /* SVG */
  snprintf(path, sizeof path, "%s/timeline.svg", tmp);
  CHECK_EQ_INT(mem_ledger_write(l, path), 0);
  char *svg = read_all(path);
  REQUIRE(svg != NULL);
  const char *why = xml_check(svg);
  CHECK_MSG(why == NULL, "timeline SVG is not well-formed: %s", why ? why : "");
  CHECK(strstr(svg, "<svg xmlns=\"http://www.w3.org/2000/svg\"") != NULL);
  CHECK_EQ_INT((int)count(svg, "fill-opacity=\"0.85\""), 3); /* one area per owner */
  CHECK(strstr(svg, "#4e79a7") && strstr(svg, "#f28e2b") && strstr(svg, "#b07aa1"));
  CHECK(strstr(svg, ">decode (") != NULL); /* legend with peaks */
  CHECK(strstr(svg, "transcribe &lt;&amp;&gt; &quot;q&quot;") != NULL);
  CHECK(strstr(svg, "released ") != NULL);
  CHECK_EQ_INT((int)count(svg, ">released "), 3);
  CHECK(strstr(svg, "time (ms)") != NULL || strstr(svg, "time (s)") != NULL);
  CHECK(strstr(svg, "device memory (MiB)") != NULL);
  CHECK(strstr(svg, "separate start") != NULL);
  /* the context (created on the first allocation, released by the third
   * release) is drawn as its own band, and the axis reaches what the
   * largest release handed back (that one includes the context) */
  CHECK_MSG(count(svg, "class=\"context-band\"") >= 1, "no context band in the timeline SVG");
  CHECK_MSG(strstr(svg, ">context (300 MiB)<") != NULL,
            "legend does not name the context and its size");
  uint64_t rel_max = 0;
  for (size_t i = 0; i < got; i++)
    if (ev[i].kind == EBB_EV_RELEASE && ev[i].bytes > rel_max)
      rel_max = ev[i].bytes;
  CHECK(rel_max >= 300 * MiB);
  double ytop = svg_ytop_bytes(svg);
  CHECK_MSG(ytop >= (double)rel_max,
            "y axis tops out at %.0f bytes, below the %" PRIu64 " bytes released", ytop, rel_max);
  CHECK_MSG(release_labels_inside(svg), "a release label is cut off at the picture's edge");
  free(svg);
  fprintf(stderr, "timeline written to %s\n", path);
  CHECK_EQ_INT(mem_ledger_write(l, "/nonexistent-dir/x.svg"), EBB_EIO);
  CHECK_EQ_INT(mem_ledger_write(l, "x.png"), EBB_EINVAL);
  free(ev);
  for (int i = 0; i < 3; i++)
    mem_owner_destroy(o[i], NULL);
  mem_allocator_destroy(a);
  dev_close(d);
}

static void test_ring_bound(void) {
  dev_device *d = mt_open("cpu");
  mem_alloc_opts opts = {.size = sizeof opts, .seg_kind = EBB_SEG_AUTO, .ledger_events = 100};
  mem_allocator *a = NULL;
  REQUIRE(mem_allocator_create(d, &opts, &a) == 0);
  ebb_owner *o;
  REQUIRE(mem_owner_create(a, "many", NULL, &o) == 0);
  for (int i = 0; i < 500; i++) {
    uint64_t x;
    CHECK_EQ_INT(mem_alloc(o, 4096, "r.c:1", &x), 0);
    CHECK_EQ_INT(mem_free(a, x), 0);
  }
  mem_ledger *l = mem_allocator_ledger(a);
  CHECK_EQ_U64(mem_ledger_count(l), 100);
  mem_ledger_event ev[100];
  size_t n;
  uint64_t dropped;
  CHECK_EQ_INT(mem_ledger_events(l, ev, 100, &n, &dropped), 0);
  CHECK_EQ_U64(n, 100);
  CHECK_EQ_U64(dropped, 1001 - 100); /* 1000 alloc/free + 1 segment map */
  CHECK_EQ_INT(ev[99].kind, EBB_EV_FREE);
  /* the SVG still renders from a partial window */
  FILE *f = tmpfile();
  CHECK_EQ_INT(mem_ledger_write_svg(l, f, "window"), 0);
  fclose(f);
  mem_owner_destroy(o, NULL);
  mem_allocator_destroy(a);
  dev_close(d);
}

/* Marks in a burst (short stages) do not pile up: their labels are merged
 * into one per cluster; the release label stays whole and inside the
 * picture even at the right edge; owner and mark names with markup stay
 * well-formed. */
static void test_crowded_marks(void) {
  const char *tmp = getenv("EBB_TEST_TMP");
  REQUIRE(tmp != NULL);
  mkdir(tmp, 0755);
  dev_device *d = mt_open("cuda:0");
  mem_allocator *a = NULL;
  REQUIRE(mem_allocator_create(d, NULL, &a) == 0);
  mem_ledger *l = mem_allocator_ledger(a);
  ebb_owner *o;
  REQUIRE(mem_owner_create(a, "a<b>&c", NULL, &o) == 0);
  uint64_t x;
  CHECK_EQ_INT(mem_alloc(o, 64 * MiB, "c.c:1", &x), 0);
  struct timespec ts = {0, 20000000};
  nanosleep(&ts, NULL);
  for (int i = 0; i < 20; i++) {
    char m[64];
    snprintf(m, sizeof m, "st%d <&> %s", i, i % 2 ? "load" : "run");
    mem_ledger_mark(l, m);
  }
  CHECK_EQ_INT(mem_free(a, x), 0);
  mem_release_result r = {.size = sizeof r};
  CHECK_EQ_INT(mem_release(a, EBB_RELEASE_DEFAULT | EBB_RELEASE_CONTEXT, &r), 0);
  CHECK(r.context_released);
  char path[4096];
  snprintf(path, sizeof path, "%s/crowded.svg", tmp);
  CHECK_EQ_INT(mem_ledger_write(l, path), 0);
  char *svg = read_all(path);
  REQUIRE(svg != NULL);
  const char *why = xml_check(svg);
  CHECK_MSG(why == NULL, "crowded timeline SVG is not well-formed: %s", why ? why : "");
  size_t nlab = count(svg, "class=\"mark\"");
  CHECK_MSG(nlab >= 1 && nlab <= 2, "20 marks within a few px drew %zu labels (want 1 or 2)", nlab);
  CHECK(strstr(svg, "st0 &lt;&amp;&gt; run") != NULL);
  CHECK(strstr(svg, "<&>") == NULL);
  CHECK_EQ_INT((int)count(svg, ">released "), 1);
  CHECK(release_labels_inside(svg));
  CHECK(count(svg, "class=\"context-band\"") == 1);
  double ytop = svg_ytop_bytes(svg);
  CHECK_MSG(ytop >= (double)r.released_bytes, "y axis top %.0f below released %" PRIu64, ytop,
            r.released_bytes);
  free(svg);
  fprintf(stderr, "crowded timeline written to %s\n", path);
  mem_owner_destroy(o, NULL);
  mem_allocator_destroy(a);
  dev_close(d);
}

int main(void) {
  RUN(test_events_and_exports);
  RUN(test_crowded_marks);
  RUN(test_ring_bound);
  return TEST_END();
}
