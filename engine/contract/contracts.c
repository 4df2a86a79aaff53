/* Validators for the policy and provider-mapping contracts. They run inside the script host's
 * protected calls on the generation being loaded, so they may raise; every problem names the
 * script file and the best line we can find. */
#include "contract/contracts.h"

#include <ctype.h>
#include <lauxlib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "contract/nodeclass_desc.h"
#include "contract/settings.h"
#include "contract/shapes.h"
#include "core/buf.h"
#include "core/error.h"
#include "json.h"
#include "script/call.h"

typedef struct field_rule {
  const char *name;
  int type; /* LUA_TFUNCTION, LUA_TSTRING, LUA_TTABLE (a list) */
  int required;
  const char *params; /* for the hint: "(nodeclaim, nodeclass, instance, ctx)"; NULL for strings */
} field_rule;

/* Case-insensitive edit distance, capped: what "did you mean" needs, not more. */
static size_t distance(const char *a, const char *b) {
  size_t n = strlen(a), m = strlen(b);
  if (n > 63 || m > 63) return 64;
  size_t row[64];
  for (size_t j = 0; j <= m; j++) row[j] = j;
  for (size_t i = 1; i <= n; i++) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= m; j++) {
      size_t up = row[j];
      size_t cost = tolower((unsigned char)a[i - 1]) != tolower((unsigned char)b[j - 1]);
      size_t best = diag + cost;
      if (row[j] + 1 < best) best = row[j] + 1;
      if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
      row[j] = best;
      diag = up;
    }
  }
  return row[m];
}

const char *lp_contract_closest(const char *word, const char *const *candidates) {
  const char *best = NULL;
  size_t best_d = 3; /* at most two edits: a typo, not another word */
  for (; word && *candidates; candidates++) {
    size_t d = distance(word, *candidates);
    if (d < best_d && strcmp(word, *candidates) != 0) best = *candidates, best_d = d;
  }
  return best;
}

int lp_contract_function_line(lp_generation *g, const char *module, const char *function, char **file) {
  *file = NULL;
  lua_State *L = lp_generation_state(g);
  int top = lua_gettop(L), line = 0;
  lp_generation_push_module(g, module);
  if (lua_istable(L, -1) && lua_getfield(L, -1, function) == LUA_TFUNCTION) {
    lua_Debug ar;
    if (lua_getinfo(L, ">S", &ar) && ar.source[0] == '@' && ar.linedefined > 0) {
      *file = lp_xstrdup(ar.source + 1);
      line = ar.linedefined;
    }
  }
  lua_settop(L, top);
  if (!*file) {
    const char *f = lp_generation_module_file(g, module);
    if (f) *file = lp_xstrdup(f);
  }
  return line;
}

lp_error *lp_policy_answer_error(lp_generation *g, const char *module, const char *function,
                                 const char *problem) {
  char *file = NULL;
  int line = lp_contract_function_line(g, module, function, &file);
  lp_error *e = file && line ? lp_error_new("Contract", "%s:%d: %s", file, line, problem)
                : file       ? lp_error_new("Contract", "%s: %s", file, problem)
                             : lp_error_new("Contract", "%s", problem);
  if (file) lp_error_at(e, file, line); /* the fields too, for logs and eval */
  free(file);
  return e;
}

#define MAX_DRIFT_REASONS 32
/* A reason names a NodePool annotation, drift-unresolvable.luaprov.io/<reason>, whose part after the '/'
 * Kubernetes caps at 63 characters: a longer one would make every write of that record fail. */
#define MAX_DRIFT_REASON_CHARS 63

