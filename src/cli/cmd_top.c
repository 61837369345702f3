/* `ebb top`: the live page's picture in a terminal (curses), like nvtop.
 *
 * Against a server (default http://127.0.0.1:8470): reads GET /v1/events
 * (docs/api.md) on a thread of its own and draws, every half second, each
 * device's memory (the driver's used, ebb's reserved, the context, other
 * processes, unattributed) with its owners (pipeline ▸ stage), the
 * pipelines, the recent releases with the bytes the driver got back, the
 * jobs and the leaks. With no server reachable (or --local) it shows the
 * driver's own view through NVML: every device and every process on the box
 * with its memory, ebb or not.
 *
 * Every frame is built as lines first (frame()), then drawn clipped to the
 * terminal, so a narrow or short terminal loses columns and rows, never
 * wraps; --once prints one frame as text (for scripts and the README). */
#include <curl/curl.h>
#include <curses.h>
#include <jansson.h>
#include <locale.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/commands.h"
#include "device/nvml.h"
#include "ebb/error.h"

#define MAXLINES 200
#define KEEP 8

enum { L_PLAIN, L_HEAD, L_BAD, L_GOOD, L_DIM };
typedef struct line {
  char text[512];
  int attr;
} line;
typedef struct frame_buf {
  line l[MAXLINES];
  int n, cols;
} frame_buf;

typedef struct top {
  char url[512];
  int local_only, explicit_server;
  pthread_mutex_t mu;
  atomic_int quit;
  /* from the server (under mu) */
  int connected;
  char why[300];   /* why not connected */
  json_t *devices; /* label -> last memory event */
  json_t *info;    /* hello's devices */
  json_t *pipelines, *jobs, *releases, *leaks;
  char sse[1 << 16]; /* partial event */
  size_t ssen;
} top;

/* --- text helpers ------------------------------------------------------------ */
static void fmt_bytes(char *b, size_t n, double v) {
  if (v >= 1073741824.0)
    snprintf(b, n, "%.2f GiB", v / 1073741824.0);
  else if (v >= 1048576.0)
    snprintf(b, n, "%.0f MiB", v / 1048576.0);
  else if (v >= 1024.0)
    snprintf(b, n, "%.0f KiB", v / 1024.0);
  else
    snprintf(b, n, "%.0f B", v);
}
static double num(json_t *o, const char *k) { return json_number_value(json_object_get(o, k)); }
static const char *str(json_t *o, const char *k) {
  const char *s = json_string_value(json_object_get(o, k));
  return s ? s : "";
}

