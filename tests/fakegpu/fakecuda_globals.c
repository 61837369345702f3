/* Device variables (__device__, __constant__) of binary images:
 * cuModuleGetGlobal_v2 and cuLibraryGetGlobal. The math libraries (cuBLAS's
 * deviceConstants, ...) ask for theirs while they initialise and give up
 * without them; cudaMemcpyToSymbol / cudaGetSymbolAddress end here too.
 *
 * The variables are read from the image's ELF cubin as a driver reads them:
 * the object symbols of its .nv.global* and .nv.constant* sections (bank 0,
 * the kernels' parameters, has none), each with its size and, where the
 * section has contents, its initial bytes. A fatbin's cubins may be
 * compressed: Zstandard (flag 0x8000) and LZ4 (0x2000) are undone with the
 * system's libzstd.so.1 / liblz4.so.1, loaded when first needed (without
 * them such an image has no variables: 500). The cubin for the fake's
 * compute capability (9.0) is preferred, else the newest one below it. An
 * image with PTX only (some of cuFFT's) declares its variables in the text:
 * the module-scope .global and .const ones, with their initializers.
 *
 * On first use in a context a module lays out all its variables in one
 * device allocation of that context (256-byte aligned, initial bytes copied,
 * the rest zero), counted in fakegpu-smi like any allocation as a driver
 * counts a module's memory; it goes with the module (unload, library unload,
 * context teardown) and cuMemFree does not take it. */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "fakecuda.h"

#define FK_GLOBAL_ALIGN 256
#define FK_IMAGE_MAX ((size_t)512 << 20)
#define FK_SM_ARCH 90 /* compute capability 9.0 */

typedef struct fk_var {
  char *name;
  size_t off, size;
} fk_var;

struct fk_globals {
  fk_alloc *mem; /* NULL when the module has no variables */
  fk_var *vars;
  size_t nvars;
};

static const unsigned char k_fatbin[4] = {0x50, 0xed, 0x55, 0xba};
static const unsigned char k_wrapper[4] = {0xb1, 0x43, 0x62, 0x46};
static const unsigned char k_elf64le[6] = {0x7f, 'E', 'L', 'F', 2, 1};


/* --- decompression through the system's libraries ------------------------- */
typedef size_t (*zstd_decompress_fn)(void *, size_t, const void *, size_t);
typedef unsigned (*zstd_is_error_fn)(size_t);
typedef int (*lz4_decompress_fn)(const char *, char *, int, int);

static void *sym_from(const char *lib, const char *name) {
  void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  return h ? dlsym(h, name) : NULL;
}

/* The uncompressed cubin of a compressed entry (malloc'd), NULL if it cannot
 * be had. */
static unsigned char *inflate_entry(const unsigned char *src, size_t n, size_t out_n,
                                    uint64_t flags) {
  if (out_n == 0 || out_n > FK_IMAGE_MAX)
    return NULL;
  unsigned char *out = malloc(out_n);
  if (!out)
    return NULL;
  int ok = 0;
  if (flags & 0x8000u) {
    void *d = sym_from("libzstd.so.1", "ZSTD_decompress");
    void *e = sym_from("libzstd.so.1", "ZSTD_isError");
    zstd_decompress_fn dec;
    zstd_is_error_fn is_err;
    memcpy(&dec, &d, sizeof dec);
    memcpy(&is_err, &e, sizeof is_err);
    if (dec && is_err) {
      size_t got = dec(out, out_n, src, n);
      ok = !is_err(got) && got == out_n;
    }
  } else {
    void *d = sym_from("liblz4.so.1", "LZ4_decompress_safe");
    lz4_decompress_fn dec;
    memcpy(&dec, &d, sizeof dec);
    if (dec && n <= 0x7fffffff && out_n <= 0x7fffffff)
      ok = dec((const char *)src, (char *)out, (int)n, (int)out_n) == (int)out_n;
  }
  if (!ok) {
    free(out);
    return NULL;
  }
  return out;
}

/* --- the cubin to read ------------------------------------------------------ */
/* The ELF cubin of image (a cubin, a fatbin or its wrapper) for the fake's
 * architecture: *elf, its size, and *owned when it was decompressed. */
