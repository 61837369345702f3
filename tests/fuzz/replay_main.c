/* Replay driver for the fuzz harnesses when libFuzzer is not there (gcc, every
 * `make test` / `make asan` run):
 *
 *   fuzz_<target>_replay CORPUS_DIR [--dict FILE] [--iters N] [--seed S]
 *
 * runs every file of CORPUS_DIR through LLVMFuzzerTestOneInput, then N
 * (default 2000, env EBB_FUZZ_ITERS overrides) deterministic pseudo-random
 * mutations of them: bit flips, byte changes, inserts, deletes, duplicated
 * runs, splices of two corpus files, dictionary tokens (libFuzzer .dict
 * format) and interesting numbers. The same seed gives the same inputs.
 *
 * A crash, a sanitizer report or a harness's FUZZ_CHECK abort prints the
 * input as hex and writes it to $EBB_TEST_TMP/crash-<target>-<n> (else the
 * working directory); the process then dies, failing the test. To keep it,
 * copy that file to tests/fuzz/corpus/<target>/crash-<what>. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The sanitizers' runtimes call this before they exit on a report. */
extern void __sanitizer_set_death_callback(void (*cb)(void)) __attribute__((weak));

#define FUZZ_MAX_INPUT (64u * 1024u)

typedef struct buf {
  uint8_t *p;
  size_t n;
  char *name;
} buf;

static buf *corpus;
static size_t ncorpus;
static buf *dict;
static size_t ndict;

/* The input being run, for the crash handlers. */
static const uint8_t *cur_data;
static size_t cur_size;
static char cur_what[800];
static char crash_path[700];
static volatile sig_atomic_t reported;

/* --- crash reporting (async-signal-safe: write(2) only) ------------------- */
static void wr(int fd, const char *s, size_t n) {
  while (n) {
    ssize_t w = write(fd, s, n);
    if (w <= 0)
      return;
    s += w;
    n -= (size_t)w;
  }
}
static void wrs(int fd, const char *s) { wr(fd, s, strlen(s)); }

static void report_input(void) {
  if (reported || !cur_data)
    return;
  reported = 1;
  static const char hx[] = "0123456789abcdef";
  wrs(2, "\n==== fuzz: FAILING INPUT (");
  wrs(2, cur_what);
  wrs(2, "), hex:\n");
  char line[80];
  for (size_t i = 0; i < cur_size; i += 32) {
    size_t k = 0;
    for (size_t j = i; j < cur_size && j < i + 32; j++) {
      line[k++] = hx[cur_data[j] >> 4];
      line[k++] = hx[cur_data[j] & 15];
    }
    line[k++] = '\n';
    wr(2, line, k);
  }
  if (!cur_size)
    wrs(2, "(empty input)\n");
  int fd = open(crash_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) {
    wr(fd, (const char *)cur_data, cur_size);
    close(fd);
    wrs(2, "==== fuzz: input written to ");
    wrs(2, crash_path);
    wrs(2, "\n");
  } else {
    wrs(2, "==== fuzz: could not write the input to ");
    wrs(2, crash_path);
    wrs(2, "\n");
  }
}

static void on_signal(int sig) {
  report_input();
  signal(sig, SIG_DFL);
  raise(sig);
}

/* --- PRNG (xorshift64*) ----------------------------------------------------- */
static uint64_t rng_state;
static uint64_t rnd(void) {
  uint64_t x = rng_state;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  rng_state = x;
  return x * 0x2545F4914F6CDD1Dull;
}
static size_t below(size_t n) { return n ? (size_t)(rnd() % n) : 0; }

/* --- loading ------------------------------------------------------------------ */
static int read_all(const char *path, buf *out) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return -1;
  size_t cap = 4096, n = 0;
  uint8_t *p = malloc(cap);
  size_t got;
  while (p && (got = fread(p + n, 1, cap - n, f)) > 0) {
    n += got;
    if (n == cap) {
      uint8_t *q = realloc(p, cap *= 2);
      if (!q) {
        free(p);
        p = NULL;
      }
      p = q;
    }
  }
  fclose(f);
  if (!p)
    return -1;
  out->p = p;
  out->n = n;
  out->name = strdup(path);
  return 0;
}

static int cmp_buf(const void *a, const void *b) {
  return strcmp(((const buf *)a)->name, ((const buf *)b)->name);
}

static int load_corpus(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) {
    fprintf(stderr, "fuzz: cannot open corpus directory %s: %s\n", dir, strerror(errno));
    return -1;
  }
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.')
      continue;
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
      continue;
    buf b;
    if (read_all(path, &b) != 0) {
      fprintf(stderr, "fuzz: cannot read %s\n", path);
      closedir(d);
      return -1;
    }
    buf *v = realloc(corpus, (ncorpus + 1) * sizeof *v);
    if (!v)
      abort();
    corpus = v;
    corpus[ncorpus++] = b;
  }
  closedir(d);
  qsort(corpus, ncorpus, sizeof *corpus, cmp_buf); /* readdir order is not stable */
  return 0;
}