static void add(frame_buf *f, int attr, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void add(frame_buf *f, int attr, const char *fmt, ...) {
  if (f->n >= MAXLINES)
    return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(f->l[f->n].text, sizeof f->l[f->n].text, fmt, ap);
  va_end(ap);
  f->l[f->n++].attr = attr;
}

/* s padded with blanks to width columns (UTF-8 aware: "▸" is one column). */
static const char *pad(char *b, size_t n, const char *s, int width) {
  int cols = 0;
  for (const char *p = s; *p; p++)
    cols += ((unsigned char)*p & 0xC0) != 0x80;
  snprintf(b, n, "%s%*s", s, cols < width ? width - cols : 0, "");
  return b;
}

/* [####==..    ] of width w: owners #, context =, others ., free blank. */
static void bar(char *b, int w, double total, double owners, double ctx, double others,
                double used) {
  if (w < 4 || total <= 0) {
    b[0] = '\0';
    return;
  }
  int k = 0;
  b[k++] = '[';
  int inner = w - 2;
  double scale = inner / total;
  int no = (int)(owners * scale + 0.5), nc = (int)(ctx * scale + 0.5),
      nt = (int)(others * scale + 0.5), nu = (int)(used * scale + 0.5);
  for (int i = 0; i < inner; i++)
    b[k++] = i < no ? '#' : i < no + nc ? '=' : i < no + nc + nt ? '%' : i < nu ? '-' : ' ';
  b[k++] = ']';
  b[k] = '\0';
}

/* --- the server's picture -------------------------------------------------------- */
static int newest_first(const void *a, const void *b) {
  double x = num(*(json_t *const *)a, "created"), y = num(*(json_t *const *)b, "created");
  return x < y ? 1 : x > y ? -1 : 0;
}

/* One device's section: the bar, ebb's figures, the owners. */
static void frame_device(top *t, frame_buf *f, const char *label, json_t *m) {
  char a[32], b[32], c[32], d[32], br[256];
  int bw = f->cols - 40 > 60 ? 60 : f->cols - 40;
  const char *name = "";
  size_t i;
  json_t *x;
  json_array_foreach(t->info, i, x) if (!strcmp(str(x, "device"), label)) name = str(x, "name");
  double used = num(m, "driver_used_bytes"), total = num(m, "driver_total_bytes");
  double ctx = num(m, "context_bytes"), others = num(m, "others_bytes");
  add(f, L_HEAD, "%s  %s", label, name);
  fmt_bytes(a, sizeof a, used);
  fmt_bytes(b, sizeof b, total);
  bar(br, bw, total, num(m, "allocated_bytes"), ctx, others, used);
  add(f, L_PLAIN, " %s %s / %s used", br, a, b);
  fmt_bytes(a, sizeof a, num(m, "reserved_bytes"));
  fmt_bytes(b, sizeof b, ctx);
  fmt_bytes(c, sizeof c, others);
  fmt_bytes(d, sizeof d, num(m, "cached_bytes"));
  add(f, L_DIM, " ebb %s reserved (%s cached) · context %s · other processes %s", a, d, b,
      json_is_null(json_object_get(m, "others_bytes")) ? "?" : c);
  if (num(m, "asleep_bytes") > 0) {
    fmt_bytes(a, sizeof a, num(m, "asleep_bytes"));
    add(f, L_DIM, " asleep %s (parked in host memory, not on the device)", a);
  }
  if (num(m, "unattributed_bytes") > 0) {
    fmt_bytes(a, sizeof a, num(m, "unattributed_bytes"));
    add(f, L_BAD, " unattributed %s (taken from the driver behind ebb's back)", a);
  }
  add(f, L_DIM, " %-32s %12s %12s", "OWNER", "NOW", "PEAK");
  int any = 0;
  json_array_foreach(json_object_get(m, "owners"), i, x) {
    if (num(x, "bytes") <= 0)
      continue;
    char who[200], padded[240];
    const char *p = str(x, "pipeline");
    snprintf(who, sizeof who, "%s%s%s", p, *p ? " ▸ " : "", str(x, "owner"));
    fmt_bytes(a, sizeof a, num(x, "bytes"));
    fmt_bytes(b, sizeof b, num(x, "peak"));
    int asleep = num(x, "asleep_bytes") > 0;
    add(f, asleep ? L_DIM : L_PLAIN, " %s %12s %12s%s", pad(padded, sizeof padded, who, 32), a, b,
        asleep ? "  asleep" : "");
    any = 1;
  }
  if (!any)
    add(f, L_DIM, " (no owner holds device memory)");
  add(f, L_PLAIN, "%s", "");
}

static void frame_pipelines(top *t, frame_buf *f) {
  size_t i;
  json_t *x;
  add(f, L_HEAD, "PIPELINES");
  json_array_foreach(t->pipelines, i, x) {
    char stages[200] = "", where[200] = "";
    size_t k;
    json_t *s;
    json_array_foreach(json_object_get(x, "stages"), k, s) {
      size_t n = strlen(stages);
      snprintf(stages + n, sizeof stages - n, "%s%s", k ? " ▸ " : "", str(s, "name"));
    }
    json_array_foreach(json_object_get(x, "devices"), k, s) {
      size_t n = strlen(where);
      snprintf(where + n, sizeof where - n, "%s%s", k ? "," : " on ", json_string_value(s));
    }
    int loaded = json_is_true(json_object_get(x, "loaded"));
    int asleep = json_is_true(json_object_get(x, "asleep"));
    add(f,
        asleep   ? L_DIM
        : loaded ? L_GOOD
                 : L_PLAIN,
        " %-16s %-9s sessions %-3d %s%s", str(x, "name"),
        asleep   ? "asleep"
        : loaded ? "loaded"
                 : "unloaded",
        (int)json_integer_value(json_object_get(x, "sessions")), stages, where);
  }
  add(f, L_PLAIN, "%s", "");
}

static void frame_releases(top *t, frame_buf *f) {
  char a[32];
  add(f, L_HEAD, "RECENT RELEASES");
  if (!json_array_size(t->releases))
    add(f, L_DIM, " (none yet)");
  for (size_t k = json_array_size(t->releases); k-- > 0;) {
    json_t *x = json_array_get(t->releases, k);
    time_t tt = (time_t)num(x, "t");
    struct tm tm;
    localtime_r(&tt, &tm);
    fmt_bytes(a, sizeof a, num(x, "bytes"));
    const char *st = str(x, "stage");
    int asleep = json_is_true(json_object_get(x, "asleep"));
    add(f, L_GOOD, " %02d:%02d:%02d  %s  -%s released%s%s%s", tm.tm_hour, tm.tm_min, tm.tm_sec,
        str(x, "device"), a, *st ? " by " : "",
        *st ? st : (num(x, "context_bytes") > 0 ? " (the context)" : ""),
        asleep ? " (asleep)" : "");
  }
  add(f, L_PLAIN, "%s", "");
}

static void frame_jobs(top *t, frame_buf *f) {
  char a[32], b[32];
  add(f, L_HEAD, "JOBS");
  if (!json_array_size(t->jobs))
    add(f, L_DIM, " (none yet)");
  json_t *order[KEEP + 1], *x;
  size_t nj = 0, i;
  json_array_foreach(t->jobs, i, x) if (nj < KEEP + 1) order[nj++] = x;
  qsort(order, nj, sizeof *order, newest_first);
  for (size_t k = 0; k < nj; k++) {
    x = order[k];
    char stages[300] = "";
    size_t j;
    json_t *s;
    json_array_foreach(json_object_get(x, "stages"), j, s) {
      size_t n = strlen(stages);
      fmt_bytes(a, sizeof a, num(s, "peak_bytes"));
      fmt_bytes(b, sizeof b, num(s, "released_bytes"));
      snprintf(stages + n, sizeof stages - n, "%s%s peak %s rel %s", j ? ", " : "", str(s, "name"),
               a, b);
    }
    const char *state = str(x, "state");
    double secs =
        num(x, "started") > 0
            ? (num(x, "finished") > 0 ? num(x, "finished") : (double)time(NULL)) - num(x, "started")
            : 0;
    fmt_bytes(a, sizeof a, num(x, "released_bytes"));
    add(f, !strcmp(state, "failed") || !strcmp(state, "cancelled") ? L_BAD : L_PLAIN,
        " %-8.8s %-12s %-10s %6.1f s  released %-9s %s", str(x, "id"), str(x, "pipeline"), state,
        secs, a, stages);
  }
}

static void frame_leaks(top *t, frame_buf *f) {
  char a[32];
  size_t i;
  json_t *x;
  if (!json_array_size(t->leaks))
    return;
  add(f, L_PLAIN, "%s", "");
  add(f, L_BAD, "LEAKS");
  json_array_foreach(t->leaks, i, x) {
    fmt_bytes(a, sizeof a, num(x, "bytes"));
    json_t *s0 = json_array_get(json_object_get(x, "sites"), 0);
    const char *p = str(x, "pipeline");
    add(f, L_BAD, " %s  %s%s%s  %s  at %s", str(x, "device"), p, *p ? " ▸ " : "", str(x, "owner"),
        a, s0 ? str(s0, "site") : "?");
  }
}

/* Every device the server drives (hello's order), then the rest. */
static void frame_server(top *t, frame_buf *f) {
  size_t i;
  json_t *x;
  json_array_foreach(t->info, i, x) {
    json_t *m = json_object_get(t->devices, str(x, "device"));
    if (m)
      frame_device(t, f, str(x, "device"), m);
  }
  const char *label;
  json_object_foreach(t->devices, label, x) {
    int known = 0;
    size_t k;
    json_t *y;
    json_array_foreach(t->info, k, y) known |= !strcmp(str(y, "device"), label);
    if (!known)
      frame_device(t, f, label, x);
  }
  frame_pipelines(t, f);
  frame_releases(t, f);
  frame_jobs(t, f);
  frame_leaks(t, f);
}

/* --- the driver's picture (no server) -------------------------------------------- */
static void proc_name(unsigned pid, char *b, size_t n) {
  char p[64];
  snprintf(p, sizeof p, "/proc/%u/comm", pid);
  FILE *f = fopen(p, "r");
  if (!f || !fgets(b, (int)n, f))
    snprintf(b, n, "?");
  else
    b[strcspn(b, "\n")] = '\0';
  if (f)
    fclose(f);
}

static void frame_local(frame_buf *f) {
  unsigned count = 0;
  if (dev_nvml_count(&count) != 0) {
    add(f, L_BAD, "no GPU to show: %s", dev_nvml_why()[0] ? dev_nvml_why() : ebb_errmsg());
    return;
  }
  char a[32], b[32], br[256];
  int bw = f->cols - 40 > 60 ? 60 : f->cols - 40;
  for (unsigned i = 0; i < count; i++) {
    nvmlDevice_t d;
    uint64_t fr = 0, tot = 0;
    if (dev_nvml_device((int)i, NULL, &d) != 0 || dev_nvml_meminfo(d, &fr, &tot) != 0) {
      add(f, L_BAD, "GPU %u: %s", i, ebb_errmsg());
      continue;
    }
    unsigned pids[64], n = 0;
    uint64_t bytes[64];
    dev_nvml_processes(d, pids, bytes, 64, &n);
    double procs = 0;
    for (unsigned k = 0; k < n; k++)
      procs += bytes[k] == ~0ull ? 0 : (double)bytes[k];
    fmt_bytes(a, sizeof a, (double)(tot - fr));
    fmt_bytes(b, sizeof b, (double)tot);
    add(f, L_HEAD, "GPU %u (cuda:%u)", i, i);
    bar(br, bw, (double)tot, 0, 0, procs, (double)(tot - fr));
    add(f, L_PLAIN, " %s %s / %s used", br, a, b);
    add(f, L_DIM, " %-8s %-20s %12s", "PID", "PROCESS", "MEMORY");
    if (!n)
      add(f, L_DIM, " (no process holds memory on it)");
    for (unsigned k = 0; k < n; k++) {
      char name[64];
      proc_name(pids[k], name, sizeof name);
      if (bytes[k] == ~0ull)
        snprintf(a, sizeof a, "?");
      else
        fmt_bytes(a, sizeof a, (double)bytes[k]);
      add(f, L_PLAIN, " %-8u %-20s %12s", pids[k], name, a);
    }
    add(f, L_PLAIN, "%s", "");
  }
}

static void frame(top *t, frame_buf *f, int cols) {
  f->n = 0;
  f->cols = cols;
  pthread_mutex_lock(&t->mu);
  int connected = t->connected;
  if (connected) {
    add(f, L_HEAD, "ebb top · %s · live   (q quits)", t->url);
    add(f, L_PLAIN, "%s", "");
    frame_server(t, f);
  } else {
    if (t->local_only)
      add(f, L_HEAD, "ebb top · local: the driver's view of every process   (q quits)");
    else
      add(f, L_HEAD, "ebb top · no ebb server at %s (%s): the driver's view   (q quits)", t->url,
          t->why[0] ? t->why : "connecting");
    add(f, L_PLAIN, "%s", "");
  }
  pthread_mutex_unlock(&t->mu);
  if (!connected)
    frame_local(f);
}

/* --- the event stream ---------------------------------------------------------------- */
static void push_keep(json_t *arr, json_t *o) {
  json_array_append(arr, o);
  while (json_array_size(arr) > KEEP)
    json_array_remove(arr, 0);
}

static void on_event(top *t, const char *name, json_t *d) {
  if (!strcmp(name, "hello")) {
    json_decref(t->info);
    t->info = json_incref(json_object_get(d, "devices"));
    json_decref(t->pipelines);
    t->pipelines = json_incref(json_object_get(d, "pipelines"));
    json_array_clear(t->jobs);
    size_t i;
    json_t *x;
    json_array_foreach(json_object_get(d, "jobs"), i, x) push_keep(t->jobs, x);
    json_array_clear(t->leaks);
    json_array_foreach(json_object_get(d, "leaks"), i, x) push_keep(t->leaks, x);
    json_array_clear(t->releases);
    json_object_clear(t->devices);
    t->connected = 1;
  } else if (!strcmp(name, "memory")) {
    json_object_set(t->devices, str(d, "device"), d);
  } else if (!strcmp(name, "release")) {
    push_keep(t->releases, d);
  } else if (!strcmp(name, "job")) {
    size_t i;
    json_t *x;
    json_array_foreach(t->jobs, i, x) if (!strcmp(str(x, "id"), str(d, "id"))) {
      json_array_remove(t->jobs, i);
      break;
    }
    push_keep(t->jobs, d);
  } else if (!strcmp(name, "pipelines")) {
    json_decref(t->pipelines);
    t->pipelines = json_incref(json_object_get(d, "pipelines"));
  } else if (!strcmp(name, "leak")) {
    push_keep(t->leaks, d);
  } else if (!strcmp(name, "dropped")) {
    t->connected = 0;
    snprintf(t->why, sizeof t->why, "dropped as too slow; reconnecting");
  }
}

static void parse_block(top *t, char *block) {
  char name[32] = "message";
  const char *data = NULL;
  for (char *save = NULL, *ln = strtok_r(block, "\n", &save); ln;
       ln = strtok_r(NULL, "\n", &save)) {
    if (!strncmp(ln, "event: ", 7))
      snprintf(name, sizeof name, "%s", ln + 7);
    else if (!strncmp(ln, "data: ", 6))
      data = ln + 6;
  }
  json_t *d = data ? json_loads(data, 0, NULL) : NULL;
  if (!d)
    return;
  pthread_mutex_lock(&t->mu);
  on_event(t, name, d);
  pthread_mutex_unlock(&t->mu);
  json_decref(d);
}

static size_t on_data(char *p, size_t sz, size_t nm, void *arg) {
  top *t = arg;
  size_t n = sz * nm;
  if (atomic_load(&t->quit))
    return 0;
  for (size_t i = 0; i < n; i++) {
    if (t->ssen + 1 >= sizeof t->sse)
      t->ssen = 0; /* an event larger than 64 KiB: skip it */
    t->sse[t->ssen++] = p[i];
    if (t->ssen >= 2 && t->sse[t->ssen - 1] == '\n' && t->sse[t->ssen - 2] == '\n') {
      t->sse[t->ssen] = '\0';
      parse_block(t, t->sse);
      t->ssen = 0;
    }
  }
  return n;
}

static int on_progress(void *arg, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d) {
  (void)a, (void)b, (void)c, (void)d;
  return atomic_load(&((top *)arg)->quit) ? 1 : 0;
}

static void *reader(void *arg) {
  top *t = arg;
  char url[600], auth[600];
  snprintf(url, sizeof url, "%s/v1/events", t->url);
  const char *tok = getenv("EBB_TOKEN");
  snprintf(auth, sizeof auth, "Authorization: Bearer %s", tok ? tok : "");
  while (!atomic_load(&t->quit)) {
    CURL *h = curl_easy_init();
    struct curl_slist *hdr = curl_slist_append(NULL, "Accept: text/event-stream");
    if (tok && *tok)
      hdr = curl_slist_append(hdr, auth);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, t);
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, t);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, 2L);
    curl_easy_setopt(h, CURLOPT_FAILONERROR, 1L);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    t->ssen = 0;
    CURLcode rc = curl_easy_perform(h);
    long code = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    pthread_mutex_lock(&t->mu);
    t->connected = 0;
    if (code == 401)
      snprintf(t->why, sizeof t->why, "it wants a token: set EBB_TOKEN%s",
               tok && *tok ? " to one of its tokens" : "");
    else if (code == 403)
      snprintf(t->why, sizeof t->why, "EBB_TOKEN may not read /v1/events: an admin token may");
    else if (rc != CURLE_OK)
      snprintf(t->why, sizeof t->why, "%s", curl_easy_strerror(rc));
    else
      snprintf(t->why, sizeof t->why, "the stream ended");
    pthread_mutex_unlock(&t->mu);
    curl_slist_free_all(hdr);
    curl_easy_cleanup(h);
    for (int i = 0; i < 20 && !atomic_load(&t->quit); i++)
      usleep(100 * 1000);
  }
  return NULL;
}

