/* Directories (fs.h). */
#include "base/fs.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ebb/error.h"

int base_mkdirs(const char *dir, unsigned mode, const char *what) {
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s", dir);
  for (char *q = tmp + (tmp[0] != '\0');; q++)
    if (*q == '/' || !*q) {
      char c = *q;
      *q = '\0';
      if (mkdir(tmp, (mode_t)mode) != 0 && errno != EEXIST) {
        int e = errno;
        ebb_seterr(EBB_EIO, "%s %s: %s", what, tmp, strerror(e));
        errno = e;
        return EBB_EIO;
      }
      if (!(*q = c))
        return 0;
    }
}

int base_rm_tree(const char *path) {
  struct stat st;
  if (lstat(path, &st) != 0)
    return 0;
  if (!S_ISDIR(st.st_mode))
    return unlink(path);
  DIR *d = opendir(path);
  struct dirent *e;
  while (d && (e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
      continue;
    char sub[4500];
    snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
    base_rm_tree(sub);
  }
  if (d)
    closedir(d);
  return rmdir(path);
}