static int hexval(int c) {
  return c >= '0' && c <= '9'   ? c - '0'
         : c >= 'a' && c <= 'f' ? c - 'a' + 10
         : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                : -1;
}

/* libFuzzer dictionary: lines `name="value"` or `"value"`, escapes \\ \" \xNN. */
static int load_dict(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) {
    fprintf(stderr, "fuzz: cannot open dictionary %s: %s\n", path, strerror(errno));
    return -1;
  }
  char line[1024];
  while (fgets(line, sizeof line, f)) {
    char *q = strchr(line, '"');
    if (!q || line[0] == '#')
      continue;
    char *end = strrchr(line, '"');
    if (end == q)
      continue;
    uint8_t tok[512];
    size_t n = 0;
    for (char *p = q + 1; p < end && n < sizeof tok; p++) {
      if (*p == '\\' && p + 1 < end) {
        if (p[1] == 'x' && p + 3 < end && hexval(p[2]) >= 0 && hexval(p[3]) >= 0) {
          tok[n++] = (uint8_t)(hexval(p[2]) * 16 + hexval(p[3]));
          p += 3;
        } else {
          tok[n++] = (uint8_t)p[1];
          p++;
        }
      } else {
        tok[n++] = (uint8_t)*p;
      }
    }
    buf *v = realloc(dict, (ndict + 1) * sizeof *v);
    if (!v)
      abort();
    dict = v;
    dict[ndict].p = malloc(n ? n : 1);
    memcpy(dict[ndict].p, tok, n);
    dict[ndict].n = n;
    dict[ndict].name = NULL;
    ndict++;
  }
  fclose(f);
  return 0;
}

/* --- mutation ------------------------------------------------------------------- */
static const char *const numbers[] = {"0",
                                      "-1",
                                      "1",
                                      "-0",
                                      "0.5",
                                      "1e308",
                                      "-1e308",
                                      "1e-400",
                                      "1e400",
                                      "255",
                                      "256",
                                      "65535",
                                      "65536",
                                      "2147483647",
                                      "2147483648",
                                      "-2147483649",
                                      "4294967295",
                                      "4294967296",
                                      "9223372036854775807",
                                      "9223372036854775808",
                                      "18446744073709551615",
                                      "1.7976931348623157e308",
                                      "3.4e38",
                                      "NaN",
                                      "Infinity",
                                      "0x10",
                                      "1e19",
                                      "-9.3e18"};

static void insert(uint8_t *p, size_t *n, size_t at, const uint8_t *src, size_t k) {
  if (*n + k > FUZZ_MAX_INPUT)
    k = FUZZ_MAX_INPUT - *n;
  memmove(p + at + k, p + at, *n - at);
  memcpy(p + at, src, k);
  *n += k;
}

static void mutate_once(uint8_t *p, size_t *n) {
  size_t len = *n;
  switch (below(11)) {
  case 0: /* bit flip */
    if (len)
      p[below(len)] ^= (uint8_t)(1u << below(8));
    break;
  case 1: /* random byte */
    if (len)
      p[below(len)] = (uint8_t)rnd();
    break;
  case 2: { /* insert random bytes */
    uint8_t r[8];
    size_t k = 1 + below(sizeof r);
    for (size_t i = 0; i < k; i++)
      r[i] = (uint8_t)rnd();
    insert(p, n, below(len + 1), r, k);
    break;
  }
  case 3: { /* delete a range */
    if (!len)
      break;
    size_t at = below(len), k = 1 + below(len - at < 16 ? len - at : 16);
    memmove(p + at, p + at + k, len - at - k);
    *n -= k;
    break;
  }
  case 4: { /* duplicate a range */
    if (!len)
      break;
    size_t at = below(len), k = 1 + below(len - at < 64 ? len - at : 64);
    uint8_t tmp[64];
    memcpy(tmp, p + at, k);
    insert(p, n, below(len + 1), tmp, k);
    break;
  }
  case 5: { /* splice: a piece of another corpus file */
    if (!ncorpus)
      break;
    const buf *o = &corpus[below(ncorpus)];
    if (!o->n)
      break;
    size_t at = below(o->n), k = 1 + below(o->n - at < 256 ? o->n - at : 256);
    insert(p, n, below(len + 1), o->p + at, k);
    break;
  }
  case 6: /* truncate */
    if (len)
      *n = below(len);
    break;
  case 7:
  case 8: { /* dictionary token, inserted or overwriting */
    if (!ndict)
      break;
    const buf *t = &dict[below(ndict)];
    if ((rnd() & 1) && len >= t->n) {
      memcpy(p + below(len - t->n + 1), t->p, t->n);
    } else {
      insert(p, n, below(len + 1), t->p, t->n);
    }
    break;
  }
  case 9: { /* interesting number */
    const char *s = numbers[below(sizeof numbers / sizeof *numbers)];
    insert(p, n, below(len + 1), (const uint8_t *)s, strlen(s));
    break;
  }
  case 10: { /* interesting binary value (little-endian u16/u32/u64) */
    static const uint64_t v[] = {0,
                                 1,
                                 2,
                                 0x7f,
                                 0x80,
                                 0xff,
                                 0x100,
                                 0x7fff,
                                 0xffff,
                                 0x10000,
                                 0x7fffffff,
                                 0x80000000u,
                                 0xffffffffu,
                                 0x100000000ull,
                                 0x7fffffffffffffffull,
                                 0xffffffffffffffffull,
                                 44100,
                                 16000};
    uint64_t x = v[below(sizeof v / sizeof *v)];
    size_t w = (size_t)1 << (1 + below(3));
    if (len >= w) {
      size_t at = below(len - w + 1);
      for (size_t i = 0; i < w; i++)
        p[at + i] = (uint8_t)(x >> (8 * i));
    }
    break;
  }
  }
}