/* --- drawing ---------------------------------------------------------------------------- */
/* Bytes of s that fit in cols columns (UTF-8: continuation bytes take none). */
static int fit(const char *s, int cols) {
  int c = 0, i = 0;
  for (; s[i]; i++) {
    if (((unsigned char)s[i] & 0xC0) != 0x80) {
      if (c == cols)
        break;
      c++;
    }
  }
  return i;
}

static void draw(const frame_buf *f) {
  int rows, cols;
  getmaxyx(stdscr, rows, cols);
  erase();
  for (int i = 0; i < f->n && i < rows; i++) {
    int a = f->l[i].attr == L_HEAD   ? A_BOLD
            : f->l[i].attr == L_BAD  ? (COLOR_PAIR(1) | A_BOLD)
            : f->l[i].attr == L_GOOD ? COLOR_PAIR(2)
            : f->l[i].attr == L_DIM  ? A_DIM
                                     : A_NORMAL;
    if (i == rows - 1 && f->n > rows) {
      attron(A_DIM);
      mvaddnstr(i, 0, "… (taller terminal for more)", fit("… (taller terminal for more)", cols));
      attroff(A_DIM);
      break;
    }
    attron(a);
    mvaddnstr(i, 0, f->l[i].text, fit(f->l[i].text, cols));
    attroff(a);
  }
  refresh();
}

