/* Kernel parameter layouts, cuFuncGetParamInfo / cuKernelGetParamInfo, and
 * the launch argument check: a kernel whose arguments point into freed or
 * unmapped device memory faults with CUDA_ERROR_ILLEGAL_ADDRESS (700), as a
 * real GPU does when the kernel touches that memory.
 *
 * Layouts are read from the image as a driver reads them, once per image:
 * a cubin's .nv.info.<kernel> section lists its parameters
 * (EIATTR_KPARAM_INFO: ordinal, offset in the parameter buffer, size in
 * bits 18..31 of its last word), for a cubin inside a fatbin too (the cubin
 * for compute capability 9.0, else the newest below; compressed entries
 * undone as for device variables, fakecuda_globals.c). An image with PTX
 * only declares them after `.entry NAME(`: each `.param` has a size and an
 * alignment, and the driver lays them out in order. Modules that hold no
 * image the fake can read (host twins only) have no known layout.
 *
 * The check (FAKEGPU_CHECK_ARGS, default 1): every 8-byte value at an
 * 8-byte aligned offset of the parameter buffer, inside a parameter of the
 * layout of at most 64 bytes (level 2: of any size; see judged()), is
 * judged only when it lies in a
 * range that was device memory of this process and was freed since
 * (fakecuda_freed.c), or in a live VMM reservation: there it must be live
 * memory (a plain, managed or pool allocation, an IPC mapping, a VMM mapping
 * with access, pinned host memory) or one past the end of such memory.
 * Integers, floats and host pointers never fall in those ranges; a word
 * whose low 32 bits are below 64 Ki is taken for an int and the padding
 * after it (see bad_value). Where the
 * layout is unknown, a packed `extra` buffer is judged word by word over its
 * size at level 2; a kernelParams array is not judged (its length is not
 * known). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fakecuda.h"

#define EIATTR_KPARAM_INFO 0x17
#define EIFMT_SVAL 4
#define FK_MAX_PARAMS 8192 /* a parameter buffer holds at most 32764 bytes */

typedef struct fk_param {
  uint32_t off, size;
} fk_param;

typedef struct fk_layout {
  char *name;
  uint32_t n;
  fk_param *p;
} fk_layout;

typedef struct image_layouts {
  const void *image;
  size_t n;
  fk_layout *k; /* sorted by name */
  struct image_layouts *next;
} image_layouts;

static image_layouts *g_images;


/* Adds a kernel's layout (name of len bytes; p, n taken over). */
static int add_layout(image_layouts *il, const char *name, size_t len, fk_param *p, uint32_t n) {
  fk_layout *k = realloc(il->k, (il->n + 1) * sizeof *k);
  char *copy = strndup(name, len);
  if (!k || !copy) {
    if (k)
      il->k = k;
    free(copy);
    free(p);
    return 0;
  }
  il->k = k;
  k[il->n++] = (fk_layout){copy, n, p};
  return 1;
}

/* --- cubins: .nv.info.<kernel> ------------------------------------------- */
/* The parameters listed in one .nv.info.<kernel> section (attributes: a
 * format byte, an attribute byte, a 16-bit value or, for EIFMT_SVAL, the
 * size of the value that follows). */
static int parse_info(image_layouts *il, const char *kernel, const unsigned char *a, size_t n) {
  uint32_t count = 0;
  for (int pass = 0; pass < 2; pass++) {
    fk_param *p = pass ? calloc(count ? count : 1, sizeof *p) : NULL;
    if (pass && !p)
      return 0;
    for (size_t o = 0; o + 4 <= n;) {
      size_t len = a[o] == EIFMT_SVAL ? fk_rd16(a + o + 2) : 0;
      if (len > n - o - 4)
        break;
      if (a[o] == EIFMT_SVAL && a[o + 1] == EIATTR_KPARAM_INFO && len >= 12) {
        uint32_t ord = fk_rd16(a + o + 8), off = fk_rd16(a + o + 10),
                 size = fk_rd32(a + o + 12) >> 18;
        if (ord < FK_MAX_PARAMS && !pass && ord + 1 > count)
          count = ord + 1;
        else if (pass && ord < count)
          p[ord] = (fk_param){off, size};
      }
      o += 4 + len;
    }
    if (pass)
      return add_layout(il, kernel, strlen(kernel), p, count);
  }
  return 0;
}

