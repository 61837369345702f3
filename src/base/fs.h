/* Directories: made with their parents, removed with what they hold. */
#ifndef EBB_BASE_FS_H
#define EBB_BASE_FS_H

/* mkdir -p dir with mode (existing directories are fine). On failure
 * ebb_seterr(EBB_EIO, "WHAT PATH: strerror"), PATH the first component that
 * could not be made, and errno left as mkdir set it. */
int base_mkdirs(const char *dir, unsigned mode, const char *what);
/* rm -rf path without following symbolic links: 0, or the last unlink or
 * rmdir's -1 (0 when path does not exist). */
int base_rm_tree(const char *path);

#endif
