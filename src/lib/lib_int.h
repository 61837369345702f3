/* What the files of libebb share (src/lib/). Names start with lib_. */
#ifndef EBB_LIB_INT_H
#define EBB_LIB_INT_H

#include "ebb/ebb.h"
#include "memory/memory.h"

/* "torch_guard.c": the late-free guard of PyTorch's entry points. Leak
 * reclaims of an owner run between lib_torch_lock and lib_torch_unlock, and
 * report what they freed with lib_torch_leaked (lock held; g may be NULL),
 * so that a PyTorch free arriving later is not taken for a newer block at
 * the same address. lib_torch_forget drops what is known of device g (it is
 * being closed), its ordinal's handle too. */
void lib_torch_lock(void);
void lib_torch_unlock(void);
void lib_torch_leaked(const ebb_gpu *g, const mem_leak_report *r);
void lib_torch_forget(const ebb_gpu *g);
/* "torch_guard.c", for torch.c: lib_torch_claim is 1 when addr is new to
 * PyTorch (then it is recorded as live, size bytes), 0 when a leaked
 * tensor's address (or a live one's: it becomes an orphan). Under the lock,
 * lib_torch_match_locked says which block a PyTorch free of addr is: 1 the
 * live one (free it), 0 an orphan (retired; nothing to free), -1 none known.
 * lib_torch_ordinal is the handle of CUDA ordinal `device` set before with
 * lib_torch_set_ordinal (NULL: none, or out of 0..LIB_TORCH_ORD_MAX-1). */
int lib_torch_claim(const ebb_gpu *g, uint64_t addr, size_t size);
int lib_torch_match_locked(const ebb_gpu *g, uint64_t addr);
#define LIB_TORCH_ORD_MAX 64
ebb_gpu *lib_torch_ordinal(int device);
void lib_torch_set_ordinal(int device, ebb_gpu *g);

/* "lib.c": this process's open handle of CUDA device `ordinal` with one
 * more reference (the caller drops it with ebb_gpu_close), or NULL when the
 * program has not opened it: never opens a device. */
ebb_gpu *lib_gpu_open_ordinal(int ordinal);
/* "lib.c": s copied once for the life of the process (one copy per distinct
 * text; "?" when there is no host memory), NULL for NULL. */
const char *lib_intern(const char *s);
/* "lib.c": ebb_gpu_alloc for a site lib_intern gave (or a static string;
 * NULL: "torch"), with no checks: the fast path of ebb_torch_alloc. */
int lib_gpu_alloc_interned(ebb_gpu *g, size_t bytes, const char *site, uint64_t stream,
                           uint64_t *addr);

/* "pysite.c": the interned "file.py:line" of the calling thread's innermost
 * Python frame outside the frameworks, read from C with no callback into
 * Python, or NULL (not turned on by ebb_torch_python_sites, not a Python
 * thread, only framework frames). */
const char *lib_pysite(void);

#endif
