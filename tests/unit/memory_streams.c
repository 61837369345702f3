/* Stream-ordered reuse: a block freed on stream S goes at once to a request
 * on S, and to a request on another stream (or none) only once the work S
 * queued before the free has completed; a use recorded on another stream
 * (mem_record_stream) holds it back until that stream's work is done too.
 * On the fake GPU in its simulated-time mode (FAKEGPU_KERNEL_US: each
 * kernel launch takes that long on its stream, and until it has passed an
 * event recorded after it answers "not ready", as a GPU's would while its
 * kernels run). The driver is reached directly (dlopen of EBB_LIBCUDA, the
 * library ebb loads) for the streams and the work: a host twin launched on
 * a stream. A check that a block was held back is made only while the
 * stream is still busy (a machine too slow to allocate within a kernel's
 * KERNEL_US says so and proves nothing there). */
#include <dlfcn.h>

#include "memory_util.h"
#include "test.h"

#define BIG (16 * MiB)      /* a segment of its own: freed, it is one free block */
#define KERNEL_US "1000000" /* each launch: 1 s of simulated work */
#define NOT_READY 600

/* The kernel: the fake runs it as this host twin (it does nothing) and
 * counts its simulated time on the stream it was launched on. */
__attribute__((visibility("default"))) void fakegpu_twin_ebb_streams_work(const void *dims,
                                                                          void **params) {
  (void)dims;
  (void)params;
}

typedef int (*stream_create_fn)(void **s, unsigned flags);
typedef int (*stream_fn)(void *s);
typedef int (*module_load_fn)(void **m, const void *image);
typedef int (*get_function_fn)(void **f, void *m, const char *name);
typedef int (*launch_fn)(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                         unsigned bz, unsigned shmem, void *s, void **params, void **extra);
static struct {
  stream_create_fn create;
  stream_fn sync, destroy, query;
  module_load_fn module_load;
  get_function_fn get_function;
  launch_fn launch;
  void *work; /* the kernel */
} cu;

static void load_driver(void) {
  void *h = dlopen(getenv("EBB_LIBCUDA"), RTLD_NOW);
  REQUIRE(h != NULL);
  cu.create = (stream_create_fn)dlsym(h, "cuStreamCreate");
  cu.sync = (stream_fn)dlsym(h, "cuStreamSynchronize");
  cu.destroy = (stream_fn)dlsym(h, "cuStreamDestroy_v2");
  cu.query = (stream_fn)dlsym(h, "cuStreamQuery");
  cu.module_load = (module_load_fn)dlsym(h, "cuModuleLoadData");
  cu.get_function = (get_function_fn)dlsym(h, "cuModuleGetFunction");
  cu.launch = (launch_fn)dlsym(h, "cuLaunchKernel");
  REQUIRE(cu.create && cu.sync && cu.destroy && cu.query && cu.module_load && cu.get_function &&
          cu.launch);
}

typedef struct fixture {
  dev_device *d;
  mem_allocator *a;
  ebb_owner *o;
  void *s, *t; /* two streams of the primary context */
} fixture;

static void setup(fixture *f) {
  f->d = mt_open("cuda:0");
  REQUIRE(mem_allocator_create(f->d, NULL, &f->a) == 0);
  REQUIRE(mem_owner_create(f->a, "streams", NULL, &f->o) == 0);
  REQUIRE(dev_activate(f->d) == 0); /* the context current on this thread */
  REQUIRE(cu.create(&f->s, 1) == 0 && cu.create(&f->t, 1) == 0); /* non-blocking */
  void *m = NULL;
  REQUIRE(cu.module_load(&m, "\x7f"
                             "ELF a host twin") == 0);
  REQUIRE(cu.get_function(&cu.work, m, "ebb_streams_work") == 0);
}

static void teardown(fixture *f) {
  cu.destroy(f->s);
  cu.destroy(f->t);
  mem_owner_destroy(f->o, NULL);
  mem_allocator_destroy(f->a);
  dev_ctx_release(f->d);
  dev_close(f->d);
}

static uint64_t u(void *stream) { return (uint64_t)(uintptr_t)stream; }

