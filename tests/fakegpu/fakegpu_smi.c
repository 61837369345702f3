/* fakegpu-smi: nvidia-smi's query interface over the fake GPU's state file,
 * so one script can measure a real GPU (nvidia-smi) or the fake (this).
 *   fakegpu-smi --query-gpu=memory.used,memory.free,memory.total --format=csv[,noheader][,nounits]
 *   fakegpu-smi --query-compute-apps=pid,used_memory --format=csv[,noheader][,nounits]
 *                          (and kernel_launches, the fake's own field)
 *   fakegpu-smi -L
 *   fakegpu-smi            (a short human summary)
 *   fakegpu-smi --fake-lose-device=N   (not nvidia-smi's: device N falls off
 *                          the bus now, for every process; see README.md)
 * Values are MiB, fields separated by ", ", one line per GPU / per process
 * and GPU, as nvidia-smi prints them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fg_state.h"

#define NAME "fakegpu (ebb test device)"

typedef struct field {
  const char *name;   /* as queried */
  const char *header; /* nvidia-smi's column header */
  const char *unit;   /* value suffix without nounits ("MiB"), or NULL */
} field;

static const field gpu_fields[] = {
    {"index", "index", NULL},
    {"name", "name", NULL},
    {"uuid", "uuid", NULL},
    {"gpu_uuid", "uuid", NULL},
    {"driver_version", "driver_version", NULL},
    {"count", "count", NULL},
    {"pci.bus_id", "pci.bus_id", NULL},
    {"compute_cap", "compute_cap", NULL},
    {"memory.total", "memory.total [MiB]", "MiB"},
    {"memory.used", "memory.used [MiB]", "MiB"},
    {"memory.free", "memory.free [MiB]", "MiB"},
    {"memory.reserved", "memory.reserved [MiB]", "MiB"},
};

static const field app_fields[] = {
    {"pid", "pid", NULL},
    {"process_name", "process_name", NULL},
    {"name", "process_name", NULL},
    {"gpu_uuid", "gpu_uuid", NULL},
    {"gpu_bus_id", "gpu_bus_id", NULL},
    {"used_memory", "used_gpu_memory [MiB]", "MiB"},
    {"used_gpu_memory", "used_gpu_memory [MiB]", "MiB"},
    {"kernel_launches", "kernel_launches", NULL}, /* the fake only */
};

#define NFIELDS(a) (sizeof a / sizeof a[0])
#define MAX_QUERY 32

static const field *find_field(const field *set, size_t n, const char *name) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(set[i].name, name) == 0)
      return &set[i];
  return NULL;
}

/* Splits "a,b,c" into fields of set; prints nvidia-smi's complaint on an
 * unknown one. Returns the count, -1 on error. */
static int parse_query(const char *list, const field *set, size_t nset, const field **out) {
  char buf[1024];
  snprintf(buf, sizeof buf, "%s", list);
  int n = 0;
  for (char *save, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    while (*tok == ' ')
      tok++;
    const field *f = find_field(set, nset, tok);
    if (!f) {
      fprintf(stderr, "Field \"%s\" is not a valid field to query.\n\n", tok);
      return -1;
    }
    if (n == MAX_QUERY)
      return -1;
    out[n++] = f;
  }
  return n;
}

static void uuid_of(unsigned dev, char *out, size_t len) {
  static const unsigned char base[16] = {'f', 'a', 'k', 'e',  'g',  'p',  'u',  '-',
                                         'e', 'b', 'b', 0x10, 0x42, 0x13, 0x37, 0};
  unsigned char b[16];
  memcpy(b, base, 16);
  b[15] = (unsigned char)dev;
  snprintf(out, len, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
           b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
           b[14], b[15]);
}

static void print_mib(uint64_t bytes, int units) {
  printf("%llu%s", (unsigned long long)(bytes / FG_MIB), units ? " MiB" : "");
}

static void print_header(const field **q, int n) {
  for (int i = 0; i < n; i++)
    printf("%s%s", i ? ", " : "", q[i]->header);
  printf("\n");
}

static void process_name(pid_t pid, char *out, size_t len) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/cmdline", (int)pid);
  FILE *f = fopen(path, "r");
  size_t n = 0;
  if (f) {
    n = fread(out, 1, len - 1, f);
    fclose(f);
  }
  out[n] = 0; /* argv[0] ends at its NUL */
  if (n == 0)
    snprintf(out, len, "[Not Found]");
}