static void top_usage(FILE *f) {
  fprintf(f, "usage: ebb top [--server URL] [--local] [--once]\n\n"
             "The live picture of device memory in the terminal, refreshing like nvtop:\n"
             "per device the driver's used memory, ebb's reserved memory, the context,\n"
             "other processes and unattributed memory; the owners (pipeline ▸ stage);\n"
             "pipelines; recent releases with the bytes handed back; jobs; leaks.\n"
             "It reads the server's GET /v1/events (EBB_TOKEN is sent as a bearer token).\n"
             "With no server reachable, or --local, it shows the driver's view through\n"
             "NVML: every GPU and every process on it, ebb or not. q quits.\n\n"
             "  --server URL  the ebb server (default http://127.0.0.1:8470)\n"
             "  --local       only the driver's view; do not look for a server\n"
             "  --once        print one frame as text and exit (no curses)\n");
}

/* The options into t and *once; -1 to go on, else the exit status. */
static int top_args(top *t, int argc, char **argv, int *once) {
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      top_usage(stdout);
      return EBB_EXIT_OK;
    } else if (!strcmp(argv[i], "--server")) {
      if (i + 1 >= argc ||
          (strncmp(argv[i + 1], "http://", 7) && strncmp(argv[i + 1], "https://", 8))) {
        fprintf(stderr, "ebb top: --server needs a URL like http://127.0.0.1:8470%s%s\n",
                i + 1 < argc ? ", not " : "", i + 1 < argc ? argv[i + 1] : "");
        return EBB_EXIT_USAGE;
      }
      snprintf(t->url, sizeof t->url, "%s", argv[++i]);
      size_t n = strlen(t->url);
      while (n > 7 && t->url[n - 1] == '/')
        t->url[--n] = '\0';
      t->explicit_server = 1;
    } else if (!strcmp(argv[i], "--local")) {
      t->local_only = 1;
    } else if (!strcmp(argv[i], "--once")) {
      *once = 1;
    } else {
      fprintf(stderr, "ebb top: unknown option '%s'\n", argv[i]);
      top_usage(stderr);
      return EBB_EXIT_USAGE;
    }
  }
  if (t->local_only && t->explicit_server) {
    fprintf(stderr, "ebb top: --local and --server exclude each other\n");
    return EBB_EXIT_USAGE;
  }
  return -1;
}