char *lp_drift_reason_problem(const char *reason, const json_t *mapping_reasons) {
  const char *known[MAX_DRIFT_REASONS + 2] = {"NodeClassDrift"};
  size_t n = 1, i;
  const json_t *r;
  lp_buf list = {0};
  lp_buf_puts(&list, "NodeClassDrift");
  json_array_foreach(mapping_reasons, i, r) {
    if (!json_is_string(r) || n > MAX_DRIFT_REASONS) continue;
    known[n++] = json_string_value(r);
    lp_buf_printf(&list, ", %s", json_string_value(r));
  }
  known[n] = NULL;
  const char *s = reason;
  int camel = !*s || (*s >= 'A' && *s <= 'Z');
  for (; camel && *s; s++)
    camel = (*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9');
  const char *near = lp_contract_closest(reason, known);
  char *problem = NULL;
  if (near)
    problem = lp_xasprintf("is_drifted returned \"%s\", which is not a drift reason; did you mean \"%s\"? "
                           "(the known reasons are %s; a reason of your own must not be one typo away "
                           "from them)",
                           reason, near, lp_buf_cstr(&list));
  else if (!camel)
    problem = lp_xasprintf("is_drifted returned \"%s\"; a reason is \"\" or a CamelCase word like "
                           "\"NodeClassDrift\" (it becomes a Kubernetes condition reason)",
                           reason);
  else if (strlen(reason) > MAX_DRIFT_REASON_CHARS)
    problem = lp_xasprintf("is_drifted returned \"%s\"; a reason is at most %d characters (it names a "
                           "NodePool annotation, drift-unresolvable.luaprov.io/<reason>)",
                           reason, MAX_DRIFT_REASON_CHARS);
  lp_buf_free(&list);
  return problem;
}

/* The line of the module's last top-level `return`: where the exported table is handed back, so the
 * place to add a missing field. 0 when the file cannot be read. */
static int return_line(const char *file) {
  FILE *f = fopen(file, "r");
  if (!f) return 0;
  char line[1024];
  int n = 0, found = 0;
  while (fgets(line, sizeof line, f)) {
    n++;
    if (strncmp(line, "return", 6) == 0) found = n;
  }
  fclose(f);
  return found ? found : n;
}

static int function_line(lua_State *L, int idx) {
  lua_Debug ar;
  lua_pushvalue(L, idx);
  if (!lua_getinfo(L, ">S", &ar)) return 0;
  return ar.linedefined > 0 ? ar.linedefined : 0;
}

/* "function", "list" or "string": what a rule's field must be, in messages. */
static const char *kind_of(const field_rule *r) {
  return r->type == LUA_TFUNCTION ? "function" : r->type == LUA_TTABLE ? "list" : "string";
}

/* A required field is absent: point at a near-miss key of the table when there is one (a typo in
 * the function's name), else at the return with what to add. */
static void missing_field(lua_State *L, int idx, const char *file, lp_problems *problems,
                          const char *contract, const field_rule *r) {
  const char *kind = kind_of(r);
  const char *const wanted[] = {r->name, NULL};
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    lua_pop(L, 1);
    if (lua_type(L, -1) != LUA_TSTRING) continue;
    const char *key = lua_tostring(L, -1);
    if (lp_contract_closest(key, wanted)) {
      lua_pushvalue(L, -1);
      int line = lua_rawget(L, idx) == LUA_TFUNCTION ? function_line(L, lua_gettop(L)) : return_line(file);
      lua_pop(L, 1);
      lp_problems_add(problems, file, line, "the %s must export %s '%s'; it has '%s' here: did you mean %s?",
                      contract, kind, r->name, key, r->name);
      lua_pop(L, 1);
      return;
    }
  }
  if (r->type == LUA_TFUNCTION)
    lp_problems_add(problems, file, return_line(file),
                    "the %s must export function '%s'; add function M.%s%s to the table returned here",
                    contract, r->name, r->name, r->params);
  else
    lp_problems_add(problems, file, return_line(file),
                    "the %s must export string '%s'; set M.%s = \"...\" in the table returned here", contract,
                    r->name, r->name);
}

