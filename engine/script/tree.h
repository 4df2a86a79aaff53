/* The on-disk script tree: <root>/policies/... and <root>/providers/... (docs/hot-reload.md). Lists the Lua
 * files of a tree with their module names, and fingerprints a stack of trees so that a reload with
 * no change can be skipped. */
#ifndef LUAPROV_SCRIPT_TREE_H
#define LUAPROV_SCRIPT_TREE_H

#include <stddef.h>
#include <stdint.h>

typedef struct lp_script_file {
  char *path;   /* "<root>/policies/drift.lua" */
  char *module; /* "policies.drift" */
} lp_script_file;

typedef struct lp_script_files {
  lp_script_file *items;
  size_t count;
} lp_script_files;

/* The folders of a script tree that hold scripts, in the order they are listed. */
extern const char *const lp_script_tree_folders[];

/* Appends every *.lua file under root's script folders (recursively, sorted by path) to files.
 * Unreadable folders are skipped. The caller frees with lp_script_files_free. */
void lp_script_tree_list(const char *root, lp_script_files *files);
void lp_script_files_free(lp_script_files *files);

/* Lists the directories under root's script folders (those included), for the file watcher.
 * NULL-terminated array of malloc'd strings; free with lp_script_tree_free_dirs. */
char **lp_script_tree_dirs(const char *root);
void lp_script_tree_free_dirs(char **dirs);

/* 64-bit FNV-1a over the relative path and content of every script file of every layer, in order.
 * Layers is NULL-terminated. Files that cannot be read contribute their path only. */
uint64_t lp_layers_digest(const char *const *layers);

/* The default script tree: $LUAPROV_DEFAULT_SCRIPTS when set; the source tree when this binary runs
 * from its build directory; else the tree installed with the binary (<datadir>/luaprov), falling
 * back to the source tree when that is missing. The returned string is static. */
const char *lp_default_scripts_dir(void);

#endif
