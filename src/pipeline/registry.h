/* The stage registry: the built-in stages (src/stages/builtin.h) and plugin
 * stages loaded from .so files with dlopen. A plugin exports
 * ebb_plugin_init (EBB_PLUGIN_INIT_SYMBOL), gets the host function table and
 * returns its stages; it never links against ebb's symbols.
 *
 * Plugins are found in directories: every "*.so" file in each one (a path
 * that names a .so file directly is loaded as is). ebb run/stages/pipelines
 * use the config's "plugin_dirs" and EBB_PLUGIN_PATH (colon-separated).
 * Any plugin that cannot be used is an error naming its file: dlopen
 * failure, no ebb_plugin_init, init failing, a stage built for another ABI
 * version, a stage missing load/run/unload, a name already registered. */
#ifndef EBB_PIPELINE_REGISTRY_H
#define EBB_PIPELINE_REGISTRY_H

#include <jansson.h>
#include <stddef.h>

#include "pipeline/stage_api.h"

typedef struct pl_registry pl_registry;

/* A registry holding the built-in stages. *out owned by the caller. */
int pl_registry_create(pl_registry **out);
/* dlclose's the plugins. Stages from it must no longer be loaded. NULL: no-op. */
void pl_registry_destroy(pl_registry *r);

/* Loads one plugin file. */
int pl_registry_load_plugin(pl_registry *r, const char *path);
/* Loads every *.so in dir (sorted by name), or dir itself if it is a file. */
int pl_registry_load_dir(pl_registry *r, const char *dir);
/* Loads the directories of EBB_PLUGIN_PATH (colon-separated; empty parts are
 * skipped). No variable: nothing. */
int pl_registry_load_env(pl_registry *r);

/* The stage named name or NULL. *origin (may be NULL): "built-in" or the
 * plugin's path; borrowed from the registry. */
const ebb_stage *pl_registry_find(const pl_registry *r, const char *name, const char **origin);
size_t pl_registry_count(const pl_registry *r);
const ebb_stage *pl_registry_at(const pl_registry *r, size_t i, const char **origin);

/* Checks options (a JSON object or NULL) against st->options_schema: every
 * name must be in the schema and of its type ("number" takes integers too).
 * *merged (new reference, caller decrefs) is the schema's defaults overlaid
 * with options. The message names the stage and the option; where is a
 * prefix for it ("config.json: pipeline 'p' stage 'a'"), may be NULL. */
int pl_stage_validate_options(const ebb_stage *st, const json_t *options, const char *where,
                              json_t **merged);

/* The stage's declared needs (its optional `estimate`) for options (the
 * merged options, JSON text; NULL: its defaults) and the job's items so far
 * (NULL: no input). 0 and *out filled (out->size set by the caller);
 * EBB_EUNSUPPORTED when the stage declares none (an older struct, or no
 * estimate); the stage's error otherwise. */
int pl_stage_estimate(const ebb_stage *st, const char *options, const ebb_items *in,
                      ebb_estimate *out);

/* The stage's work estimate (its optional `work`) for options (the merged
 * options, JSON text; NULL: its defaults) on input_s seconds of input (0:
 * unknown) at input_rate Hz (the file's; 0: unknown). 0 and *out filled (out->size set by the caller); EBB_EUNSUPPORTED
 * when the stage gives none (an older struct, or no work); the stage's error
 * otherwise. */
int pl_stage_work(const ebb_stage *st, const char *options, double input_s, uint32_t input_rate,
                  ebb_work *out);

#endif
