/* Parking an owner: its VMM segments (all of them: no segment holds another
 * owner's blocks) lose their physical memory but keep their addresses; waking maps new memory at the same addresses and puts the
 * bytes back. Checked with fakegpu-smi on the fake GPU. */
#include "memory_util.h"
#include "test.h"

static void run(const char *spec) {
  dev_device *d = mt_open(spec);
  int fake = dev_kind_of(d) == EBB_DEVICE_CUDA;
  REQUIRE(dev_supports_vmm(d));
  mem_allocator *a = NULL;
  REQUIRE(mem_allocator_create(d, NULL, &a) == 0);
  ebb_owner *w = NULL, *other = NULL;
  REQUIRE(mem_owner_create(a, "whisper", NULL, &w) == 0);
  REQUIRE(mem_owner_create(a, "other", NULL, &other) == 0);
  uint64_t big = 0, mid = 0, shared = 0, mine_small = 0;
  CHECK_EQ_INT(mem_alloc(w, 64 * MiB, "w.c:1", &big), 0);    /* own segment */
  CHECK_EQ_INT(mem_alloc(w, 3 * MiB, "w.c:2", &mid), 0);     /* 20 MiB segment, alone */
  CHECK_EQ_INT(mem_alloc(w, 4096, "w.c:3", &mine_small), 0); /* small segment... */
  CHECK_EQ_INT(mem_alloc(other, 4096, "o.c:1", &shared), 0); /* ...other gets its own */
  unsigned char *pat = malloc(64 * MiB), *back = malloc(64 * MiB);
  REQUIRE(pat && back);
  for (size_t i = 0; i < 64 * MiB; i++)
    pat[i] = (unsigned char)(i * 131 + (i >> 20));
  CHECK_EQ_INT(dev_copy_htod(d, big, pat, 64 * MiB), 0);
  CHECK_EQ_INT(dev_copy_htod(d, mid, pat + 7, 3 * MiB), 0);
  long before = fake ? mt_smi_used_mib(getpid()) : 0;
  uint64_t parked = 0;
  CHECK_EQ_INT(ebb_owner_park(w, &parked), 0);
  CHECK_EQ_U64(parked, 86 * MiB); /* 64 + 20 + 2: segments are owner-affine */
  CHECK_EQ_U64(mt_reserved(a), 2 * MiB);
  if (fake)
    CHECK_EQ_INT(mt_smi_used_mib(getpid()), before - 86);
  /* new allocations never land in a parked segment */
  uint64_t n = 0;
  CHECK_EQ_INT(mem_alloc(other, 2 * MiB, "o.c:2", &n), 0);
  CHECK(n < mid || n >= mid + 20 * MiB);
  CHECK_EQ_INT(mem_free(a, n), 0);
  CHECK_EQ_INT(ebb_owner_wake(w), 0);
  CHECK_EQ_U64(mt_reserved(a), (2 + 86 + 20) * MiB);
  if (fake)
    CHECK_EQ_INT(mt_smi_used_mib(getpid()), before + 20);
  CHECK_EQ_INT(dev_copy_dtoh(d, back, big, 64 * MiB), 0);
  CHECK_MSG(memcmp(back, pat, 64 * MiB) == 0, "64 MiB block changed across park/wake on %s", spec);
  CHECK_EQ_INT(dev_copy_dtoh(d, back, mid, 3 * MiB), 0);
  CHECK_MSG(memcmp(back, pat + 7, 3 * MiB) == 0, "3 MiB block changed across park/wake on %s",
            spec);
  ebb_owner *who = NULL;
  CHECK_EQ_INT(mem_lookup(a, big, &who, NULL), 0); /* same address, same owner */
  CHECK(who == w);
  /* freeing while parked, then trim, gives the address range back too */
  CHECK_EQ_INT(ebb_owner_park(w, &parked), 0);
  CHECK_EQ_INT(mem_free(a, big), 0);
  uint64_t got = 0;
  CHECK_EQ_INT(mem_allocator_trim(a, &got), 0);
  CHECK_EQ_INT(ebb_owner_wake(w), 0);
  CHECK_EQ_INT(dev_copy_dtoh(d, back, mid, 3 * MiB), 0);
  CHECK(memcmp(back, pat + 7, 3 * MiB) == 0);
  mem_alloc_stats st = {.size = sizeof st};
  mem_allocator_get_stats(a, &st);
  CHECK_EQ_U64(st.segments.current, 3); /* two small + the 3 MiB block's; the rest trimmed */
  free(pat);
  free(back);
  mem_free(a, mid);
  mem_free(a, mine_small);
  mem_free(a, shared);
  mem_owner_destroy(w, NULL);
  mem_owner_destroy(other, NULL);
  mem_allocator_destroy(a);
  dev_close(d);
}

MT_MAIN_CPU_AND_FAKE(run)