static int check_fields(lua_State *L, int idx, const char *file, lp_problems *problems, const char *contract,
                        const field_rule *rules) {
  if (!lua_istable(L, idx)) {
    lp_problems_add(problems, file, return_line(file),
                    "the %s must return a table, not a %s; end the file with 'return M', M holding %s '%s'",
                    contract, luaL_typename(L, idx), rules->type == LUA_TFUNCTION ? "function" : "string",
                    rules->name);
    return 0;
  }
  int ok = 1;
  for (const field_rule *r = rules; r->name; r++) {
    lua_pushstring(L, r->name);
    int t = lua_rawget(L, idx);
    if (t == LUA_TNIL) {
      if (r->required) {
        missing_field(L, idx, file, problems, contract, r);
        ok = 0;
      }
    } else if (t != r->type) {
      int line = t == LUA_TFUNCTION ? function_line(L, lua_gettop(L)) : return_line(file);
      if (r->type == LUA_TFUNCTION)
        lp_problems_add(problems, file, line,
                        "'%s' of the %s must be a function, not a %s; define it as "
                        "function M.%s%s",
                        r->name, contract, lua_typename(L, t), r->name, r->params);
      else if (r->type == LUA_TTABLE)
        lp_problems_add(problems, file, line, "'%s' of the %s must be a list, not a %s; set M.%s = {\"...\"}",
                        r->name, contract, lua_typename(L, t), r->name);
      else
        lp_problems_add(problems, file, line, "'%s' of the %s must be a string, not a %s; set M.%s = \"...\"",
                        r->name, contract, lua_typename(L, t), r->name);
      ok = 0;
    }
    lua_pop(L, 1);
  }
  /* an optional function misspelled is silently never called: say so */
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    lua_pop(L, 1);
    const char *key = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
    int known = 0;
    for (const field_rule *r = rules; key && r->name && !known; r++) known = strcmp(key, r->name) == 0;
    for (const field_rule *r = rules; key && !known && r->name; r++) {
      const char *const wanted[] = {r->name, NULL};
      if (r->required || !lp_contract_closest(key, wanted)) continue;
      lp_problems_add(problems, file, return_line(file),
                      "the %s exports '%s', which the engine never calls; did you mean optional %s '%s'?",
                      contract, key, kind_of(r), r->name);
      ok = 0;
      break;
    }
  }
  return ok;
}

static json_t *field_json(lua_State *L, int idx, const char *name, int *present);

/* The drift_reasons of the CloudProvider mapping, loaded before the policies; NULL without. */
static json_t *mapping_drift_reasons(lua_State *L) {
  lua_getfield(L, LUA_REGISTRYINDEX, LP_GENERATION_LOADED_KEY);
  lua_getfield(L, -1, LUAPROV_CLOUDPROVIDER_MAPPING);
  json_t *reasons = lua_istable(L, -1) ? field_json(L, lua_gettop(L), "drift_reasons", NULL) : NULL;
  lua_pop(L, 2);
  return reasons;
}

/* Pushes a fresh default object of the test kit: kit.<builder>(). [-0, +1, e] */
static void push_kit_default(lua_State *L, const char *builder) {
  lua_getfield(L, LUA_REGISTRYINDEX, LP_GENERATION_KIT_KEY);
  lua_getfield(L, -1, builder);
  lua_remove(L, -2);
  lua_call(L, 0, 1);
}

/* The Lua value at idx as JSON (new reference), NULL when it cannot be encoded. */
static json_t *value_json(lua_State *L, int idx) {
  json_t *out = NULL;
  lp_buf buf = {0};
  lp_error *err = NULL;
  if (lp_json_encode(L, idx, &buf, &err) == 0)
    out = json_loadb(buf.data ? buf.data : "", buf.len, JSON_DECODE_ANY, NULL);
  lp_error_free(err);
  lp_buf_free(&buf);
  return out;
}

/* What a policy function answered, checked as the engine checks it at run time: NULL when fine, else a
 * malloc'd problem. `answer` is the first value as JSON (NULL when it is a function or userdata, which
 * `type_name` then names); the second value stays on the stack at -1 for checks that read it. */
typedef char *(*answer_check)(const char *fn, const json_t *answer, const char *type_name, lua_State *L);

/* Calls FN of the module at idx once, on the test kit's default objects (builders, in order), and
 * reports what check finds wrong with its answer. A raise, including a budget or memory error,
 * propagates to the caller's problem list. Nothing happens when the module lacks FN or the generation
 * skips policy calls (no kit loaded). */
static void call_once(lua_State *L, int idx, const char *file, lp_problems *problems, const char *fn,
                      const char *const *builders, answer_check check) {
  if (lua_getfield(L, idx, fn) != LUA_TFUNCTION) {
    lua_pop(L, 1);
    return;
  }
  if (lua_getfield(L, LUA_REGISTRYINDEX, LP_GENERATION_KIT_KEY) != LUA_TTABLE) { /* no_policy_calls */
    lua_pop(L, 2);
    return;
  }
  lua_pop(L, 1);
  int line = function_line(L, lua_gettop(L));
  int nargs = 0;
  for (; builders[nargs]; nargs++) {
    if (strcmp(builders[nargs], "pods") == 0) { /* a list of one default pod */
      lua_createtable(L, 1, 0);
      push_kit_default(L, "pod");
      lua_rawseti(L, -2, 1);
    } else {
      push_kit_default(L, builders[nargs]);
    }
  }
  lua_call(L, nargs, 2);
  json_t *answer = value_json(L, -2);
  char *problem = check(fn, answer, answer || lua_isnil(L, -2) ? NULL : luaL_typename(L, -2), L);
  json_decref(answer);
  if (problem)
    lp_problems_add(problems, file, line, "%s, called on the test kit's default objects: %s", fn, problem);
  free(problem);
  lua_pop(L, 2);
}

