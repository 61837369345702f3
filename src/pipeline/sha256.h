/* SHA-256 (FIPS 180-4), for the stage result cache: the cache key and the
 * checksum that detects a corrupt entry. Small and self-contained. */
#ifndef EBB_PIPELINE_SHA256_H
#define EBB_PIPELINE_SHA256_H

#include <stddef.h>
#include <stdint.h>

typedef struct pl_sha256 {
  uint32_t h[8];
  uint64_t len; /* bytes hashed so far */
  uint8_t buf[64];
  size_t nbuf;
} pl_sha256;

void pl_sha256_init(pl_sha256 *s);
void pl_sha256_update(pl_sha256 *s, const void *data, size_t n);
void pl_sha256_final(pl_sha256 *s, uint8_t out[32]);
/* out: 65 bytes (64 hex digits + NUL). */
void pl_sha256_hex(const uint8_t digest[32], char out[65]);

#endif
