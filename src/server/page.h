/* GET / and GET /page/NAME: the live page, plain HTML, CSS and JavaScript
 * from src/server/page/, compiled into the binary at build time
 * (cmake/EmbedFiles.cmake writes page_assets.c). Nothing is fetched from
 * anywhere else: the page reads /v1/events and calls the API. */
#ifndef EBB_SERVER_PAGE_H
#define EBB_SERVER_PAGE_H

#include <microhttpd.h>
#include <stddef.h>

typedef struct srv_page_asset {
  const char *name; /* file name under src/server/page/ */
  const unsigned char *data;
  size_t size;
} srv_page_asset;
/* Ends with {NULL, NULL, 0}. (the generated page_assets.c) */
extern const srv_page_asset srv_page_assets[];

/* The asset named, or NULL. */
const srv_page_asset *srv_page_find(const char *name);
/* Answers 200 with the asset. */
enum MHD_Result srv_page_send(struct MHD_Connection *c, const srv_page_asset *a);

#endif