static int parse_cubin(image_layouts *il, const unsigned char *elf, size_t n) {
  if (n < 64)
    return 0;
  uint64_t shoff = fk_rd64(elf + 0x28);
  uint16_t shentsize = fk_rd16(elf + 0x3a), shnum = fk_rd16(elf + 0x3c),
           shstrndx = fk_rd16(elf + 0x3e);
  if (shentsize < 64 || shoff > n || (uint64_t)shentsize * shnum > n - shoff || shstrndx >= shnum)
    return 0;
#define SH(i) (elf + shoff + (size_t)(i)*shentsize)
  uint64_t str_off = fk_rd64(SH(shstrndx) + 24), str_n = fk_rd64(SH(shstrndx) + 32);
  if (str_off > n || str_n > n - str_off)
    return 0;
  for (unsigned s = 0; s < shnum; s++) {
    const unsigned char *sh = SH(s);
    uint32_t name = fk_rd32(sh);
    uint64_t off = fk_rd64(sh + 24), size = fk_rd64(sh + 32);
    const char *nm = (const char *)elf + str_off + name;
    if (fk_rd32(sh + 4) != 0x70000000u || name >= str_n || !memchr(nm, 0, str_n - name) ||
        strncmp(nm, ".nv.info.", 9) || off > n || size > n - off)
      continue;
    if (!parse_info(il, nm + 9, elf + off, size))
      return 0;
  }
#undef SH
  return 1;
}

/* --- PTX: .entry NAME( .param ..., ... ) ------------------------------------ */
/* One `.param` declaration [p, end): its size and alignment (0: none). */
static uint32_t ptx_param(const char *p, const char *end, uint32_t *align) {
  uint32_t elem = 0, count = 1, al = 0;
  for (const char *q = p; q < end; q++) {
    if (*q == '.' && q + 6 < end && !strncmp(q, ".align", 6))
      al = (uint32_t)strtoul(q + 6, NULL, 10);
    else if (*q == '.' && strchr("busf", q[1]) && q[2] >= '1' && q[2] <= '9' && !elem)
      elem = (uint32_t)strtoul(q + 2, NULL, 10) / 8;
    else if (*q == '[')
      count = (uint32_t)strtoul(q + 1, NULL, 10);
  }
  *align = al ? al : elem;
  return elem * count;
}

static int parse_ptx(image_layouts *il, const char *t, size_t n) {
  const char *end = t + strnlen(t, n);
  for (const char *e = t; e + 6 < end; e++) {
    if (memcmp(e, ".entry", 6))
      continue;
    const char *a = e + 6;
    while (a < end && (*a == ' ' || *a == '\t'))
      a++;
    const char *b = a;
    while (b < end && !strchr(" \t\r\n(", *b))
      b++;
    const char *q = b;
    while (q < end && strchr(" \t\r\n", *q))
      q++;
    const char *close = q < end && *q == '(' ? memchr(q, ')', (size_t)(end - q)) : NULL;
    fk_param *p = calloc(FK_MAX_PARAMS, sizeof *p);
    uint32_t count = 0, at = 0;
    if (!p || b == a)
      return free(p), 0;
    for (const char *d = close ? q + 1 : close; d && d < close && count < FK_MAX_PARAMS;) {
      const char *comma = memchr(d, ',', (size_t)(close - d));
      const char *stop = comma ? comma : close;
      uint32_t align, size = ptx_param(d, stop, &align);
      if (align > 1)
        at = (at + align - 1) / align * align;
      p[count++] = (fk_param){at, size};
      at += size;
      d = comma ? comma + 1 : NULL;
    }
    if (!add_layout(il, a, (size_t)(b - a), p, count))
      return 0;
  }
  return 1;
}

/* --- one table per image ------------------------------------------------------ */
static int by_name(const void *x, const void *y) {
  return strcmp(((const fk_layout *)x)->name, ((const fk_layout *)y)->name);
}

static void free_layouts(image_layouts *il) {
  for (size_t i = 0; i < il->n; i++) {
    free(il->k[i].name);
    free(il->k[i].p);
  }
  free(il->k);
  free(il);
}

/* The layouts of image, read on first use (an empty table when it has no
 * cubin or PTX the fake can read). NULL without memory. */