/* A reason string or nil (cloudprovider_drift.c), or nil plus a message ("cannot tell yet"). */
static char *drift_answer(const char *fn, const json_t *answer, const char *type_name, lua_State *L) {
  if (type_name) return lp_xasprintf("%s returned a %s, not a string", fn, type_name);
  json_t *reasons = mapping_drift_reasons(L);
  char *problem = lp_drift_answer_problem(fn, answer, reasons);
  json_decref(reasons);
  return problem;
}

/* A map of tag key to string value (cloudprovider_create.c). */
static char *tags_answer(const char *fn, const json_t *answer, const char *type_name, lua_State *L) {
  (void)fn, (void)L;
  return type_name
             ? lp_xasprintf("build_instance_tags returned a %s, not a map of tag key to string", type_name)
             : lp_tags_answer_problem(answer);
}

/* true, or false and why (cloudprovider_disruption.c). */
static char *disruption_answer(const char *fn, const json_t *answer, const char *type_name, lua_State *L) {
  (void)fn, (void)L;
  if (type_name) return lp_xasprintf("can_disrupt returned a %s, which is neither true nor false", type_name);
  return lp_can_disrupt_answer_problem(answer);
}

static void validate_drift(lua_State *L, int idx, const char *file, lp_problems *problems) {
  /* static_drift(nodeclaim, nodeclass) is optional: when present the engine asks it first, and only
   * fetches the instance for is_drifted when it finds nothing (NodeClassDrift needs no API call). */
  static const field_rule rules[] = {
      {"is_drifted", LUA_TFUNCTION, 1, "(nodeclaim, nodeclass, instance, ctx)"},
      {"static_drift", LUA_TFUNCTION, 0, "(nodeclaim, nodeclass)"},
      {NULL, 0, 0, NULL}};
  if (!check_fields(L, idx, file, problems, "drift policy", rules)) return;
  static const char *const static_args[] = {"nodeclaim", "nodeclass", NULL};
  static const char *const drift_args[] = {"nodeclaim", "nodeclass", "instance", "ctx", NULL};
  call_once(L, idx, file, problems, "static_drift", static_args, drift_answer);
  call_once(L, idx, file, problems, "is_drifted", drift_args, drift_answer);
}

static void validate_tags(lua_State *L, int idx, const char *file, lp_problems *problems) {
  static const field_rule rules[] = {{"build_instance_tags", LUA_TFUNCTION, 1, "(nodeclaim, nodeclass, ctx)"},
                                     {NULL, 0, 0, NULL}};
  static const char *const args[] = {"nodeclaim", "nodeclass", "ctx", NULL};
  if (check_fields(L, idx, file, problems, "tags policy", rules))
    call_once(L, idx, file, problems, "build_instance_tags", args, tags_answer);
}

static void validate_disruption(lua_State *L, int idx, const char *file, lp_problems *problems) {
  static const field_rule rules[] = {{"can_disrupt", LUA_TFUNCTION, 1, "(nodeclaim, node, pods, ctx)"},
                                     {NULL, 0, 0, NULL}};
  static const char *const args[] = {"nodeclaim", "node", "pods", "disruption_ctx", NULL};
  if (check_fields(L, idx, file, problems, "disruption policy", rules))
    call_once(L, idx, file, problems, "can_disrupt", args, disruption_answer);
}

/* Besides the shape, the repair policy's list is checked by calling policies({}): it is cheap, pure
 * by contract, and a wrong entry would otherwise surface only when a node goes bad. The check and its
 * words are the engine's (lp_repair_answer_problem). */
