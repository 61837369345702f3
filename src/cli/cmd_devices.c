/* `ebb devices`: every device ebb can use, the CPU device always last.
 * `--device cpu` lists only the CPU device and never loads the driver. */
#include <stdio.h>
#include <string.h>

#include "base/text.h"
#include "cli/commands.h"
#include "device/device.h"

static void devices_usage(FILE *f) {
  fprintf(f, "usage: ebb devices [--device auto|cpu|cuda|cuda:N] [--json]\n\n"
             "Lists the devices ebb can use: index, name, total and free memory,\n"
             "compute capability, VMM support and the libcuda it was found through,\n"
             "then the CPU device, which is always available. With no GPU it says why\n"
             "and exits 0. Probing loads the driver (cuInit) but creates no context.\n\n"
             "  --device SPEC  only this device; `cpu` never loads the CUDA driver\n"
             "  --json         one JSON object instead of text\n");
}

static void fmt_mem(uint64_t b, char *buf, size_t len) {
  if (b >= (1ull << 30))
    snprintf(buf, len, "%.2f GiB", (double)b / (double)(1ull << 30));
  else
    snprintf(buf, len, "%llu MiB", (unsigned long long)(b >> 20));
}


typedef struct cpu_info {
  int ok;
  char name[128];
  uint64_t total, free_bytes;
} cpu_info;

static void get_cpu(cpu_info *c) {
  memset(c, 0, sizeof *c);
  dev_device *d;
  if (dev_open("cpu", &d))
    return;
  dev_meminfo mi;
  if (dev_mem_info(d, &mi) == 0) {
    c->total = mi.total_bytes;
    c->free_bytes = mi.free_bytes;
  }
  snprintf(c->name, sizeof c->name, "%s", dev_name(d));
  c->ok = 1;
  dev_close(d);
}

static void print_text(const dev_probe *p, int want, const cpu_info *cpu, int show_cuda,
                       int show_cpu) {
  char a[32], b[32];
  if (show_cuda) {
    if (!p->driver_loaded) {
      printf("no CUDA device: %s; the CPU device is available\n", p->why);
    } else {
      for (int i = 0; i < p->ndevices; i++) {
        const dev_probe_device *d = &p->devices[i];
        if (want >= 0 && d->index != want)
          continue;
        fmt_mem(d->total_bytes, a, sizeof a);
        if (p->nvml_loaded && d->free_bytes)
          fmt_mem(d->free_bytes, b, sizeof b);
        else
          snprintf(b, sizeof b, "unknown (no NVML)");
        printf("cuda:%d  %s\n", d->index, d->name);
        printf("    memory: %s total, %s free\n", a, b);
        printf("    compute capability %d.%d, VMM %s\n", d->cc_major, d->cc_minor,
               d->vmm ? "yes" : "no");
        if (d->uuid[0])
          printf("    uuid %s\n", d->uuid);
        printf("    found through %s (driver %d)\n", p->driver_path, p->driver_version);
      }
      if (want >= p->ndevices)
        printf("no CUDA device cuda:%d: the driver reports %d\n", want, p->ndevices);
    }
  }
  if (show_cpu && cpu->ok) {
    fmt_mem(cpu->total, a, sizeof a);
    fmt_mem(cpu->free_bytes, b, sizeof b);
    printf("cpu     %s\n", cpu->name);
    printf("    memory: %s total, %s free (host memory)\n", a, b);
  }
}

static void print_json(const dev_probe *p, int want, const cpu_info *cpu, int show_cuda,
                       int show_cpu) {
  printf("{\"driver\":{\"loaded\":%s,\"path\":", p->driver_loaded ? "true" : "false");
  base_write_json_str(stdout, show_cuda ? p->driver_path : "");
  printf(",\"version\":%d,\"why\":", p->driver_version);
  base_write_json_str(stdout, show_cuda ? p->why : "not probed (--device cpu)");
  printf("},\"nvml\":{\"loaded\":%s,\"driver\":", p->nvml_loaded ? "true" : "false");
  base_write_json_str(stdout, p->nvml_driver);
  printf("},\"devices\":[");
  int first = 1;
  for (int i = 0; show_cuda && p->driver_loaded && i < p->ndevices; i++) {
    const dev_probe_device *d = &p->devices[i];
    if (want >= 0 && d->index != want)
      continue;
    printf("%s{\"device\":\"cuda:%d\",\"index\":%d,\"name\":", first ? "" : ",", d->index,
           d->index);
    base_write_json_str(stdout, d->name);
    printf(",\"uuid\":");
    base_write_json_str(stdout, d->uuid);
    printf(",\"total_bytes\":%llu,\"free_bytes\":", (unsigned long long)d->total_bytes);
    if (p->nvml_loaded && d->free_bytes)
      printf("%llu", (unsigned long long)d->free_bytes);
    else
      printf("null");
    printf(",\"compute_capability\":\"%d.%d\",\"vmm\":%s,\"found_through\":", d->cc_major,
           d->cc_minor, d->vmm ? "true" : "false");
    base_write_json_str(stdout, p->driver_path);
    printf("}");
    first = 0;
  }
  if (show_cpu && cpu->ok) {
    printf("%s{\"device\":\"cpu\",\"index\":-1,\"name\":", first ? "" : ",");
    base_write_json_str(stdout, cpu->name);
    printf(",\"total_bytes\":%llu,\"free_bytes\":%llu,\"vmm\":true,\"found_through\":\"host "
           "memory\"}",
           (unsigned long long)cpu->total, (unsigned long long)cpu->free_bytes);
  }
  printf("]}\n");
}

int cli_cmd_devices(int argc, char **argv) {
  const char *spec = "auto";
  int json = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      devices_usage(stdout);
      return EBB_EXIT_OK;
    } else if (!strcmp(argv[i], "--json")) {
      json = 1;
    } else if (!strcmp(argv[i], "--device") && i + 1 < argc) {
      spec = argv[++i];
    } else if (!strncmp(argv[i], "--device=", 9)) {
      spec = argv[i] + 9;
    } else {
      fprintf(stderr, "ebb devices: unknown option '%s'\n", argv[i]);
      devices_usage(stderr);
      return EBB_EXIT_USAGE;
    }
  }
  int want = -1, show_cuda = 1, show_cpu = 1;
  if (!strcmp(spec, "cpu")) {
    show_cuda = 0;
  } else if (!strcmp(spec, "cuda")) {
    want = 0;
    show_cpu = 0;
  } else if (!strncmp(spec, "cuda:", 5) && spec[5] >= '0' && spec[5] <= '9' &&
             strspn(spec + 5, "0123456789") == strlen(spec + 5)) {
    sscanf(spec + 5, "%d", &want);
    show_cpu = 0;
  } else if (strcmp(spec, "auto")) {
    fprintf(stderr, "ebb devices: bad device '%s': expected auto, cpu, cuda or cuda:N\n", spec);
    return EBB_EXIT_USAGE;
  }
  dev_probe p;
  memset(&p, 0, sizeof p);
  if (show_cuda)
    dev_device_probe(&p);
  cpu_info cpu;
  if (show_cpu)
    get_cpu(&cpu);
  else
    memset(&cpu, 0, sizeof cpu);
  if (json)
    print_json(&p, want, &cpu, show_cuda, show_cpu);
  else
    print_text(&p, want, &cpu, show_cuda, show_cpu);
  return EBB_EXIT_OK;
}