static int pick_entry(const void *image, unsigned kind, const unsigned char **elf, size_t *elf_n,
                      unsigned char **owned);
static int pick_cubin(const void *image, const unsigned char **elf, size_t *elf_n,
                      unsigned char **owned) {
  return pick_entry(image, 2, elf, elf_n, owned);
}

/* The entry of image of kind (2: ELF cubin, 1: PTX text) for the fake's
 * architecture, else the newest one below it; see pick_cubin. */
static int pick_entry(const void *image, unsigned kind, const unsigned char **elf, size_t *elf_n,
                      unsigned char **owned) {
  const unsigned char *p = image;
  *owned = NULL;
  if (!memcmp(p, k_wrapper, 4)) {
    const void *data;
    memcpy(&data, p + 8, sizeof data);
    p = data;
    if (!p)
      return 0;
  }
  if (!memcmp(p, k_elf64le, 6)) {
    if (kind != 2)
      return 0;
    *elf = p;
    *elf_n = (size_t)(fk_rd64(p + 0x28) + (uint64_t)fk_rd16(p + 0x3a) * fk_rd16(p + 0x3c));
    return 1;
  }
  if (memcmp(p, k_fatbin, 4))
    return 0;
  size_t hsize = fk_rd16(p + 6), end = hsize + (size_t)fk_rd64(p + 8);
  const unsigned char *best = NULL;
  uint32_t best_arch = 0;
  /* Entry: kind 2 is an ELF cubin; header size at 4, payload size at 8,
   * compressed size (32 bits) at 16, architecture at 28, flags at 40, uncompressed
   * size at 56. */
  for (size_t off = hsize; off + 64 <= end;) {
    const unsigned char *e = p + off;
    uint32_t ehsize = fk_rd32(e + 4), arch = fk_rd32(e + 28);
    uint64_t payload = fk_rd64(e + 8);
    if (ehsize < 64 || payload > end - off - ehsize)
      break;
    if (fk_rd16(e) == kind && arch <= FK_SM_ARCH && (!best || arch > best_arch)) {
      best = e;
      best_arch = arch;
    }
    off += ehsize + payload;
  }
  if (!best)
    return 0;
  const unsigned char *data = best + fk_rd32(best + 4);
  uint64_t payload = fk_rd64(best + 8), flags = fk_rd64(best + 40);
  if (flags & (0x2000u | 0x8000u)) {
    /* The compressed size is 32 bits (PTX entries keep other bits above it). */
    uint64_t csize = fk_rd32(best + 16);
    *owned =
        inflate_entry(data, csize && csize <= payload ? csize : payload, fk_rd64(best + 56), flags);
    if (!*owned)
      return 0;
    *elf = *owned;
    *elf_n = fk_rd64(best + 56);
  } else {
    *elf = data;
    *elf_n = payload;
  }
  return kind != 2 || (*elf_n >= 64 && !memcmp(*elf, k_elf64le, 6));
}

int fk_image_entry(const void *image, unsigned kind, const unsigned char **elf, size_t *elf_n,
                   unsigned char **owned) {
  return pick_entry(image, kind, elf, elf_n, owned);
}

/* --- the variables of a cubin ---------------------------------------------- */
static int var_section(const char *name) {
  return !strncmp(name, ".nv.global", 10) ||
         (!strncmp(name, ".nv.constant", 12) && strncmp(name, ".nv.constant0", 13));
}

static void free_globals(struct fk_globals *g) {
  for (size_t i = 0; i < g->nvars; i++)
    free(g->vars[i].name);
  free(g->vars);
  free(g);
}

/* --- the symbols of an ELF64 image --------------------------------------------- */
/* One symbol: its table entry, its name (NUL-terminated inside its string
 * table), its section's header and that section's name (NULL when the
 * image has no usable section-name table and none was required). */
typedef struct elf_sym {
  const unsigned char *st, *sec;
  const char *name, *sec_name;
  uint16_t shndx;
} elf_sym;

/* Calls fn(sym, arg) for each symbol of every SHT_SYMTAB of elf (n bytes)
 * whose name and section lie inside the image; with need_shstr, an image
 * without a valid section-name table is malformed. Answers -1 when the
 * headers are malformed, 0 when fn answered 0 (it stops there), else 1. */
