#include "script/tree.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"

const char *const lp_script_tree_folders[] = {"policies", "providers", "sim", NULL};

typedef struct path_list {
  char **items;
  size_t count;
} path_list;

static void path_list_add(path_list *l, char *path) {
  l->items = lp_xrealloc(l->items, (l->count + 1) * sizeof *l->items);
  l->items[l->count++] = path;
}

static int compare_paths(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Collects files ending in .lua (files != NULL) and/or directories (dirs != NULL) under dir. */
static void walk(const char *dir, path_list *files, path_list *dirs, int depth) {
  if (depth > 16) return; /* a symlink loop or an absurd tree; scripts never nest this deep */
  DIR *d = opendir(dir);
  if (!d) return;
  if (dirs) path_list_add(dirs, lp_xstrdup(dir));
  path_list children = {0};
  struct dirent *ent;
  while ((ent = readdir(d))) {
    if (ent->d_name[0] == '.') continue; /* ., .., and ConfigMap's ..data bookkeeping */
    path_list_add(&children, lp_xasprintf("%s/%s", dir, ent->d_name));
  }
  closedir(d);
  if (children.count) qsort(children.items, children.count, sizeof *children.items, compare_paths);
  for (size_t i = 0; i < children.count; i++) {
    char *path = children.items[i];
    struct stat st;
    if (stat(path, &st) != 0) {
      free(path);
      continue;
    }
    size_t len = strlen(path);
    if (S_ISDIR(st.st_mode)) {
      walk(path, files, dirs, depth + 1);
      free(path);
    } else if (files && S_ISREG(st.st_mode) && len > 4 && strcmp(path + len - 4, ".lua") == 0) {
      path_list_add(files, path);
    } else {
      free(path);
    }
  }
  free(children.items);
}

static char *module_name(const char *root, const char *path) {
  const char *rel = path + strlen(root) + 1;
  size_t len = strlen(rel) - 4; /* drop ".lua" */
  char *name = lp_xstrndup(rel, len);
  size_t n = strlen(name);
  if (n > 5 && strcmp(name + n - 5, "/init") == 0) name[n - 5] = '\0';
  for (char *c = name; *c; c++)
    if (*c == '/') *c = '.';
  return name;
}

void lp_script_tree_list(const char *root, lp_script_files *files) {
  for (const char *const *folder = lp_script_tree_folders; *folder; folder++) {
    char *dir = lp_xasprintf("%s/%s", root, *folder);
    path_list found = {0};
    walk(dir, &found, NULL, 0);
    free(dir);
    files->items = lp_xrealloc(files->items, (files->count + found.count + 1) * sizeof *files->items);
    for (size_t i = 0; i < found.count; i++) {
      files->items[files->count].path = found.items[i];
      files->items[files->count].module = module_name(root, found.items[i]);
      files->count++;
    }
    free(found.items);
  }
}

void lp_script_files_free(lp_script_files *files) {
  for (size_t i = 0; i < files->count; i++) {
    free(files->items[i].path);
    free(files->items[i].module);
  }
  free(files->items);
  files->items = NULL;
  files->count = 0;
}

char **lp_script_tree_dirs(const char *root) {
  path_list dirs = {0};
  path_list_add(&dirs, lp_xstrdup(root));
  for (const char *const *folder = lp_script_tree_folders; *folder; folder++) {
    char *dir = lp_xasprintf("%s/%s", root, *folder);
    walk(dir, NULL, &dirs, 0);
    free(dir);
  }
  path_list_add(&dirs, NULL);
  return dirs.items;
}

void lp_script_tree_free_dirs(char **dirs) {
  for (char **d = dirs; d && *d; d++) free(*d);
  free(dirs);
}

static uint64_t fnv1a(uint64_t h, const void *data, size_t len) {
  const unsigned char *p = data;
  for (size_t i = 0; i < len; i++) {
    h ^= p[i];
    h *= 0x100000001b3ULL;
  }
  return h;
}

uint64_t lp_layers_digest(const char *const *layers) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (const char *const *layer = layers; *layer; layer++) {
    lp_script_files files = {0};
    lp_script_tree_list(*layer, &files);
    for (size_t i = 0; i < files.count; i++) {
      h = fnv1a(h, files.items[i].path, strlen(files.items[i].path) + 1);
      FILE *f = fopen(files.items[i].path, "rb");
      if (!f) continue;
      char chunk[8192];
      size_t n;
      while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) h = fnv1a(h, chunk, n);
      fclose(f);
    }
    h = fnv1a(h, "\0layer", 6);
    lp_script_files_free(&files);
  }
  return h;
}

const char *lp_default_scripts_dir(void) {
  static char exe[4096];
  const char *env = getenv("LUAPROV_DEFAULT_SCRIPTS");
  if (env && *env) return env;
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) {
    exe[n] = '\0';
    size_t build_len = strlen(LUAPROV_BUILD_DIR);
    if (strncmp(exe, LUAPROV_BUILD_DIR, build_len) == 0 && exe[build_len] == '/')
      return LUAPROV_SOURCE_SCRIPTS;
  }
  struct stat st;
  if (stat(LUAPROV_INSTALLED_SCRIPTS "/policies", &st) == 0 && S_ISDIR(st.st_mode))
    return LUAPROV_INSTALLED_SCRIPTS;
  return LUAPROV_SOURCE_SCRIPTS;
}
