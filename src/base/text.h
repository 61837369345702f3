/* Writing text that other programs parse: JSON strings and XML text, always
 * valid UTF-8 (bytes that are not — a name cut mid-character by a fixed-size
 * buffer, a file name in another encoding — become U+FFFD). */
#ifndef EBB_BASE_TEXT_H
#define EBB_BASE_TEXT_H

#include <stdio.h>

/* The length (1-4) of the valid UTF-8 sequence at p, or 0 if it is not one. */
int ebb_utf8_len(const unsigned char *p);
/* s as a quoted JSON string (NULL: ""). */
void ebb_write_json_str(FILE *f, const char *s);
/* s escaped for XML text and attribute values (NULL: nothing); control
 * characters are dropped. */
void ebb_write_xml_text(FILE *f, const char *s);

#endif