static int each_symbol(const unsigned char *elf, size_t n, int need_shstr,
                       int (*fn)(const elf_sym *, void *), void *arg) {
  uint64_t shoff = fk_rd64(elf + 0x28);
  uint16_t shentsize = fk_rd16(elf + 0x3a), shnum = fk_rd16(elf + 0x3c),
           shstrndx = fk_rd16(elf + 0x3e);
  if (shentsize < 64 || shoff > n || (uint64_t)shentsize * shnum > n - shoff)
    return -1;
#define SH(i) (elf + shoff + (size_t)(i)*shentsize)
  uint64_t shstr_off = 0, shstr_n = 0;
  int shstr_ok = shstrndx < shnum;
  if (shstr_ok) {
    shstr_off = fk_rd64(SH(shstrndx) + 24), shstr_n = fk_rd64(SH(shstrndx) + 32);
    shstr_ok = shstr_off <= n && shstr_n <= n - shstr_off;
  }
  if (!shstr_ok)
    shstr_n = 0; /* no section has a name */
  if (need_shstr && !shstr_ok)
    return -1;
  for (unsigned s = 0; s < shnum; s++) {
    const unsigned char *sym = SH(s);
    if (fk_rd32(sym + 4) != 2) /* SHT_SYMTAB */
      continue;
    uint64_t off = fk_rd64(sym + 24), size = fk_rd64(sym + 32);
    uint32_t link = fk_rd32(sym + 40);
    if (off > n || size > n - off || link >= shnum)
      continue;
    const unsigned char *strh = SH(link);
    uint64_t str_off = fk_rd64(strh + 24), str_n = fk_rd64(strh + 32);
    if (str_off > n || str_n > n - str_off)
      continue;
    for (uint64_t i = 24; i + 24 <= size; i += 24) {
      elf_sym e = {.st = elf + off + i, .shndx = fk_rd16(elf + off + i + 6)};
      uint32_t name = fk_rd32(e.st);
      if (e.shndx >= shnum || name >= str_n)
        continue;
      e.name = (const char *)elf + str_off + name;
      if (!memchr(e.name, 0, str_n - name))
        continue;
      e.sec = SH(e.shndx);
      uint32_t sec_name = fk_rd32(e.sec);
      if (sec_name < shstr_n && memchr(elf + shstr_off + sec_name, 0, shstr_n - sec_name))
        e.sec_name = (const char *)elf + shstr_off + sec_name;
      if (!fn(&e, arg))
        return 0;
    }
  }
#undef SH
  return 1;
}

/* --- the variables of a cubin ------------------------------------------------ */
typedef struct var_walk {
  const unsigned char *elf;
  size_t n;
  struct fk_globals *g;
  unsigned char *dst;
  size_t k;
} var_walk;

/* A `__device__`/`__constant__` variable (STT_OBJECT in a variable section):
 * listed and laid out (first pass), or its initial bytes copied (second). */
static int on_var(const elf_sym *e, void *arg) {
  var_walk *w = arg;
  struct fk_globals *g = w->g;
  uint64_t value = fk_rd64(e->st + 8), vsize = fk_rd64(e->st + 16);
  if ((e->st[4] & 0xf) != 1 || vsize == 0 || !e->sec_name || !var_section(e->sec_name))
    return 1; /* STT_OBJECT only */
  if (!w->dst) {
    fk_var *v = realloc(g->vars, (g->nvars + 1) * sizeof *v);
    if (!v)
      return 0;
    g->vars = v;
    size_t at = 0;
    if (g->nvars)
      at = (v[g->nvars - 1].off + v[g->nvars - 1].size + FK_GLOBAL_ALIGN - 1) / FK_GLOBAL_ALIGN *
           FK_GLOBAL_ALIGN;
    v[g->nvars] = (fk_var){strdup(e->name), at, (size_t)vsize};
    if (!v[g->nvars].name)
      return 0;
    g->nvars++;
  } else if (w->k < g->nvars) {
    /* SHT_PROGBITS: initial bytes at the symbol's place in the section. */
    uint64_t soff = fk_rd64(e->sec + 24), ssize = fk_rd64(e->sec + 32),
             saddr = fk_rd64(e->sec + 16);
    uint64_t at = value - saddr;
    if (fk_rd32(e->sec + 4) == 1 && value >= saddr && at <= ssize && vsize <= ssize - at &&
        soff <= w->n && ssize <= w->n - soff)
      memcpy(w->dst + g->vars[w->k].off, w->elf + soff + at, (size_t)vsize);
    w->k++;
  }
  return 1;
}

