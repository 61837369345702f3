/* One line per built-in stage: EBB_BUILTIN(id) for `const ebb_stage stg_stage_<id>`.
 * No include guard: builtin.c includes it twice with different EBB_BUILTIN. */
EBB_BUILTIN(decode)
EBB_BUILTIN(separate)
EBB_BUILTIN(transcribe)
EBB_BUILTIN(align)
EBB_BUILTIN(pitch)
EBB_BUILTIN(export)
EBB_BUILTIN(synthetic)