static image_layouts *layouts_of(const void *image) {
  for (image_layouts *il = g_images; il; il = il->next)
    if (il->image == image)
      return il;
  image_layouts *il = calloc(1, sizeof *il);
  if (!il)
    return NULL;
  il->image = image;
  const unsigned char *elf;
  size_t n;
  unsigned char *owned = NULL;
  int ok = 1;
  if (fk_image_entry(image, 2, &elf, &n, &owned))
    ok = parse_cubin(il, elf, n);
  else if (free(owned), owned = NULL, fk_image_entry(image, 1, &elf, &n, &owned))
    ok = parse_ptx(il, (const char *)elf, n);
  free(owned);
  if (!ok) { /* unreadable: no layout rather than a wrong one */
    free_layouts(il);
    if (!(il = calloc(1, sizeof *il)))
      return NULL;
    il->image = image;
  }
  if (il->n)
    qsort(il->k, il->n, sizeof *il->k, by_name);
  il->next = g_images;
  g_images = il;
  return il;
}

void fk_params_forget(const void *image) {
  for (image_layouts **pp = &g_images; *pp; pp = &(*pp)->next)
    if ((*pp)->image == image) {
      image_layouts *il = *pp;
      *pp = il->next;
      free_layouts(il);
      return;
    }
}

static const fk_layout *layout_in(const void *image, const char *name) {
  image_layouts *il = image && name ? layouts_of(image) : NULL;
  if (!il || !il->n)
    return NULL;
  fk_layout key = {(char *)name, 0, NULL};
  return bsearch(&key, il->k, il->n, sizeof *il->k, by_name);
}

static const fk_layout *layout_of(const fk_obj *fn) {
  return fn->module ? layout_in(fn->module->image, fn->name) : NULL;
}

/* --- cuFuncGetParamInfo, cuKernelGetParamInfo ------------------------------------ */
/* 801 (NOT_SUPPORTED) when the fake has no layout for the kernel (a module
 * of host twins without an image it can read). */
static CUresult param_info(const fk_layout *l, size_t index, size_t *offset, size_t *size) {
  if (!l)
    return CUDA_ERROR_NOT_SUPPORTED;
  if (index >= l->n)
    return CUDA_ERROR_INVALID_VALUE;
  if (offset)
    *offset = l->p[index].off;
  if (size)
    *size = l->p[index].size;
  return CUDA_SUCCESS;
}

FK_API CUresult cuFuncGetParamInfo(CUfunction f, size_t index, size_t *offset, size_t *size) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  fk_lock();
  fk_obj *fn = fk_obj_check(f, FK_OBJ_FUNCTION);
  rc = fn ? param_info(layout_of(fn), index, offset, size) : CUDA_ERROR_INVALID_HANDLE;
  fk_unlock();
  return rc;
}

FK_API CUresult cuKernelGetParamInfo(CUkernel k, size_t index, size_t *offset, size_t *size) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  fk_lock();
  const char *name;
  const void *image = fk_kernel_image(k, &name);
  rc = name ? param_info(layout_in(image, name), index, offset, size) : CUDA_ERROR_INVALID_HANDLE;
  fk_unlock();
  return rc;
}

/* --- the check ----------------------------------------------------------------- */
/* Why v must not be touched by a kernel, NULL when it may (or is no pointer
 * the fake knows of). One past the end of live memory is a valid pointer. */
static const char *bad_value(uint64_t v) {
  /* Low 32 bits below 64 Ki: two 32-bit fields, an int and the padding
   * after it, whose bytes a host left as they were (CuPy's indexer showed
   * 0x7f1000000003: 3 and the top of an old pointer). Such a word is not
   * judged; a real pointer there (the first 64 KiB of a 4 GiB window) is
   * missed, never a false fault raised. */
  if ((v & 0xffffffffu) < 0x10000u)
    return NULL;
  if (fk_vmm_reserved(v))
    return fk_vmm_range_ok(v, 1) || (v && fk_vmm_range_ok(v - 1, 1))
               ? NULL
               : "a VMM reservation with no memory mapped there with access";
  if (!fk_freed_holds(v) || fk_mem_range_ok(v, 1) || (v && fk_mem_range_ok(v - 1, 1)))
    return NULL;
  return "device memory that was freed";
}

typedef struct finding {
  const char *why;
  uint64_t value;
  uint32_t param, off;
  const unsigned char *val; /* the parameter's bytes (its first size, at most 128) */
  uint32_t size;
} finding;