/* Two passes over the variables of elf: with dst NULL, lists them in g and
 * lays them out; then copies each one's initial bytes into dst (the
 * module's memory, zeroed). 0 when the ELF is malformed or memory ran out. */
static int walk_vars(const unsigned char *elf, size_t n, struct fk_globals *g, unsigned char *dst) {
  var_walk w = {elf, n, g, dst, 0};
  return each_symbol(elf, n, 1, on_var, &w) == 1;
}

/* --- the kernels of a cubin ------------------------------------------------- */
typedef struct kernel_walk {
  int (*fn)(const char *, void *);
  void *arg;
} kernel_walk;

/* STT_FUNC, STB_GLOBAL, defined, named */
static int on_kernel(const elf_sym *e, void *arg) {
  kernel_walk *w = arg;
  if ((e->st[4] & 0xf) != 2 || (e->st[4] >> 4) != 1 || e->shndx == 0 || !*e->name)
    return 1;
  return w->fn(e->name, w->arg);
}

/* Calls fn(name, arg) for each kernel of elf: a global function symbol in its
 * own .text.<name> section, as nvcc and nvJitLink lay kernels out. Stops and
 * answers 0 when fn does; -1 when the ELF is malformed. */
static int walk_kernels(const unsigned char *elf, size_t n, int (*fn)(const char *, void *),
                        void *arg) {
  kernel_walk w = {fn, arg};
  return each_symbol(elf, n, 0, on_kernel, &w);
}

/* The kernels of PTX text: the name after each ".entry". */
static int walk_ptx_kernels(const unsigned char *ptx, size_t n, int (*fn)(const char *, void *),
                            void *arg) {
  for (size_t i = 0; i + 7 < n; i++) {
    if (memcmp(ptx + i, ".entry", 6) || (ptx[i + 6] != ' ' && ptx[i + 6] != '\t'))
      continue;
    size_t a = i + 6;
    while (a < n && (ptx[a] == ' ' || ptx[a] == '\t'))
      a++;
    size_t b = a;
    while (b < n && !strchr(" \t\r\n(", ptx[b]) && ptx[b])
      b++;
    if (b == a)
      continue;
    char *name = strndup((const char *)ptx + a, b - a);
    if (!name)
      return -1;
    int go = fn(name, arg);
    free(name);
    if (!go)
      return 0;
    i = b;
  }
  return 1;
}

int fk_image_kernels(const void *image, int (*fn)(const char *name, void *arg), void *arg) {
  const unsigned char *elf;
  size_t elf_n;
  unsigned char *owned = NULL;
  if (!image)
    return -1;
  int rc;
  if (pick_cubin(image, &elf, &elf_n, &owned))
    rc = walk_kernels(elf, elf_n, fn, arg);
  else if (free(owned), owned = NULL, pick_entry(image, 1, &elf, &elf_n, &owned))
    rc = walk_ptx_kernels(elf, elf_n, fn, arg); /* PTX only: the driver compiles it */
  else
    rc = -1;
  free(owned);
  return rc;
}

/* --- the variables of PTX text ------------------------------------------------ */
/* A module-scope ".global" or ".const" declaration:
 *   [.visible] .global [.align N] [.vN] .TYPE NAME[DIM]...[ = INIT];
 * TYPE is b/s/u/f with 8..64 bits; INIT a value or {values} (integers,
 * decimal floats, 0fXXXXXXXX / 0dXXXXXXXXXXXXXXXX bit patterns). An empty
 * dimension takes the initializer's count. 0 when the statement is none. */
typedef struct ptx_var {
  char name[256];
  size_t elem, count;
  int is_float;
  const char *init; /* after '=', up to the ';' */
} ptx_var;

static size_t init_count(const char *p, const char *end) {
  size_t n = 1;
  for (; p < end; p++)
    n += *p == ',';
  return n;
}

