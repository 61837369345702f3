/* The error table's other columns (include/ebb/error_codes.h), for ebb's own
 * programs: the exit status of `ebb`, the server's HTTP status and wire
 * name, the worker protocol's code by name. Not part of libebb's API. */
#ifndef EBB_BASE_ERROR_H
#define EBB_BASE_ERROR_H

#include "ebb/error.h"

/* --- "error.c" */
/* The code named "EBB_EOOM"; fallback for a name not in the table. */
int base_errcode(const char *name, int fallback);
/* The table's columns for a code; an unknown code reads as EBB_ESTAGE. */
int base_exit_status(int code); /* 0, 1 or 2 */
unsigned base_http_status(int code);
const char *base_wire_name(int code); /* "not_found" */

#endif