/* A word that may be a pointer: a user-space address whose low 32 bits are
 * not an int's (see bad_value). Zero, sizes, counts, strides, floats and
 * negative values are not. */
static int pointer_like(uint64_t v) {
  return v >> 32 && v >> 47 == 0 && (v & 0xffffffffu) >= 0x10000u;
}

/* The 8-byte aligned words of one parameter (at offset off, size bytes).
 * At level 1 a structure is judged up to its second word that cannot be a
 * pointer: structures lead with their pointers (an array of data pointers,
 * a tensor's or CuPy array's data pointer before its sizes, a pointer after
 * one int field), and what follows their sizes and counts is what hosts
 * leave unwritten: CuPy's CIndexer {size, shape[n], index[n]} sends index[]
 * as the heap had it, and a stale pointer there into memory freed since
 * would fault where a GPU never reads (the kernel writes its copy first).
 * Level 2 judges every word. */
static int scan(const unsigned char *val, uint32_t param, uint32_t off, uint32_t size, finding *f) {
  int others = fk_cfg.check_args < 2 && size > 8 ? 0 : -1; /* -1: judge all */
  for (uint32_t k = (8 - off % 8) % 8; k + 8 <= size; k += 8) {
    uint64_t v = fk_rd64(val + k);
    if (others >= 0 && !pointer_like(v) && ++others == 2)
      return 0;
    const char *why = bad_value(v);
    if (why) {
      *f = (finding){why, v, param, off + k, val, size < 128 ? size : 128};
      return 1;
    }
  }
  return 0;
}

/* extra: {CU_LAUNCH_PARAM_BUFFER_POINTER, buf, CU_LAUNCH_PARAM_BUFFER_SIZE,
 * &size, CU_LAUNCH_PARAM_END} in any order; both needed. */
static CUresult parse_extra(void **extra, const unsigned char **buf, size_t *n) {
  const size_t *size = NULL;
  *buf = NULL;
  for (int i = 0;; i += 2) {
    if (i >= 64)
      return CUDA_ERROR_INVALID_VALUE; /* no CU_LAUNCH_PARAM_END */
    uintptr_t key = (uintptr_t)extra[i];
    if (key == 0)
      break;
    if (key == 1)
      *buf = extra[i + 1];
    else if (key == 2)
      size = extra[i + 1];
    else
      return CUDA_ERROR_INVALID_VALUE;
  }
  if (!*buf || !size)
    return CUDA_ERROR_INVALID_VALUE;
  *n = *size;
  return CUDA_SUCCESS;
}

/* Level 1 judges the parameters of at most FK_SMALL_PARAM bytes: pointers
 * and small structures (a tensor's accessor: data, sizes, strides; an array
 * of data pointers). Larger structures are kernel state that hosts fill in
 * part: PyTorch's ReduceOp leaves dst[1] as the stack had it when there is
 * one output, its OffsetCalculator the dimensions past the tensor's, and
 * such a stale value points into memory freed since as often as not (a
 * false fault on torchcrepe's second call, in frames.std). Level 2 judges
 * every parameter, and an `extra` buffer of unknown layout word by word. */
#define FK_SMALL_PARAM 64

static int judged(uint32_t size) { return fk_cfg.check_args >= 2 || size <= FK_SMALL_PARAM; }

static int check_buffer(const fk_layout *l, const unsigned char *buf, size_t n, finding *f) {
  if (!l)
    return fk_cfg.check_args >= 2 && scan(buf, 0, 0, n > UINT32_MAX ? UINT32_MAX : (uint32_t)n, f);
  for (uint32_t i = 0; i < l->n; i++)
    if (l->p[i].off <= n && l->p[i].size <= n - l->p[i].off && judged(l->p[i].size) &&
        scan(buf + l->p[i].off, i, l->p[i].off, l->p[i].size, f))
      return 1;
  return 0;
}

static int check_params(const fk_layout *l, void **params, finding *f) {
  for (uint32_t i = 0; l && params && i < l->n; i++)
    if (params[i] && judged(l->p[i].size) && scan(params[i], i, l->p[i].off, l->p[i].size, f))
      return 1;
  return 0;
}