static void validate_repair(lua_State *L, int idx, const char *file, lp_problems *problems) {
  static const field_rule rules[] = {{"policies", LUA_TFUNCTION, 1, "(ctx)"}, {NULL, 0, 0, NULL}};
  if (!check_fields(L, idx, file, problems, "repair policy", rules)) return;
  lua_getfield(L, idx, "policies");
  int line = function_line(L, lua_gettop(L));
  lua_newtable(L);
  lua_call(L, 1, 1);
  json_t *answer = value_json(L, -1);
  char *problem =
      answer || lua_isnil(L, -1) ? lp_repair_answer_problem(answer)
      : lua_istable(L, -1)
          ? lp_xstrdup("policies(ctx) returned a table that cannot be read as data (a function in "
                       "it?); return a list of {condition_type, condition_status, toleration_seconds}")
          : lp_xasprintf("policies(ctx) must return a list of {condition_type, condition_status, "
                         "toleration_seconds}, not a %s",
                         luaL_typename(L, -1));
  if (problem) lp_problems_add(problems, file, line, "%s", problem);
  free(problem);
  json_decref(answer);
  lua_pop(L, 1);
}

/* The line that sets M.<name> in file, else the module's return. */
static int assignment_line(const char *file, const char *name) {
  FILE *f = fopen(file, "r");
  if (!f) return 0;
  char line[1024], want[64];
  snprintf(want, sizeof want, "M.%s =", name);
  int n = 0, found = 0;
  while (!found && fgets(line, sizeof line, f)) {
    n++;
    if (strncmp(line, want, strlen(want)) == 0) found = n;
  }
  fclose(f);
  return found ? found : return_line(file);
}

/* The module's field as JSON (new reference), NULL when absent or not encodable (*present says
 * which, when not NULL). */
static json_t *field_json(lua_State *L, int idx, const char *name, int *present) {
  int t = lua_getfield(L, idx, name);
  if (present) *present = t != LUA_TNIL;
  json_t *out = t != LUA_TNIL ? value_json(L, -1) : NULL;
  lua_pop(L, 1);
  return out;
}

/* What the engine reads from the mapping besides functions (docs/contracts.md#mappings): the node
 * class descriptor (and that a reload does not change it), the settings, the drift reasons. */
static void check_exports(lua_State *L, int idx, const char *file, lp_problems *problems) {
  json_t *nodeclass = field_json(L, idx, "nodeclass", NULL);
  char *problem = lp_nodeclass_desc_problem(nodeclass);
  if (problem)
    lp_problems_add(problems, file, assignment_line(file, "nodeclass"),
                    "the CloudProvider mapping's node class descriptor: %s "
                    "(docs/contracts.md#the-node-class-descriptor)",
                    problem);
  free(problem);
  json_decref(nodeclass);
  int present = 0;
  json_t *settings = field_json(L, idx, "settings", &present);
  problem = present && !settings ? lp_xstrdup("settings cannot be read as data (a function in it?)")
                                 : lp_settings_problem(settings);
  if (problem)
    lp_problems_add(problems, file, assignment_line(file, "settings"),
                    "the CloudProvider mapping's settings: %s (docs/contracts.md#settings)", problem);
  free(problem);
  json_decref(settings);
  json_t *reasons = field_json(L, idx, "drift_reasons", NULL);
  size_t i;
  const json_t *r;
  int bad =
      reasons && !json_is_array(reasons) && !(json_is_object(reasons) && json_object_size(reasons) == 0);
  json_array_foreach(reasons, i, r) {
    const char *s = json_string_value(r);
    bad |= !s || !*s || !(*s >= 'A' && *s <= 'Z') || strlen(s) > MAX_DRIFT_REASON_CHARS;
  }
  if (bad)
    lp_problems_add(problems, file, assignment_line(file, "drift_reasons"),
                    "the CloudProvider mapping's drift_reasons must be a list of CamelCase words of at most "
                    "%d characters like \"NodeClassDrift\" (docs/contracts.md#policies)",
                    MAX_DRIFT_REASON_CHARS);
  json_decref(reasons);
}

static void validate_cloudprovider(lua_State *L, int idx, const char *file, lp_problems *problems) {
  static const field_rule rules[] = {
      {"name", LUA_TSTRING, 1, NULL},
      {"instance_types", LUA_TFUNCTION, 1, "(ctx, nodeclass)"},
      {"create", LUA_TFUNCTION, 1, "(ctx, req)"},
      {"delete", LUA_TFUNCTION, 1, "(ctx, instance_id)"},
      {"get", LUA_TFUNCTION, 1, "(ctx, instance_id)"},
      {"get_many", LUA_TFUNCTION, 0, "(ctx, instance_ids)"}, /* optional: a drift pass's lookups, batched */
      {"list", LUA_TFUNCTION, 1, "(ctx)"},
      {"resolve_nodeclass", LUA_TFUNCTION, 1, "(ctx, nodeclass)"},
      {"provider_id", LUA_TFUNCTION, 1, "(instance)"},
      {"parse_provider_id", LUA_TFUNCTION, 1, "(s)"},
      {"registered", LUA_TFUNCTION, 0, "(ctx, instance_id, node_name)"}, /* optional: after registration */
      {"interruption_conditions", LUA_TTABLE, 0, NULL}, /* optional: Node conditions of an interruption */
      {NULL, 0, 0, NULL},
  };
  if (!check_fields(L, idx, file, problems, "CloudProvider mapping", rules)) return;
  check_exports(L, idx, file, problems);
}