static void gpu_row(unsigned dev, const fg_device_usage *u, const field **q, int n, int units) {
  for (int i = 0; i < n; i++) {
    const char *name = q[i]->name;
    char uuid[64];
    if (i)
      printf(", ");
    if (u->lost && !strncmp(name, "memory.", 7))
      printf("[GPU is lost]"); /* what NVML answers for a device off the bus */
    else if (!strcmp(name, "index"))
      printf("%u", dev);
    else if (!strcmp(name, "name"))
      printf("%s", NAME);
    else if (!strcmp(name, "uuid") || !strcmp(name, "gpu_uuid"))
      uuid_of(dev, uuid, sizeof uuid), printf("%s", uuid);
    else if (!strcmp(name, "driver_version"))
      printf("580.00.00-fakegpu");
    else if (!strcmp(name, "count"))
      printf("%u", u->ndevices);
    else if (!strcmp(name, "pci.bus_id"))
      printf("00000000:%02X:00.0", 0x18 + dev);
    else if (!strcmp(name, "compute_cap"))
      printf("9.0");
    else if (!strcmp(name, "memory.total"))
      print_mib(u->total_bytes, units);
    else if (!strcmp(name, "memory.used"))
      print_mib(u->used_bytes, units);
    else if (!strcmp(name, "memory.free"))
      print_mib(u->used_bytes < u->total_bytes ? u->total_bytes - u->used_bytes : 0, units);
    else if (!strcmp(name, "memory.reserved"))
      print_mib(0, units);
  }
  printf("\n");
}

static void app_row(unsigned dev, const fg_proc_usage *p, const field **q, int n, int units) {
  for (int i = 0; i < n; i++) {
    const char *name = q[i]->name;
    char buf[4096];
    if (i)
      printf(", ");
    if (!strcmp(name, "pid"))
      printf("%d", (int)p->pid);
    else if (!strcmp(name, "process_name") || !strcmp(name, "name"))
      process_name(p->pid, buf, sizeof buf), printf("%s", buf);
    else if (!strcmp(name, "gpu_uuid"))
      uuid_of(dev, buf, sizeof buf), printf("%s", buf);
    else if (!strcmp(name, "gpu_bus_id"))
      printf("00000000:%02X:00.0", 0x18 + dev);
    else if (!strcmp(name, "kernel_launches"))
      printf("%llu", (unsigned long long)p->launches);
    else
      print_mib(p->used_bytes, units);
  }
  printf("\n");
}

static int usage(void) {
  fprintf(stderr,
          "usage: fakegpu-smi [-i ID[,ID...]] --query-gpu=FIELDS "
          "--format=csv[,noheader][,nounits]\n"
          "       fakegpu-smi [-i ID[,ID...]] --query-compute-apps=FIELDS "
          "--format=csv[,noheader][,nounits]\n"
          "       fakegpu-smi [-i ID] -L\n"
          "       fakegpu-smi --fake-lose-device=ID   (the fake only: device ID is lost now)\n"
          "ID: a device index (--id=ID is the same).\n"
          "Reads the fake GPU named by FAKEGPU_STATE.\n"
          "--query-compute-apps also takes kernel_launches (the fake only): the kernel\n"
          "launches the process made on the device. The fake keeps memory and bytes,\n"
          "not arithmetic: a kernel runs only as a host twin (fakegpu_twin_<name>),\n"
          "and a kernel of a real binary (fatbin, cubin) with no twin is accepted\n"
          "and does nothing. See tests/fakegpu/README.md.\n");
  return 2;
}

/* "0,2" -> a mask of device indices; -1 on anything that is not one. */
static int parse_ids(const char *s, unsigned *mask) {
  *mask = 0;
  for (;;) {
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || v < 0 || v >= FG_MAX_DEVICES || (*end && *end != ','))
      return -1;
    *mask |= 1u << v;
    if (!*end)
      return 0;
    s = end + 1;
  }
}