static uint64_t alloc_on(fixture *f, void *stream) {
  uint64_t x = 0;
  CHECK_EQ_INT(mem_alloc_on(f->o, BIG, "streams.c", u(stream), &x), 0);
  return x;
}

/* Work queued on stream (a kernel that "uses" x): pending for KERNEL_US. */
static void busy(void *stream) {
  CHECK_EQ_INT(cu.launch(cu.work, 1, 1, 1, 32, 1, 1, 0, stream, NULL, NULL), 0);
}

/* 1 while stream's work is still pending: a held-back check means something. */
static int still_busy(void *stream, const char *what) {
  if (cu.query(stream) == NOT_READY)
    return 1;
  fprintf(stderr,
          "note: %s: the stream's work ended before the check (a slow machine); "
          "not checked\n",
          what);
  return 0;
}

static void test_same_stream_at_once(void) {
  fixture f;
  setup(&f);
  uint64_t x = alloc_on(&f, f.s);
  busy(f.s);
  CHECK_EQ_INT(mem_free_on(f.a, x, u(f.s)), 0);
  uint64_t y = alloc_on(&f, f.s); /* S's later work runs after its earlier work */
  CHECK_MSG(y == x,
            "a block freed on S with work pending went elsewhere on S: 0x%" PRIx64
            " then 0x%" PRIx64,
            x, y);
  CHECK_EQ_INT(mem_free_on(f.a, y, u(f.s)), 0);
  cu.sync(f.s);
  teardown(&f);
}

static void test_other_stream_waits_for_the_event(void) {
  fixture f;
  setup(&f);
  uint64_t x = alloc_on(&f, f.s);
  busy(f.s);
  CHECK_EQ_INT(mem_free_on(f.a, x, u(f.s)), 0);
  uint64_t waits = mem_allocator_stream_waits(f.a);
  uint64_t y = alloc_on(&f, f.t);
  uint64_t z = 0; /* nor to a request with no stream */
  CHECK_EQ_INT(mem_alloc(f.o, BIG, "streams.c", &z), 0);
  if (still_busy(f.s, "other stream")) {
    CHECK_MSG(y != x,
              "the block at 0x%" PRIx64 " freed on stream S with its work still pending "
              "was handed to stream T at once",
              x);
    CHECK_MSG(mem_allocator_stream_waits(f.a) > waits, "no request passed over a pending block");
    CHECK_MSG(z != x, "a request with no stream got the block S still uses");
  }
  CHECK_EQ_INT(cu.sync(f.s), 0); /* S's work is done: the event has completed */
  uint64_t w = alloc_on(&f, f.t);
  CHECK_MSG(w == x,
            "after S's work completed, T did not get the block at 0x%" PRIx64 " (got 0x%" PRIx64
            ")",
            x, w);
  mem_free_on(f.a, w, u(f.t));
  mem_free_on(f.a, y, u(f.t));
  mem_free(f.a, z);
  teardown(&f);
}

static void test_record_stream(void) {
  fixture f;
  setup(&f);
  uint64_t x = alloc_on(&f, f.s);
  CHECK_EQ_INT(mem_record_stream(f.a, x, u(f.t)), 0);
  busy(f.t); /* used on T, freed on S (which has nothing queued) */
  CHECK_EQ_INT(mem_free_on(f.a, x, u(f.s)), 0);
  uint64_t y = alloc_on(&f, f.s);
  if (still_busy(f.t, "record_stream"))
    CHECK_MSG(y != x, "a block still used on a recorded stream went back to its own stream");
  CHECK_EQ_INT(cu.sync(f.t), 0);
  uint64_t w = alloc_on(&f, f.s);
  CHECK_MSG(w == x, "after T's work completed, S did not get the block back");
  CHECK_EQ_INT(mem_record_stream(f.a, 0x10, u(f.t)), EBB_ENOTFOUND);
  mem_free_on(f.a, w, u(f.s));
  mem_free_on(f.a, y, u(f.s));
  teardown(&f);
}

/* The default stream (0), where a free records no event until another
 * stream asks (stream.c: lasting): the default stream itself takes the
 * block back at once, another stream and a request with no stream only
 * once the default stream's work on it is done. */
