/* The Python line that is allocating, read from C: the site of a block
 * ebb_torch_alloc takes, with no callback into Python.
 *
 * PyTorch calls its pluggable allocator on the thread that runs the op, with
 * the GIL released (its bindings drop it around every op). That thread's
 * own frame stack cannot change under us: only the thread itself pushes and
 * pops its frames, and it is inside this call. So the allocation reads its
 * own thread's frames as faulthandler and the sampling profilers do: the
 * thread state (PyGILState_GetThisThreadState, a thread-local, no GIL
 * needed), its innermost interpreter frame, and per frame the code object's
 * file name, the instruction offset and PyCode_Addr2Line (a pure read of
 * the immutable line table). Nothing here allocates a Python object, takes
 * a reference or the GIL.
 *
 * Those frames are CPython's internal structs: their layout is known here
 * for CPython 3.11 only (the offsets below, taken from its headers), and
 * ebb.torch checks the answer against Python's own caller_site() before it
 * turns this on; any other interpreter keeps the Python callback.
 *
 * The innermost frame outside the frameworks is the site: a frame whose file
 * lies under one of the "skip" directories (the torch and ebb packages'
 * own, given by ebb.torch) is theirs. A per-thread table remembers, for a
 * code object and instruction, the interned "file.py:line" (or that the
 * code is a framework's), so a loop allocating on one line costs a few
 * loads. A code object freed and another made at the same address with the
 * same file name object could be given a stale line of that same file. */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/lib_int.h"

typedef struct pylayout {
  unsigned version; /* major << 8 | minor */
  size_t ts_cframe, cf_frame;
  size_t fr_code, fr_previous, fr_instr, fr_owner;
  size_t co_filename, co_firsttraceable, co_code;
  size_t str_state, str_length, ascii_size, compact_size, compact_utf8;
} pylayout;

/* CPython 3.11 on 64-bit Linux: PyThreadState.cframe, _PyCFrame.current_frame,
 * _PyInterpreterFrame.{f_code,previous,prev_instr,owner}, PyCodeObject
 * .{co_filename,_co_firsttraceable,co_code_adaptive}, PyASCIIObject.state,
 * .length, sizeof PyASCIIObject, sizeof PyCompactUnicodeObject, its .utf8 */
static const pylayout layouts[] = {
    {0x030b, 56, 8, 32, 48, 56, 69, 112, 168, 184, 32, 16, 48, 72, 56},
};
#define FRAME_OWNED_BY_GENERATOR 1
#define DEPTH_MAX 512
#define SKIP_MAX 8

typedef void *(*tstate_fn)(void);
typedef int (*addr2line_fn)(void *code, int byte_offset);

static struct {
  const pylayout *L;
  tstate_fn tstate;
  addr2line_fn addr2line;
  char *skip[SKIP_MAX];
  size_t skip_len[SKIP_MAX];
  int nskip;
} P;
static _Atomic int p_on;
static char *p_skip_text; /* what P.skip points into */

static const char SKIPPED[] = "(framework)";

/* --- configuration -------------------------------------------------------------- */
static int set_skip(const char *text) {
  free(p_skip_text);
  p_skip_text = NULL;
  P.nskip = 0;
  if (!text || !*text)
    return 0;
  if (!(p_skip_text = strdup(text)))
    return ebb_seterr(EBB_ENOMEM, "ebb_torch_python_sites: no host memory");
  for (char *save = NULL, *d = strtok_r(p_skip_text, "\n", &save); d;
       d = strtok_r(NULL, "\n", &save)) {
    if (P.nskip == SKIP_MAX)
      return ebb_seterr(EBB_EINVAL, "ebb_torch_python_sites: more than %d skip directories",
                        SKIP_MAX);
    P.skip[P.nskip] = d;
    P.skip_len[P.nskip++] = strlen(d);
  }
  return 0;
}

int ebb_torch_python_sites(const ebb_python_sites *cfg) {
  atomic_store(&p_on, 0);
  if (!cfg)
    return 0;
  if (cfg->size < sizeof *cfg)
    return ebb_seterr(EBB_EINVAL, "ebb_torch_python_sites: cfg->size is %u, want %zu", cfg->size,
                      sizeof *cfg);
  if (!cfg->this_thread_state || !cfg->addr2line)
    return ebb_seterr(EBB_EINVAL, "ebb_torch_python_sites: this_thread_state and addr2line "
                                  "are required (PyGILState_GetThisThreadState, "
                                  "PyCode_Addr2Line)");
  unsigned v = (cfg->hexversion >> 16) & 0xffff;
  const pylayout *L = NULL;
  for (size_t i = 0; i < sizeof layouts / sizeof *layouts; i++)
    if (layouts[i].version == v)
      L = &layouts[i];
  if (!L || sizeof(void *) != 8)
    return ebb_seterr(EBB_EUNSUPPORTED,
                      "ebb_torch_python_sites: the frames of CPython %u.%u are not known "
                      "here (3.11 on 64-bit only)",
                      v >> 8, v & 0xff);
  int rc = set_skip(cfg->skip);
  if (rc)
    return rc;
  P.L = L;
  P.tstate = (tstate_fn)cfg->this_thread_state;
  P.addr2line = (addr2line_fn)cfg->addr2line;
  atomic_store(&p_on, 1);
  return 0;
}

/* --- reading one frame ------------------------------------------------------------- */
#define AT(p, off, type) (*(type *)((const char *)(p) + (off)))

