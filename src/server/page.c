/* Serves the embedded page (page.h). */
#include "server/page.h"

#include <stdio.h>
#include <string.h>

static const char *type_of(const char *name) {
  const char *dot = strrchr(name, '.');
  if (!dot)
    return "application/octet-stream";
  if (!strcmp(dot, ".html"))
    return "text/html; charset=utf-8";
  if (!strcmp(dot, ".js"))
    return "text/javascript; charset=utf-8";
  if (!strcmp(dot, ".css"))
    return "text/css; charset=utf-8";
  if (!strcmp(dot, ".svg"))
    return "image/svg+xml";
  return "application/octet-stream";
}

enum MHD_Result ebb_page_serve(struct MHD_Connection *c, const char *name) {
  for (const ebb_page_asset *a = ebb_page_assets; a->name; a++) {
    if (strcmp(a->name, name))
      continue;
    struct MHD_Response *r =
        MHD_create_response_from_buffer(a->size, (void *)a->data, MHD_RESPMEM_PERSISTENT);
    MHD_add_response_header(r, "Content-Type", type_of(name));
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    /* the page takes nothing from anywhere but this server */
    MHD_add_response_header(r, "Content-Security-Policy",
                            "default-src 'self'; style-src 'self' 'unsafe-inline'; "
                            "img-src 'self' data:");
    enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return ret;
  }
  char msg[512];
  snprintf(msg, sizeof msg,
           "{\"error\":{\"code\":\"not_found\",\"message\":\"no page file '%.200s' (the page is "
           "at /)\"}}\n",
           strchr(name, '"') || strchr(name, '\\') ? "?" : name);
  struct MHD_Response *r =
      MHD_create_response_from_buffer(strlen(msg), msg, MHD_RESPMEM_MUST_COPY);
  MHD_add_response_header(r, "Content-Type", "application/json");
  enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_NOT_FOUND, r);
  MHD_destroy_response(r);
  return ret;
}