static void validate_nodegroup(lua_State *L, int idx, const char *file, lp_problems *problems) {
  static const field_rule rules[] = {
      {"name", LUA_TSTRING, 1, NULL},
      {"gpu_label", LUA_TSTRING, 1, NULL},
      {"refresh", LUA_TFUNCTION, 1, "(ctx)"},
      {"set_target_size", LUA_TFUNCTION, 1, "(ctx, id, n)"},
      {"delete_node", LUA_TFUNCTION, 1, "(ctx, id, node)"},
      {"template_node", LUA_TFUNCTION, 0, "(ctx, id)"}, /* the optional ones: without them, UNIMPLEMENTED */
      {"get_options", LUA_TFUNCTION, 0, "(...)"},       /* NodeGroupGetOptions */
      {"node_price", LUA_TFUNCTION, 0, "(...)"},        /* PricingNodePrice */
      {"pod_price", LUA_TFUNCTION, 0, "(...)"},         /* PricingPodPrice */
      {NULL, 0, 0, NULL},
  };
  check_fields(L, idx, file, problems, "NodeGroup mapping", rules);
}

const lp_module_spec lp_contract_modules[] = {
    {LUAPROV_CLOUDPROVIDER_MAPPING, "CloudProvider mapping", 0,
     validate_cloudprovider}, /* first: the drift validator reads its drift_reasons */
    {"policies.drift", "drift policy", 0, validate_drift},
    {"policies.repair", "repair policy", 0, validate_repair},
    {"policies.tags", "tags policy", 0, validate_tags},
    {"policies.disruption", "disruption policy", 0, validate_disruption},
    {"providers.bizfly", "NodeGroup mapping", 0, validate_nodegroup},
    {NULL, NULL, 0, NULL},
};

char *lp_tags_answer_problem(const json_t *tags) {
  const char *key;
  json_t *value;
  if (json_is_object(tags)) {
    json_object_foreach((json_t *)tags, key, value) {
      if (json_is_string(value)) continue;
      char *shown = json_dumps(value, JSON_COMPACT | JSON_ENCODE_ANY);
      char *problem = lp_xasprintf("build_instance_tags returned tag '%s' = %s, a %s; tag values must be "
                                   "strings (wrap it in tostring())",
                                   key, shown ? shown : "?",
                                   json_is_number(value)    ? "number"
                                   : json_is_boolean(value) ? "boolean"
                                                            : "table");
      free(shown);
      return problem;
    }
  }
  char *shape = lp_check_tags(tags);
  char *problem =
      shape ? lp_xasprintf("tags policy: %s; build_instance_tags returns a map of tag key to string", shape)
            : NULL;
  free(shape);
  return problem;
}

/* A value as the repair messages show it: "missing", the string (quoted when quote), or as JSON. */
static char *repair_shown(const json_t *v, int quote) {
  if (!v || json_is_null(v)) return lp_xstrdup("missing");
  if (json_is_string(v))
    return quote ? lp_xasprintf("\"%s\"", json_string_value(v)) : lp_xstrdup(json_string_value(v));
  char *d = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
  return d ? d : lp_xstrdup("?");
}

/* fmt (with %zu for the entry, %s for the value as repair_shown shows it, %s for tail) filled in. */
static char *entry_problem(const char *fmt, size_t i, const json_t *v, int quote, const char *tail) {
  char *got = repair_shown(v, quote);
  char *problem = lp_xasprintf(fmt, i, got, tail);
  free(got);
  return problem;
}

/* The Lua type name of a value as JSON shows it. */
static const char *lua_kind(const json_t *v) {
  return !v || json_is_null(v) ? "nil"
         : json_is_string(v)   ? "string"
         : json_is_number(v)   ? "number"
         : json_is_boolean(v)  ? "boolean"
                               : "table";
}