/* --once: one frame as text, after the first sample of every device the
 * server announced (bounded), or once the server is known unreachable. */
static void top_once(top *t, frame_buf *fb, int started) {
  for (int i = 0; i < 30 && started; i++) {
    pthread_mutex_lock(&t->mu);
    int ready = (t->connected && json_object_size(t->devices) > 0 &&
                 json_object_size(t->devices) >= json_array_size(t->info)) ||
                t->why[0];
    pthread_mutex_unlock(&t->mu);
    if (ready)
      break;
    usleep(100 * 1000);
  }
  const char *c = getenv("COLUMNS");
  frame(t, fb, c && atoi(c) > 0 ? atoi(c) : 100);
  for (int i = 0; i < fb->n; i++)
    printf("%.*s\n", fit(fb->l[i].text, fb->cols), fb->l[i].text);
}

/* The curses loop until q. */
static void top_screen(top *t, frame_buf *fb) {
  setlocale(LC_ALL, "");
  initscr();
  cbreak();
  noecho();
  curs_set(0);
  keypad(stdscr, TRUE);
  if (has_colors()) {
    start_color();
    use_default_colors();
    init_pair(1, COLOR_RED, -1);
    init_pair(2, COLOR_GREEN, -1);
  }
  timeout(500);
  for (;;) {
    int rows, cols;
    getmaxyx(stdscr, rows, cols);
    (void)rows;
    frame(t, fb, cols);
    draw(fb);
    int ch = getch();
    if (ch == 'q' || ch == 'Q')
      break;
  }
  endwin();
}