/* UTF-8 of one code point into out (room for 4). */
static size_t put_utf8(uint32_t c, char *out) {
  if (c < 0x80)
    return out[0] = (char)c, 1;
  if (c < 0x800)
    return out[0] = (char)(0xc0 | c >> 6), out[1] = (char)(0x80 | (c & 0x3f)), 2;
  if (c < 0x10000) {
    out[0] = (char)(0xe0 | c >> 12);
    out[1] = (char)(0x80 | ((c >> 6) & 0x3f));
    out[2] = (char)(0x80 | (c & 0x3f));
    return 3;
  }
  out[0] = (char)(0xf0 | c >> 18);
  out[1] = (char)(0x80 | ((c >> 12) & 0x3f));
  out[2] = (char)(0x80 | ((c >> 6) & 0x3f));
  out[3] = (char)(0x80 | (c & 0x3f));
  return 4;
}

/* The text of a str object (a compact one: every code object's file name
 * is) into buf, NUL-terminated; 0 when it cannot be read. */
static int str_text(const void *s, char *buf, size_t cap) {
  const pylayout *L = P.L;
  uint32_t state = AT(s, L->str_state, uint32_t);
  unsigned kind = (state >> 2) & 7, compact = (state >> 5) & 1, ascii = (state >> 6) & 1;
  int64_t n = AT(s, L->str_length, int64_t);
  if (!compact || n < 0)
    return 0;
  const char *data = (const char *)s + (ascii ? L->ascii_size : L->compact_size);
  size_t o = 0;
  for (int64_t i = 0; i < n; i++) {
    uint32_t c = kind == 1   ? ((const uint8_t *)data)[i]
                 : kind == 2 ? ((const uint16_t *)data)[i]
                 : kind == 4 ? ((const uint32_t *)data)[i]
                             : 0xFFFFFFFFu;
    if (c == 0xFFFFFFFFu || o + 5 > cap)
      return 0;
    o += put_utf8(c, buf + o);
  }
  buf[o] = 0;
  return 1;
}

static int is_framework(const char *file) {
  if (!strncmp(file, "<frozen", 7))
    return 1;
  for (int i = 0; i < P.nskip; i++)
    if (!strncmp(file, P.skip[i], P.skip_len[i]))
      return 1;
  return 0;
}

/* --- the per-thread table ------------------------------------------------------------ */
/* Entries per thread (32 bytes each): a model's forward walks through a
 * few dozen framework code objects (nn.Module's call path, each layer's
 * forward, torch.nn.functional); at 64 they evicted each other and every
 * allocation re-read file names (bench/torch_alloc, crepe_like). */
#define CACHE 512
typedef struct centry {
  const void *code, *file;
  long lasti; /* -1: the code is a framework's, whatever the instruction */
  const char *site;
} centry;
static __thread centry t_cache[CACHE];

static centry *slot(const void *code, long lasti) {
  uint64_t h = ((uint64_t)(uintptr_t)code >> 4) * 0x9e3779b97f4a7c15ull + (uint64_t)lasti;
  h *= 0xff51afd7ed558ccdull;
  return &t_cache[(h >> 40) & (CACHE - 1)];
}

/* The site of one frame: interned "file:line", SKIPPED, or NULL. */
static const char *frame_site(const void *code, long lasti) {
  const void *file = AT(code, P.L->co_filename, const void *);
  centry *fw = slot(code, -1);
  if (fw->code == code && fw->file == file && fw->lasti == -1)
    return SKIPPED;
  centry *e = slot(code, lasti);
  if (e->code == code && e->file == file && e->lasti == lasti)
    return e->site;
  char text[480], site[512];
  if (!file || !str_text(file, text, sizeof text))
    return NULL;
  if (is_framework(text)) {
    *fw = (centry){code, file, -1, SKIPPED};
    return SKIPPED;
  }
  int line = P.addr2line((void *)code, (int)(lasti * 2));
  snprintf(site, sizeof site, "%s:%d", text, line);
  const char *s = lib_intern(site);
  *e = (centry){code, file, lasti, s};
  return s;
}

const char *lib_pysite(void) {
  if (!atomic_load_explicit(&p_on, memory_order_relaxed))
    return NULL;
  const pylayout *L = P.L;
  const char *ts = P.tstate();
  if (!ts)
    return NULL; /* a thread that never ran Python (autograd's engine) */
  const char *cf = AT(ts, L->ts_cframe, const char *);
  const char *f = cf ? AT(cf, L->cf_frame, const char *) : NULL;
  for (int depth = 0; f && depth < DEPTH_MAX; depth++, f = AT(f, L->fr_previous, const char *)) {
    const char *code = AT(f, L->fr_code, const char *);
    const uint16_t *start = (const uint16_t *)(code + L->co_code);
    const uint16_t *instr = AT(f, L->fr_instr, const uint16_t *);
    /* a frame still setting up has no line yet (_PyFrame_IsIncomplete) */
    if (AT(f, L->fr_owner, char) != FRAME_OWNED_BY_GENERATOR &&
        instr < start + AT(code, L->co_firsttraceable, int))
      continue;
    const char *s = frame_site(code, (long)(instr - start));
    if (s != SKIPPED)
      return s;
  }
  return NULL;
}

int ebb_torch_site(char *buf, size_t cap) {
  if (!buf || !cap)
    return ebb_seterr(EBB_EINVAL, "ebb_torch_site: no buffer");
  const char *s = lib_pysite();
  snprintf(buf, cap, "%s", s ? s : "torch");
  return 0;
}