static void test_default_stream(void) {
  fixture f;
  setup(&f);
  uint64_t x = alloc_on(&f, NULL);
  busy(NULL);
  CHECK_EQ_INT(mem_free_on(f.a, x, 0), 0);
  uint64_t y = alloc_on(&f, NULL);
  CHECK_MSG(y == x,
            "a block freed on the default stream went elsewhere on it: 0x%" PRIx64
            " then 0x%" PRIx64,
            x, y);
  busy(NULL); /* y's work, then freed again */
  CHECK_EQ_INT(mem_free_on(f.a, y, 0), 0);
  uint64_t t = alloc_on(&f, f.t), z = 0;
  CHECK_EQ_INT(mem_alloc(f.o, BIG, "streams.c", &z), 0);
  if (still_busy(NULL, "default stream")) {
    CHECK_MSG(t != x,
              "the block at 0x%" PRIx64 " freed on the default stream with its work "
              "pending was handed to stream T at once",
              x);
    CHECK_MSG(z != x, "a request with no stream got the block the default stream still uses");
  }
  CHECK_EQ_INT(cu.sync(NULL), 0);
  uint64_t w = alloc_on(&f, f.t);
  CHECK_MSG(w == x,
            "after the default stream's work completed, T did not get the block at "
            "0x%" PRIx64 " (got 0x%" PRIx64 ")",
            x, w);
  mem_free_on(f.a, w, u(f.t));
  mem_free_on(f.a, t, u(f.t));
  mem_free(f.a, z);
  teardown(&f);
}

/* A block taken on S and freed with no stream is ordered on S all the
 * same; and a trim waits for the work before the segment goes back. */
static void test_free_without_stream_and_trim(void) {
  fixture f;
  setup(&f);
  uint64_t x = alloc_on(&f, f.s);
  busy(f.s);
  CHECK_EQ_INT(mem_free(f.a, x), 0);
  uint64_t y = alloc_on(&f, f.t);
  if (still_busy(f.s, "no stream"))
    CHECK_MSG(y != x, "a block freed with no stream went to T while S's work on it was pending");
  mem_free_on(f.a, y, u(f.t));
  uint64_t back = 0;
  CHECK_EQ_INT(mem_allocator_trim(f.a, &back), 0);
  CHECK_EQ_U64(back, 2 * BIG);
  CHECK_EQ_U64(mt_reserved(f.a), 0);
  teardown(&f);
}

/* The CPU device runs work at the call: every block goes anywhere at once. */
static void test_cpu(void) {
  dev_device *d = mt_open("cpu");
  mem_allocator *a = NULL;
  ebb_owner *o = NULL;
  REQUIRE(mem_allocator_create(d, NULL, &a) == 0);
  REQUIRE(mem_owner_create(a, "cpu", NULL, &o) == 0);
  uint64_t x = 0, y = 0;
  CHECK_EQ_INT(mem_alloc_on(o, BIG, "streams.c", 1, &x), 0);
  CHECK_EQ_INT(mem_record_stream(a, x, 3), 0);
  CHECK_EQ_INT(mem_free_on(a, x, 1), 0);
  CHECK_EQ_INT(mem_alloc_on(o, BIG, "streams.c", 2, &y), 0);
  CHECK_EQ_U64(y, x);
  mem_free_on(a, y, 2);
  mem_owner_destroy(o, NULL);
  mem_allocator_destroy(a);
  dev_close(d);
}

/* 1 when the fake simulates kernel time (a launch leaves its stream busy). */
static int simulates_time(void) {
  fixture f;
  setup(&f);
  busy(f.s);
  int sim = cu.query(f.s) == NOT_READY;
  cu.sync(f.s);
  teardown(&f);
  return sim;
}

int main(void) {
  setenv("FAKEGPU_KERNEL_US", KERNEL_US, 1); /* before the fake driver loads */
  load_driver();
  if (!simulates_time()) {
    fprintf(stderr, "skipped: this fake completes every launch at the call (no "
                    "FAKEGPU_KERNEL_US): no work can be pending\n");
    return 77;
  }
  RUN(test_same_stream_at_once);
  RUN(test_other_stream_waits_for_the_event);
  RUN(test_record_stream);
  RUN(test_default_stream);
  RUN(test_free_without_stream_and_trim);
  RUN(test_cpu);
  return TEST_END();
}
