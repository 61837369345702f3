/* Serves the embedded page (page.h). */
#include "server/page.h"

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

const srv_page_asset *srv_page_find(const char *name) {
  for (const srv_page_asset *a = srv_page_assets; a->name; a++)
    if (!strcmp(a->name, name))
      return a;
  return NULL;
}

enum MHD_Result srv_page_send(struct MHD_Connection *c, const srv_page_asset *a) {
  struct MHD_Response *r =
      MHD_create_response_from_buffer(a->size, (void *)a->data, MHD_RESPMEM_PERSISTENT);
  if (!r)
    return MHD_NO;
  MHD_add_response_header(r, "Content-Type", type_of(a->name));
  MHD_add_response_header(r, "Cache-Control", "no-cache");
  /* the page takes nothing from anywhere but this server, and no other
   * site may frame it (a framed page could be clicked through) */
  MHD_add_response_header(r, "Content-Security-Policy",
                          "default-src 'self'; style-src 'self' 'unsafe-inline'; "
                          "img-src 'self' data:; frame-ancestors 'none'");
  MHD_add_response_header(r, "X-Frame-Options", "DENY");
  enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, r);
  MHD_destroy_response(r);
  return ret;
}