CUresult fk_params_check(const fk_obj *fn, void **params, void **extra, int *fault) {
  const unsigned char *buf = NULL;
  size_t n = 0;
  finding f;
  *fault = 0;
  if (params && extra)
    return CUDA_ERROR_INVALID_VALUE;
  CUresult rc = extra ? parse_extra(extra, &buf, &n) : CUDA_SUCCESS;
  if (rc || !fk_cfg.check_args)
    return rc;
  const fk_layout *l = layout_of(fn);
  *fault = extra ? check_buffer(l, buf, n, &f) : check_params(l, params, &f);
  if (*fault && fk_trace_on()) { /* the whole parameter, to tell a pointer from padding */
    char hex[400];
    size_t at = 0;
    for (uint32_t k = 0; k + 8 <= f.size && at + 20 < sizeof hex; k += 8)
      at += (size_t)snprintf(hex + at, sizeof hex - at, " %016llx",
                             (unsigned long long)fk_rd64(f.val + k));
    hex[at] = 0;
    fk_trace("kernel '%.200s' parameter %u, words:%s", fn->name ? fn->name : "?", f.param, hex);
  }
  if (*fault)
    fprintf(stderr,
            "fakegpu: kernel '%.200s' argument %u (byte %u of the parameters) is 0x%llx, in %s: "
            "the launch faults with CUDA_ERROR_ILLEGAL_ADDRESS (700), sticky on its context "
            "(FAKEGPU_CHECK_ARGS=0 turns this check off)\n",
            fn->name ? fn->name : "?", f.param, f.off, (unsigned long long)f.value, f.why);
  return CUDA_SUCCESS;
}

CUresult fk_params_unpack(const fk_obj *fn, void **extra, void ***out) {
  const unsigned char *buf;
  size_t n;
  const fk_layout *l = layout_of(fn);
  CUresult rc = parse_extra(extra, &buf, &n);
  if (rc || !l)
    return CUDA_ERROR_INVALID_VALUE;
  void **p = calloc(l->n ? l->n : 1, sizeof *p);
  if (!p)
    return CUDA_ERROR_OUT_OF_MEMORY;
  for (uint32_t i = 0; i < l->n; i++) {
    if (l->p[i].off > n || l->p[i].size > n - l->p[i].off) {
      free(p);
      return CUDA_ERROR_INVALID_VALUE; /* the buffer is shorter than the layout */
    }
    p[i] = (void *)(buf + l->p[i].off);
  }
  *out = p;
  return CUDA_SUCCESS;
}

/* A launch's arguments as one packed buffer (the `extra` form), for a graph
 * node that must keep them: kernelParams copied by the layout (each value
 * at its offset), or `extra`'s buffer copied as it is. *buf NULL with *n 0
 * when there are no arguments (neither form, or a layout of no
 * parameters). CUDA_ERROR_NOT_FOUND when kernelParams are given and the
 * layout is unknown (their sizes cannot be read), 1 for both forms at once
 * or a malformed `extra`. */
CUresult fk_params_pack(const fk_obj *fn, void **params, void **extra, unsigned char **buf,
                        size_t *n) {
  const unsigned char *src = NULL;
  const fk_layout *l = fn ? layout_of(fn) : NULL;
  *buf = NULL;
  *n = 0;
  if (params && extra)
    return CUDA_ERROR_INVALID_VALUE;
  if (extra) {
    CUresult rc = parse_extra(extra, &src, n);
    if (rc == CUDA_SUCCESS && *n && !(*buf = malloc(*n)))
      rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (rc == CUDA_SUCCESS && *n)
      memcpy(*buf, src, *n);
    return rc;
  }
  if (!params)
    return CUDA_SUCCESS;
  if (!l)
    return CUDA_ERROR_NOT_FOUND;
  for (uint32_t i = 0; i < l->n; i++)
    if (l->p[i].off + (size_t)l->p[i].size > *n)
      *n = l->p[i].off + (size_t)l->p[i].size;
  if (*n && !(*buf = calloc(1, *n)))
    return CUDA_ERROR_OUT_OF_MEMORY;
  for (uint32_t i = 0; i < l->n; i++) {
    if (!params[i]) {
      free(*buf);
      *buf = NULL;
      return CUDA_ERROR_INVALID_VALUE;
    }
    memcpy(*buf + l->p[i].off, params[i], l->p[i].size);
  }
  return CUDA_SUCCESS;
}
