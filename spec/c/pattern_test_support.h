/* Shared by the guarded pattern function tests, header-only: every spec/c/test_*.c is an executable
 * of its own, so everything here is static. Two states run the same driver chunk; `ref` keeps Lua's
 * own string functions, `grd` has lp_pattern_install applied to its string table.
 * test_pattern.c is the differential test, test_pattern_limits.c the limits and heavy workloads. */
#ifndef LUAPROV_SPEC_PATTERN_TEST_SUPPORT_H
#define LUAPROV_SPEC_PATTERN_TEST_SUPPORT_H

#include <lauxlib.h>
#include <lualib.h>

#include "check.h"
#include "script/pattern.h"

static lua_State *ref, *grd;

/* Serialises every result (type-tagged, errors by message) so the states can be compared as text.
 * It uses no pattern function, so both states run identical code around the function under test. */
static const char driver[] =
    "local function ser1(v)\n"
    "  local t = type(v)\n"
    "  if t == 'string' then return string.format('%q', v) end\n"
    "  if t == 'number' then return math.type(v) .. ':' .. tostring(v) end\n"
    "  return tostring(v)\n"
    "end\n"
    "local function ser(...)\n"
    "  local out = {}\n"
    "  for i = 1, select('#', ...) do out[i] = ser1((select(i, ...))) end\n"
    "  return select('#', ...) .. '|' .. table.concat(out, ',')\n"
    "end\n"
    "function run(fname, s, p, a3, a4)\n"
    "  if fname == 'gmatch' then\n"
    "    local ok, it = pcall(string.gmatch, s, p, a3)\n"
    "    if not ok then return 'E:' .. ser1(it) end\n"
    "    local parts = {}\n"
    "    for _ = 1, 100 do\n"
    "      local r = table.pack(pcall(it))\n"
    "      if not r[1] then parts[#parts + 1] = 'E:' .. ser1(r[2]) break end\n"
    "      if r.n == 1 then break end\n"
    "      parts[#parts + 1] = ser(table.unpack(r, 2, r.n))\n"
    "    end\n"
    "    return table.concat(parts, ';')\n"
    "  end\n"
    "  return ser(pcall(string[fname], s, p, a3, a4))\n"
    "end\n"
    "REPLS = {\n"
    "  {hello = 'HI', a = 'A', b = false, c = 1.5, ['1'] = 'one', x = true, [3] = 'three'},\n"
    "  function(...) return (...):upper() end,\n"
    "  function(a, b) return b end,\n"
    "  function() return false end,\n"
    "  function(a) return #tostring(a) end,\n"
    "  function() return {} end,\n"
    "  function(...) return select('#', ...) .. ':' .. table.concat({...}, '|') end,\n"
    "  setmetatable({}, {__index = function(_, k) return '<' .. tostring(k) .. '>' end}),\n"
    "  function(a) local x = string.find('nested', 'e(s)') return a .. x end,\n"
    "  function(a) if a == 'b' then error('boom') end return a end,\n"
    "}\n"
    "local mi, ma = math.mininteger, math.maxinteger\n"
    "HAND = {\n"
    /* find: plain, init, anchors, argument errors */
    "  {'find', 'hello world', 'o w'}, {'find', 'hello world', 'o', 6}, {'find', 'hello', 'l', -2},\n"
    "  {'find', 'hello', 'l', -100}, {'find', 'hello', '', 10}, {'find', 'hello', '', 6},\n"
    "  {'find', 'hello', '', 5}, {'find', 'hello', '', 0}, {'find', '', '', 1}, {'find', '', ''},\n"
    "  {'find', '', '', 2}, {'find', 'a.b', '.'}, {'find', 'a.b', '.', 1, true}, {'find', 'a+b', '+', 1, "
    "true},\n"
    "  {'find', 'a\\0b', '\\0b'}, {'find', 'a\\0b%', '\\0b%'}, {'find', 'a\\0b.', 'b.', 1, 1},\n"
    "  {'find', 'abc', 'abcd', 1, true}, {'find', 'abcabc', 'ca', -4, true}, {'find', 'abc', '', 4, true},\n"
    "  {'find', 'abc', 'b', '2'}, {'find', 'abc', 'b', 1.5}, {'find', 'abc', 'b', 2.0}, {'find', 123, '2'},\n"
    "  {'find', 12.5, '%.'}, {'find', nil, 'a'}, {'find', 'abc', nil}, {'find', 'abc', {}}, {'find', 'abc', "
    "'b', 'x'},\n"
    "  {'find', 'abc', 'a', mi}, {'find', 'abc', 'a', ma}, {'find', 'abc', 'c', -1}, {'find', 'abc', '^c', "
    "-1},\n"
    "  {'find', 'aaa', '^a'}, {'find', 'baa', '^a'}, {'find', 'baa', '^a', 2}, {'find', 'a^b', 'a^b'},\n"
    "  {'find', 'a$b', '$b'}, {'find', 'a$b', 'a$b'}, {'find', 'ab', 'b$'}, {'find', 'ab', 'a$'}, {'find', "
    "'ab', '$'},\n"
    "  {'find', 'ab', '^$'}, {'find', '', '^$'}, {'find', '^a', '^^a'}, {'find', 'ab', '^'}, {'find', 'ab', "
    "'b$', 3},\n"
    "  {'find', 'abc', 'x%'}, {'find', 'x', 'x%'}, {'find', 'abc', '%'}, {'find', 'hello', '(l)(l)'},\n"
    "  {'find', 'hello', '()ll()'}, {'find', 'hello', 'l+'}, {'find', 'a', 'a', 1, nil},\n"
    /* match and classes */
    "  {'match', '  trim  ', '^%s*(.-)%s*$'}, {'match', 'key = value', '(%w+)%s*=%s*(%w+)'},\n"
    "  {'match', '2024-01-15', '(%d+)-(%d+)-(%d+)'}, {'match', 'x', '()'}, {'match', 'hello', "
    "'(h)(e)(l)(l)(o)'},\n"
    "  {'match', 'abc', '..'}, {'match', '\\0x', '.'}, {'match', 'hello', '.-l'}, {'match', 'hello', "
    "'.*l'},\n"
    "  {'match', 'hello', 'l*'}, {'match', 'hello', 'x*'}, {'match', 'hello', 'h?e'}, {'match', 'hello', "
    "'x?h'},\n"
    "  {'match', 'aaab', 'a-b'}, {'match', 'aaab', '(a-)(a*)b'}, {'match', 'aaa', 'a?a?aa'}, {'match', "
    "'aab', 'a+$'},\n"
    "  {'match', '3.14e', '%d+%.?%d*'}, {'match', 'x', 'x', 2}, {'match', 'x', 'x', 3}, {'match', 'xy', "
    "'()', 3},\n"
    "  {'match', 'hello', 'l', -1}, {'match', 'hello', '^(h)', 1}, {'match', 'ahello', '^(h)', 2},\n"
    /* sets */
    "  {'match', 'xabcx', '[abc]+'}, {'match', 'xabcx', '[^abc]+'}, {'match', 'xabcx', '[a-c]+'},\n"
    "  {'match', 'a_b.c', '[%a_]+'}, {'match', 'x]y', '[%]]'}, {'match', 'x]y', '[]]'}, {'match', ']x', "
    "'[^]]'},\n"
    "  {'match', '-a', '[a-]+'}, {'match', 'a-', '[-a]+'}, {'match', 'b-', '[%-a]+'}, {'match', 'b-z', "
    "'[a%-z]+'},\n"
    "  {'match', 'abc', '[z-a]'}, {'match', '1 a', '[^%d%s]'}, {'match', 'a.b_c', '[%w_%.]+'},\n"
    "  {'match', 'c-e', '[a-c-e]+'}, {'match', 'a', '[]'}, {'match', 'a', '[^]'}, {'match', 'a', '[a'},\n"
    "  {'match', 'a', '[%'}, {'match', 'a', '[%a'}, {'match', 'a', '[^'}, {'match', 'b', 'a[x'}, {'match', "
    "'^', '[\\0^]'},\n"
    "  {'match', 'a', '[a-%]'}, {'match', '%', '[%%]'}, {'match', 'x-', '[x-]-'}, {'match', 'bbb', "
    "'[]b]*'},\n"
    /* captures and back-references */
    "  {'match', 'ab', '(a)(b)'}, {'match', 'ab', '(a(b))'}, {'match', 'aa', '(a)%1'}, {'match', 'aaaa', "
    "'(a*)%1'},\n"
    "  {'match', 'aaaa', '((a)%2)'}, {'match', 'a', '%0'}, {'match', 'aa', '(a)%2'}, {'match', 'aa', "
    "'(a%1)'},\n"
    "  {'match', 'a', ')'}, {'match', 'a', '(a'}, {'match', 'a', '(()'}, {'match', 'xx', '()%1'},\n"
    "  {'match', 'x', string.rep('()', 32)}, {'match', 'x', string.rep('()', 33)}, {'find', 'x', '(x)(x'},\n"
    "  {'match', 'abab', '(ab)%1$'}, {'match', 'aXa', '(.).%1'}, {'find', 'say \"hi\" now', "
    "'([\"\\'])(.-)%1'},\n"
    /* %b and %f */
    "  {'match', 'f(a(b)c) d', '%b()'}, {'match', 'x{a}', '%b{}'}, {'match', 'xaxy', '%bxy'}, {'match', 'a', "
    "'%b'},\n"
    "  {'match', 'a', '%b('}, {'match', 'a\"b\"c', '%b\"\"'}, {'match', '(((', '%b()'}, {'match', '', "
    "'%b()'},\n"
    "  {'match', 'THE (quick) fox', '%f[%a]%a+'}, {'match', 'THE (quick) fox', '%f[%W]'}, {'match', 'a', "
    "'%f'},\n"
    "  {'match', 'a', '%fa'}, {'match', 'a', '%f[a'}, {'match', 'ab', '%f[^a]'}, {'find', 'ab', '%f[%z]'},\n"
    "  {'find', 'ab', '%f[\\0]'}, {'find', 'ab', '%f[^\\0]'}, {'find', 'hello', '%f[%l]', 2},\n"
    /* gsub */
    "  {'gsub', 'hello world', '(o)', '[%1]'}, {'gsub', 'abc', '%w', '%0%0'}, {'gsub', 'abc', '%w', '%1'},\n"
    "  {'gsub', 'abc', '(%w)', '%2'}, {'gsub', 'abc', '%w', '%%'}, {'gsub', 'abc', '%w', '%'}, {'gsub', "
    "'abc', '%w', '%x'},\n"
    "  {'gsub', 'abc', '%w', 'a%'}, {'gsub', 'abc', '()b', '%1'}, {'gsub', 'abc', 'b', 5}, {'gsub', 'abc', "
    "'b', 2.5},\n"
    "  {'gsub', 'abc', 'b', nil}, {'gsub', 'abc', 'b', true}, {'gsub', 'abc', 'x', '-'}, {'gsub', 'abc', '', "
    "'-'},\n"
    "  {'gsub', 'abc', '.-', '-'}, {'gsub', 'abc', 'b*', '-'}, {'gsub', 'aaa', '^a', 'b'}, {'gsub', 'aaa', "
    "'^', 'x'},\n"
    "  {'gsub', 'aaa', 'a', 'b', 0}, {'gsub', 'aaa', 'a', 'b', 1}, {'gsub', 'aaa', 'a', 'b', -1}, {'gsub', "
    "'aaa', 'a', 'b', 2.5},\n"
    "  {'gsub', 'aaa', 'a', 'b', '2'}, {'gsub', 'aaa', 'a', nil, 'x'}, {'gsub', 'a\\0b', '%z', 'Z'}, "
    "{'gsub', 'a\\0b', '\\0', 'Z'},\n"
    "  {'gsub', 'abc', '', '%0'}, {'gsub', 'abc', '$', '!'}, {'gsub', 'abc', 'c$', '!'}, {'gsub', '', '', "
    "'e'},\n"
    "  {'gsub', 'x = 1, y = 2', '(%w+) = (%w+)', '%2 = %1'}, {'gsub', 'abc', '%w', '%0%9'}, {'gsub', 12345, "
    "3, 9},\n"
    "  {'gsub', 'abc', '(b)(c)', '%3'}, {'gsub', 'abc', '(b', 'x'}, {'gsub', 'abc', 'b)', 'x'}, {'gsub', "
    "'a.b', '.', '%%.'},\n"
    "}\n"
    "local function add(t) HAND[#HAND + 1] = t end\n"
    "local all = {}\n"
    "for i = 0, 255 do all[#all + 1] = string.char(i) end\n"
    "ALL = table.concat(all)\n"
    "for _, c in ipairs({'a', 'c', 'd', 'g', 'l', 'p', 's', 'u', 'w', 'x', 'A', 'C', 'D', 'G', 'L', 'P', "
    "'S',\n"
    "                    'U', 'W', 'X', 'z', 'Z', '.', '%', ']', '1', '-', '^'}) do\n"
    "  add({'gsub', ALL, '%' .. c, ''})\n"
    "  add({'gsub', ALL, '[%' .. c .. ']+', '#'})\n"
    "  add({'gsub', ALL, '[^%' .. c .. ']', ''})\n"
    "  add({'gsub', ALL, '%f[%' .. c .. ']', '|'})\n"
    "  add({'find', ALL, '%' .. c .. '+', 40})\n"
    "end\n"
    "add({'gsub', ALL, '[\\128-\\255]', ''}) add({'gsub', ALL, '[\\0-\\31]+', '.'}) add({'gsub', ALL, "
    "'[^\\1-\\254]', '.'})\n"
    "for i = 1, #REPLS do\n"
    "  add({'gsub', 'hello world abc', '%w+', REPLS[i]}) add({'gsub', 'hello world abc', '(%w)(%w*)', "
    "REPLS[i]})\n"
    "  add({'gsub', 'a b c x 1 3', '%w', REPLS[i]}) add({'gsub', 'abc', '()(b)', REPLS[i]})\n"
    "  add({'gsub', 'abc', '', REPLS[i]}) add({'gsub', 'abc', '%w', REPLS[i], 2})\n"
    "end\n"
    "for _, p in ipairs({'%a+', '(%w+)=(%w+)', '', 'a*', '()', '^a', '%', '(', '.-', 'x*', '%f[%w]', "
    "'()a()'}) do\n"
    "  for _, init in ipairs({1, 3, -3, 0, 12, 13, 14, 40, -40}) do\n"
    "    add({'gmatch', 'k=v, a=b aa^a', p, init})\n"
    "  end\n"
    "  add({'gmatch', 'k=v, a=b aa^a', p})\n"
    "end\n"
    "add({'gmatch', nil, 'a'}) add({'gmatch', 'a', 'a', 'x'}) add({'gmatch', 123, '%d'})\n"
    "function hand_count() return #HAND end\n"
    "function run_hand(i)\n"
    "  local c = HAND[i]\n"
    "  local d = {}\n"
    "  for k = 1, 5 do d[k] = type(c[k]) == 'string' and string.format('%q', c[k]:sub(1, 40)) or "
    "tostring(c[k]) end\n"
    "  return run(c[1], c[2], c[3], c[4], c[5]), table.concat(d, ', ')\n"
    "end\n";

/* check_install counts the stack-balance check of lp_pattern_install; only test_pattern.c asks for
 * it, so the check runs once across the two binaries. */
static lua_State *new_state(int guarded, int check_install) {
  lua_State *L = luaL_newstate();
  luaL_openlibs(L);
  if (guarded) {
    lua_getglobal(L, "string");
    int top = lua_gettop(L);
    lp_pattern_install(L, -1);
    if (check_install) CHECK_INT(lua_gettop(L), top);
    lua_pop(L, 1);
  }
  if (luaL_loadbuffer(L, driver, sizeof driver - 1, "=driver") || lua_pcall(L, 0, 0, 0)) {
    fprintf(stderr, "driver: %s\n", lua_tostring(L, -1));
    exit(1);
  }
  return L;
}

#endif