static int parse_ptx_var(const char *p, const char *end, ptx_var *v) {
  memset(v, 0, sizeof *v);
  size_t vec = 1;
  const char *q = p;
  while (q < end) {
    while (q < end && (*q == ' ' || *q == '\t' || *q == '\n' || *q == '\r'))
      q++;
    const char *t = q;
    while (q < end && !strchr(" \t\r\n[=;", *q))
      q++;
    size_t len = (size_t)(q - t);
    if (!len)
      return 0;
    if (*t != '.') { /* the name */
      if (len >= sizeof v->name || !v->elem)
        return 0;
      memcpy(v->name, t, len);
      break;
    }
    if (len == 6 && !memcmp(t, ".align", 6)) {
      while (q < end && (*q == ' ' || *q == '\t'))
        q++;
      while (q < end && *q >= '0' && *q <= '9')
        q++;
    } else if (len == 3 && t[1] == 'v' && (t[2] == '2' || t[2] == '4')) {
      vec = (size_t)(t[2] - '0');
    } else if (len >= 3 && strchr("bsuf", t[1]) && !v->elem) {
      int bits = atoi(t + 2);
      if (bits != 8 && bits != 16 && bits != 32 && bits != 64)
        return 0;
      v->elem = (size_t)bits / 8;
      v->is_float = t[1] == 'f';
    } else if (!(len == 7 && !memcmp(t, ".global", 7)) && !(len == 6 && !memcmp(t, ".const", 6)) &&
               !(len == 8 && !memcmp(t, ".visible", 8)) && !(len == 5 && !memcmp(t, ".weak", 5))) {
      return 0; /* .extern, .shared, a state space inside an instruction... */
    }
  }
  if (!v->name[0])
    return 0;
  const char *eq = memchr(q, '=', (size_t)(end - q));
  const char *dims_end = eq ? eq : end;
  v->count = vec;
  int open_dim = 0;
  for (const char *d = q; d < dims_end; d++)
    if (*d == '[') {
      char *stop;
      unsigned long long k = strtoull(d + 1, &stop, 10);
      if (stop == d + 1)
        open_dim = 1;
      else if (k == 0 || v->count > SIZE_MAX / k)
        return 0;
      else
        v->count *= (size_t)k;
    }
  if (eq)
    v->init = eq + 1;
  if (open_dim)
    v->count = eq ? init_count(eq + 1, end) : 0;
  return v->count && v->elem && v->count <= FK_IMAGE_MAX / v->elem;
}

static void put_value(unsigned char *dst, const ptx_var *v, const char *tok) {
  uint64_t bits = 0;
  while (*tok == ' ' || *tok == '\t' || *tok == '\n' || *tok == '{')
    tok++;
  if (tok[0] == '0' && (tok[1] == 'f' || tok[1] == 'd' || tok[1] == 'F' || tok[1] == 'D')) {
    bits = strtoull(tok + 2, NULL, 16);
  } else if (v->is_float) {
    double d = strtod(tok, NULL);
    if (v->elem == 4) {
      float f = (float)d;
      uint32_t b32;
      memcpy(&b32, &f, 4);
      bits = b32;
    } else {
      memcpy(&bits, &d, 8);
    }
  } else {
    bits = *tok == '-' ? (uint64_t)strtoll(tok, NULL, 0) : strtoull(tok, NULL, 0);
  }
  memcpy(dst, &bits, v->elem); /* little-endian: the low bytes */
}