/* One entry of the list (1-based i); NULL when it is fine. */
static char *repair_entry_problem(size_t i, const json_t *p) {
  static const char *const fields[] = {"condition_type", "condition_status", "toleration_seconds", NULL};
  static const char *const statuses[] = {"True", "False", "Unknown", NULL};
  if (!json_is_object(p) && !json_is_array(p))
    return lp_xasprintf("policies(ctx)[%zu] must be a table, not a %s", i, lua_kind(p));
  if (json_is_array(p) && json_array_size(p) > 0)
    return lp_xasprintf("policies(ctx)[%zu] has unknown field '1'; an entry holds only condition_type, "
                        "condition_status and toleration_seconds",
                        i);
  const char *key;
  const json_t *value;
  json_object_foreach((json_t *)p, key, value) {
    int known = 0;
    for (const char *const *f = fields; *f; f++) known |= strcmp(key, *f) == 0;
    if (known) continue;
    const char *near = lp_contract_closest(key, fields);
    if (near)
      return lp_xasprintf("policies(ctx)[%zu] has unknown field '%s'; did you mean '%s'?", i, key, near);
    return lp_xasprintf("policies(ctx)[%zu] has unknown field '%s'; an entry holds only condition_type, "
                        "condition_status and toleration_seconds",
                        i, key);
  }
  const json_t *type = json_object_get(p, "condition_type");
  if (!json_is_string(type) || !*json_string_value(type))
    return entry_problem("policies(ctx)[%zu].condition_type must be a non-empty string, not %s; name a Node "
                         "condition such as \"Ready\"%s",
                         i, type, 0, "");
  const json_t *status = json_object_get(p, "condition_status");
  const char *st = json_string_value(status);
  int valid = 0;
  for (const char *const *s = statuses; st && *s; s++) valid |= strcmp(st, *s) == 0;
  if (!valid) {
    const char *near = st ? lp_contract_closest(st, statuses) : NULL;
    char tail[64] = "";
    if (near) snprintf(tail, sizeof tail, " (did you mean \"%s\"?)", near);
    return entry_problem("policies(ctx)[%zu].condition_status is %s; it must be \"True\", \"False\" or "
                         "\"Unknown\"%s",
                         i, status, 1, tail);
  }
  const json_t *t = json_object_get(p, "toleration_seconds");
  if (!json_is_number(t) || json_number_value(t) < 0)
    return entry_problem("policies(ctx)[%zu].toleration_seconds is %s; it must be a number of seconds >= 0 "
                         "(how long the condition may last before the node is repaired)%s",
                         i, t, 1, "");
  return NULL;
}

char *lp_repair_answer_problem(const json_t *list) {
  if (!json_is_array(list) &&
      !(json_is_object(list) && json_object_size(list) == 0)) /* {} is an empty list */
    return lp_xasprintf("policies(ctx) must return a list of {condition_type, condition_status, "
                        "toleration_seconds}, not a %s",
                        lua_kind(list));
  size_t i;
  const json_t *p;
  json_array_foreach(list, i, p) {
    char *problem = repair_entry_problem(i + 1, p);
    if (problem) return problem;
  }
  return NULL;
}

char *lp_can_disrupt_answer_problem(const json_t *answer) {
  if (json_is_boolean(answer)) return NULL;
  char *shown = answer ? json_dumps(answer, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
  char *problem =
      lp_xasprintf("can_disrupt returned %s, which is neither true nor false; return true to allow the "
                   "disruption, or false and why to veto it (docs/contracts.md#policies)",
                   shown && !json_is_null(answer) ? shown : "nothing");
  free(shown);
  return problem;
}

char *lp_drift_answer_problem(const char *function, const json_t *reason, const json_t *mapping_reasons) {
  const char *r = !reason || json_is_null(reason) ? "" : json_string_value(reason);
  if (r) return lp_drift_reason_problem(r, mapping_reasons);
  char *shown = json_dumps(reason, JSON_COMPACT | JSON_ENCODE_ANY);
  char *problem = lp_xasprintf("%s returned %s %s, not a string; return a drift reason such as "
                               "\"NodeClassDrift\", or \"\" when the node has not drifted",
                               function,
                               json_is_object(reason) || json_is_array(reason) ? "a table"
                               : json_is_boolean(reason)                       ? "a boolean"
                                                                               : "a number",
                               shown ? shown : "?");
  free(shown);
  return problem;
}