int main(int argc, char **argv) {
  const char *query_gpu = NULL, *query_apps = NULL, *format = NULL, *ids = NULL;
  const char *lose = NULL;
  int list = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strncmp(a, "--query-gpu=", 12))
      query_gpu = a + 12;
    else if (!strncmp(a, "--query-compute-apps=", 21))
      query_apps = a + 21;
    else if (!strncmp(a, "--format=", 9))
      format = a + 9;
    else if (!strncmp(a, "--fake-lose-device=", 19))
      lose = a + 19;
    else if (!strcmp(a, "-L") || !strcmp(a, "--list-gpus"))
      list = 1;
    else if (!strncmp(a, "--id=", 5))
      ids = a + 5;
    else if (!strncmp(a, "-i=", 3))
      ids = a + 3;
    else if ((!strcmp(a, "-i") || !strcmp(a, "--id")) && i + 1 < argc)
      ids = argv[++i];
    else if (!strcmp(a, "-h") || !strcmp(a, "--help"))
      return usage(), 0;
    else
      return usage();
  }

  fg_config cfg;
  fg_config_from_env(&cfg);
  if (cfg.error[0]) {
    fprintf(stderr, "fakegpu-smi: %s\n", cfg.error);
    return 2;
  }
  if (cfg.stub) {
    printf("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n");
    return 9;
  }
  if (cfg.ndevices == 0) {
    printf("No devices were found\n");
    return 6;
  }
  if (fg_state_attach(&cfg, 0) != 0) {
    fprintf(stderr, "fakegpu-smi: cannot open state file %s\n", cfg.state_path);
    return 9;
  }
  fg_device_usage u0;
  fg_state_device(0, &u0);
  unsigned ndev = u0.ndevices;
  unsigned mask = (1u << ndev) - 1;
  if (ids) {
    if (parse_ids(ids, &mask) != 0) {
      fprintf(stderr, "Invalid device ID '%s': want an index or a list like 0,2\n", ids);
      return 2;
    }
    if (mask >> ndev) { /* nvidia-smi: an index that is not there */
      fprintf(stderr, "No devices were found\n");
      return 6;
    }
  }
  if (lose) {
    unsigned m;
    if (parse_ids(lose, &m) != 0 || (m & (m - 1)) || (m >> ndev)) {
      fprintf(stderr, "--fake-lose-device=%s: want one device index below %u\n", lose, ndev);
      return 2;
    }
    for (unsigned d = 0; d < ndev; d++)
      if (m & (1u << d))
        fg_state_set_lost(d);
    return 0;
  }
  unsigned first = 0, last = ndev;
#define SKIP_(d)             \
  if (!(mask & (1u << (d)))) \
  continue

  if (list) {
    for (unsigned d = first; d < last; d++) {
      SKIP_(d);
      char uuid[64];
      uuid_of(d, uuid, sizeof uuid);
      printf("GPU %u: %s (UUID: %s)\n", d, NAME, uuid);
    }
    return 0;
  }

  if (!query_gpu && !query_apps) {
    for (unsigned d = first; d < last; d++) {
      SKIP_(d);
      fg_device_usage u;
      fg_state_device(d, &u);
      if (u.lost) {
        printf("GPU %u: %s  [GPU is lost]\n", d, NAME);
        continue;
      }
      printf("GPU %u: %s  %llu MiB / %llu MiB used\n", d, NAME,
             (unsigned long long)(u.used_bytes / FG_MIB),
             (unsigned long long)(u.total_bytes / FG_MIB));
      fg_proc_usage procs[FG_MAX_PROCS];
      unsigned n = 0;
      fg_state_procs(d, procs, FG_MAX_PROCS, &n);
      for (unsigned i = 0; i < n && i < FG_MAX_PROCS; i++)
        printf("  pid %d  %llu MiB\n", (int)procs[i].pid,
               (unsigned long long)(procs[i].used_bytes / FG_MIB));
      if (n == 0)
        printf("  No running processes found\n");
    }
    return 0;
  }

  if (!format || strncmp(format, "csv", 3) != 0) {
    fprintf(stderr, "Option --format=csv is required with --query-gpu/--query-compute-apps.\n");
    return 2;
  }
  int header = !strstr(format, "noheader"), units = !strstr(format, "nounits");
  const field *q[MAX_QUERY];
  if (query_gpu) {
    int n = parse_query(query_gpu, gpu_fields, NFIELDS(gpu_fields), q);
    if (n <= 0)
      return 2;
    if (header)
      print_header(q, n);
    for (unsigned d = first; d < last; d++) {
      SKIP_(d);
      fg_device_usage u;
      fg_state_device(d, &u);
      gpu_row(d, &u, q, n, units);
    }
  }
  if (query_apps) {
    int n = parse_query(query_apps, app_fields, NFIELDS(app_fields), q);
    if (n <= 0)
      return 2;
    if (header)
      print_header(q, n);
    for (unsigned d = first; d < last; d++) {
      SKIP_(d);
      fg_proc_usage procs[FG_MAX_PROCS];
      unsigned np = 0;
      fg_state_procs(d, procs, FG_MAX_PROCS, &np);
      for (unsigned i = 0; i < np && i < FG_MAX_PROCS; i++)
        app_row(d, &procs[i], q, n, units);
    }
  }
  fflush(stdout);
  return 0;
}