/* Both passes of walk_vars over PTX text. */
static int walk_ptx_vars(const unsigned char *ptx, size_t n, struct fk_globals *g,
                         unsigned char *dst) {
  const char *t = (const char *)ptx, *end = t + strnlen(t, n);
  size_t k = 0;
  int depth = 0;
  for (const char *p = t; p < end; p++) {
    if (*p == '{' || *p == '}') { /* module scope only: not inside a function */
      depth += *p == '{' ? 1 : -1;
      continue;
    }
    if (depth || *p != '.' || (p > t && !strchr(" \t\r\n;", p[-1])) ||
        (strncmp(p, ".global", 7) && strncmp(p, ".const", 6) && strncmp(p, ".visible", 8) &&
         strncmp(p, ".extern", 7)))
      continue;
    const char *semi = memchr(p, ';', (size_t)(end - p));
    if (!semi)
      break;
    if (!strncmp(p, ".extern", 7)) { /* defined in another module: none here */
      p = semi;
      continue;
    }
    ptx_var v;
    if (!parse_ptx_var(p, semi, &v))
      continue; /* a function's header (.visible .entry) or another statement */
    {
      if (!dst) {
        fk_var *vars = realloc(g->vars, (g->nvars + 1) * sizeof *vars);
        if (!vars)
          return 0;
        g->vars = vars;
        size_t at = 0;
        if (g->nvars)
          at = (vars[g->nvars - 1].off + vars[g->nvars - 1].size + FK_GLOBAL_ALIGN - 1) /
               FK_GLOBAL_ALIGN * FK_GLOBAL_ALIGN;
        vars[g->nvars] = (fk_var){strdup(v.name), at, v.elem * v.count};
        if (!vars[g->nvars].name)
          return 0;
        g->nvars++;
      } else if (k < g->nvars) {
        const char *tok = v.init;
        for (size_t i = 0; tok && tok < semi && i < v.count; i++) {
          put_value(dst + g->vars[k].off + i * v.elem, &v, tok);
          const char *comma = memchr(tok, ',', (size_t)(semi - tok));
          tok = comma ? comma + 1 : NULL;
        }
        k++;
      }
    }
    p = semi; /* a declaration's initializer braces are not a function's */
  }
  return 1;
}

/* The module's variables, laid out and allocated in the module's context on
 * first use. Caller holds fk_lock. */
static CUresult module_globals(fk_obj *m, struct fk_globals **out) {
  if (m->globals) {
    *out = m->globals;
    return CUDA_SUCCESS;
  }
  struct fk_globals *g = calloc(1, sizeof *g);
  if (!g)
    return CUDA_ERROR_OUT_OF_MEMORY;
  const unsigned char *elf;
  size_t elf_n;
  unsigned char *owned = NULL;
  CUresult rc = CUDA_SUCCESS;
  int ptx = 0; /* an image with PTX only: its variables are declared in the text */
  if (m->image &&
      (pick_cubin(m->image, &elf, &elf_n, &owned) ||
       (free(owned), owned = NULL, ptx = pick_entry(m->image, 1, &elf, &elf_n, &owned)))) {
    int (*walk)(const unsigned char *, size_t, struct fk_globals *, unsigned char *) =
        ptx ? walk_ptx_vars : walk_vars;
    if (!walk(elf, elf_n, g, NULL)) {
      rc = CUDA_ERROR_OUT_OF_MEMORY;
    } else if (g->nvars) {
      fk_var *last = &g->vars[g->nvars - 1];
      rc = fk_alloc_device(m->ctx, last->off + last->size, &g->mem);
      if (rc == CUDA_SUCCESS) {
        g->mem->module_owned = 1;
        walk(elf, elf_n, g, (unsigned char *)(uintptr_t)g->mem->addr);
      }
    }
  }
  free(owned);
  if (rc) {
    free_globals(g);
    return rc;
  }
  m->globals = g;
  *out = g;
  return CUDA_SUCCESS;
}

CUresult fk_module_global(fk_obj *m, struct CUctx_st *c, const char *name, CUdeviceptr *dptr,
                          size_t *bytes) {
  struct fk_globals *g;
  (void)c; /* the module names its context */
  CUresult rc = module_globals(m, &g);
  if (rc)
    return rc;
  for (size_t i = 0; i < g->nvars; i++) {
    if (strcmp(g->vars[i].name, name))
      continue;
    if (dptr)
      *dptr = (CUdeviceptr)(g->mem->addr + g->vars[i].off);
    if (bytes)
      *bytes = g->vars[i].size;
    return CUDA_SUCCESS;
  }
  return CUDA_ERROR_NOT_FOUND;
}

void fk_module_globals_free(fk_obj *m) {
  struct fk_globals *g = m->globals;
  if (!g)
    return;
  if (g->mem)
    fk_alloc_unlink_free(g->mem);
  free_globals(g);
  m->globals = NULL;
}
