/* Writing text that other programs parse: JSON strings and XML text, always
 * valid UTF-8 (bytes that are not — a name cut mid-character by a fixed-size
 * buffer, a file name in another encoding — become U+FFFD); and byte counts
 * as people read them in messages. */
#ifndef EBB_BASE_TEXT_H
#define EBB_BASE_TEXT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* s as a quoted JSON string (NULL: ""). */
void base_write_json_str(FILE *f, const char *s);
/* s escaped for XML text and attribute values (NULL: nothing); control
 * characters are dropped. */
void base_write_xml_text(FILE *f, const char *s);
/* "1.50 GiB" / "300.0 MiB" for messages (written into buf, returned). */
const char *base_fmt_bytes(uint64_t bytes, char *buf, size_t len);
/* "1.5 GiB", "64 MiB", "12 KiB", "100 B": a size in the leak report, the
 * allocator's messages and the timeline. */
void base_fmt_size(char *buf, size_t n, uint64_t b);

#endif
