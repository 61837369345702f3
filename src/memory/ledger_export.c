/* Exports of the ledger: JSON, and mem_ledger_write, which picks JSON or the
 * SVG timeline (ledger_svg.c) by the path's extension. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "base/text.h"
#include "memory/internal.h"
#include "memory/ledger_internal.h"

int mem_ledger_write_json(mem_ledger *l, FILE *f) {
  if (!l || !f)
    return ebb_seterr(EBB_EINVAL, "mem_ledger_write_json: ledger and stream are required");
  ledger_snap s;
  int rc = mem__ledger_snapshot(l, &s);
  if (rc)
    return rc;
  fprintf(f, "{\"device\":");
  base_write_json_str(f, s.device);
  fprintf(f, ",\"t0_ns\":%" PRIu64 ",\"dropped\":%" PRIu64 ",\"owners\":[", s.t0, s.dropped);
  int first = 1;
  for (size_t i = 0; i < s.nnames; i++)
    if (s.names[i]) {
      fprintf(f, "%s{\"id\":%zu,\"name\":", first ? "" : ",", i);
      base_write_json_str(f, s.names[i]);
      fputc('}', f);
      first = 0;
    }
  fprintf(f, "],\"events\":[");
  for (size_t i = 0; i < s.n; i++) {
    const mem_ledger_event *e = &s.ev[i];
    fprintf(f, "%s\n{\"t_ns\":%" PRIu64 ",\"kind\":\"%s\"", i ? "," : "", e->t_ns - s.t0,
            mem_ledger_kind_name(e->kind));
    if (e->kind == EBB_EV_MARK) {
      fprintf(f, ",\"label\":");
      base_write_json_str(f, e->label);
    } else if (e->owner_id) {
      fprintf(f, ",\"owner\":");
      base_write_json_str(f, e->label);
    }
    fprintf(f,
            ",\"addr\":%" PRIu64 ",\"bytes\":%" PRIu64 ",\"owner_bytes\":%" PRIu64
            ",\"reserved\":%" PRIu64 ",\"allocated\":%" PRIu64 "}",
            e->addr, e->bytes, e->owner_bytes, e->reserved, e->allocated);
  }
  fprintf(f, "]}\n");
  mem__ledger_snap_free(&s);
  return ferror(f) ? ebb_seterr(EBB_EIO, "ledger: writing JSON failed") : 0;
}

int mem_ledger_write(mem_ledger *l, const char *path) {
  if (!l || !path)
    return ebb_seterr(EBB_EINVAL, "mem_ledger_write: ledger and path are required");
  size_t n = strlen(path);
  int svg = n >= 4 && strcmp(path + n - 4, ".svg") == 0;
  int json = n >= 5 && strcmp(path + n - 5, ".json") == 0;
  if (!svg && !json)
    return ebb_seterr(EBB_EINVAL, "%s: a timeline file must end in .svg or .json", path);
  FILE *f = fopen(path, "w");
  if (!f)
    return ebb_seterr(EBB_EIO, "%s: cannot write: %s", path, strerror(errno));
  int rc = svg ? mem_ledger_write_svg(l, f, NULL) : mem_ledger_write_json(l, f);
  if (fclose(f) && !rc)
    rc = ebb_seterr(EBB_EIO, "%s: cannot write: %s", path, strerror(errno));
  return rc;
}