int cli_cmd_top(int argc, char **argv) {
  static top t; /* big (the event buffer); one per process */
  memset(&t, 0, sizeof t);
  snprintf(t.url, sizeof t.url, "http://127.0.0.1:8470");
  int once = 0, rc = top_args(&t, argc, argv, &once);
  if (rc >= 0)
    return rc;
  pthread_mutex_init(&t.mu, NULL);
  t.devices = json_object();
  t.pipelines = json_array();
  t.jobs = json_array();
  t.releases = json_array();
  t.leaks = json_array();
  t.info = json_array();
  pthread_t th;
  int started = 0;
  curl_global_init(CURL_GLOBAL_DEFAULT);
  if (!t.local_only)
    started = pthread_create(&th, NULL, reader, &t) == 0;
  static frame_buf fb;
  if (once)
    top_once(&t, &fb, started);
  else
    top_screen(&t, &fb);
  atomic_store(&t.quit, 1);
  if (started)
    pthread_join(th, NULL);
  curl_global_cleanup();
  json_decref(t.devices);
  json_decref(t.pipelines);
  json_decref(t.jobs);
  json_decref(t.releases);
  json_decref(t.leaks);
  json_decref(t.info);
  pthread_mutex_destroy(&t.mu);
  return EBB_EXIT_OK;
}