static void run_one(const uint8_t *data, size_t size, const char *what) {
  /* a copy of exactly size bytes, so ASan sees reads past the end */
  uint8_t *copy = malloc(size ? size : 1);
  if (!copy)
    abort();
  if (size)
    memcpy(copy, data, size);
  cur_data = copy;
  cur_size = size;
  snprintf(cur_what, sizeof cur_what, "%s", what);
  LLVMFuzzerTestOneInput(copy, size);
  cur_data = NULL;
  free(copy);
}

int main(int argc, char **argv) {
  const char *dir = NULL, *dictpath = NULL;
  long iters = 2000;
  uint64_t seed = 1;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--dict") && i + 1 < argc)
      dictpath = argv[++i];
    else if (!strcmp(argv[i], "--iters") && i + 1 < argc)
      iters = strtol(argv[++i], NULL, 10);
    else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
      seed = strtoull(argv[++i], NULL, 10);
    else if (!dir && argv[i][0] != '-')
      dir = argv[i];
    else {
      fprintf(stderr, "usage: %s CORPUS_DIR [--dict FILE] [--iters N] [--seed S]\n", argv[0]);
      return 2;
    }
  }
  if (!dir) {
    fprintf(stderr, "usage: %s CORPUS_DIR [--dict FILE] [--iters N] [--seed S]\n", argv[0]);
    return 2;
  }
  const char *env = getenv("EBB_FUZZ_ITERS");
  if (env && *env)
    iters = strtol(env, NULL, 10);
  env = getenv("EBB_FUZZ_SEED");
  if (env && *env)
    seed = strtoull(env, NULL, 10);
  rng_state = seed * 0x9E3779B97F4A7C15ull + 1;

  const char *self = strrchr(argv[0], '/');
  self = self ? self + 1 : argv[0];
  const char *tmp = getenv("EBB_TEST_TMP");
  if (tmp && *tmp)
    mkdir(tmp, 0755);
  snprintf(crash_path, sizeof crash_path, "%s/crash-%s-%ld", tmp && *tmp ? tmp : ".", self,
           (long)getpid());

  if (__sanitizer_set_death_callback)
    __sanitizer_set_death_callback(report_input);
  signal(SIGSEGV, on_signal);
  signal(SIGBUS, on_signal);
  signal(SIGABRT, on_signal);
  signal(SIGFPE, on_signal);
  signal(SIGILL, on_signal);

  if (load_corpus(dir) != 0 || (dictpath && load_dict(dictpath) != 0))
    return 2;
  if (!ncorpus) {
    fprintf(stderr, "fuzz: corpus %s is empty: nothing to start from\n", dir);
    return 2;
  }
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (size_t i = 0; i < ncorpus; i++)
    run_one(corpus[i].p, corpus[i].n, corpus[i].name);
  printf("fuzz: %s: %zu corpus inputs passed\n", self, ncorpus);

  uint8_t *work = malloc(FUZZ_MAX_INPUT);
  if (!work)
    abort();
  for (long it = 0; it < iters; it++) {
    const buf *b = &corpus[below(ncorpus)];
    size_t n = b->n < FUZZ_MAX_INPUT ? b->n : FUZZ_MAX_INPUT;
    memcpy(work, b->p, n);
    int k = 1 + (int)below(4);
    for (int m = 0; m < k; m++)
      mutate_once(work, &n);
    char what[800];
    snprintf(what, sizeof what, "mutation %ld of %s, seed %llu", it, b->name,
             (unsigned long long)seed);
    run_one(work, n, what);
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  printf("fuzz: %s: %ld mutated inputs passed (seed %llu, %.2f s)\n", self, iters,
         (unsigned long long)seed,
         (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9);
  free(work);
  for (size_t i = 0; i < ncorpus; i++) {
    free(corpus[i].p);
    free(corpus[i].name);
  }
  free(corpus);
  for (size_t i = 0; i < ndict; i++)
    free(dict[i].p);
  free(dict);
  return 0;
}
