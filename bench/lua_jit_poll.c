/* Can a budget stop a JIT-compiled Lua loop? (issue 86, item 4: the JIT is off under
 * [lua] max_instructions because LuaJIT calls no hook from compiled code.)
 *
 * A loop polls a flag each iteration; another thread sets it after 50 ms; the poll's slow
 * path (S) flushes the traces, turns the JIT off and sets a count hook, which stops the
 * loop. Two polls are tried: an FFI read of a `volatile int *` (POLL=read) and an FFI call
 * of a C function returning the flag (POLL=call). Prints each poll's cost per iteration,
 * interpreted and compiled, and whether the runaway loop stopped.
 *
 *   gcc -O2 -rdynamic -DPOLL_CALL bench/lua_jit_poll.c -I/usr/include/luajit-2.1 \
 *       -lluajit-5.1 -lpthread -o /tmp/jit_poll && timeout 30 /tmp/jit_poll
 *
 * Not part of any gateway: a measurement behind the design of a budget with the JIT on. */
#include <lauxlib.h>
#include <lua.h>
#include <luajit.h>
#include <lualib.h>
#include <pthread.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

volatile int flag = 0;
int sluice_poll(void) { return flag; }
static int stops = 0;

static void hook(lua_State *L, lua_Debug *ar) {
  static int n = 0;
  (void)ar;
  if (++n > 1000) {
    n = 0;
    lua_pushstring(L, "budget");
    lua_error(L);
  }
}

/* The poll's slow path: what an armed budget does on the Lua thread. */
static int S(lua_State *L) {
  stops++;
  flag = 0;
  luaJIT_setmode(L, 0, LUAJIT_MODE_ENGINE | LUAJIT_MODE_FLUSH);
  luaJIT_setmode(L, 0, LUAJIT_MODE_ENGINE | LUAJIT_MODE_OFF);
  lua_sethook(L, hook, LUA_MASKCOUNT, 1000);
  return 0;
}

static void *arm(void *p) {
  (void)p;
  usleep(50000);
  flag = 1;
  return 0;
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

#ifdef POLL_CALL
#define SETUP "local ffi = require 'ffi'; ffi.cdef('int sluice_poll(void);'); P = ffi.C.sluice_poll"
#define CHECK "p() ~= 0"
#else
#define SETUP "local ffi = require 'ffi'; local c = ffi.cast('volatile int *', FLAGP); P = function() return c[0] end; C = c"
#define CHECK "C[0] ~= 0"
#endif

static const char *bench =
    "local p, s = P, S\n"
    "local function run(poll, n) local t = os.clock(); local x = 0\n"
    " if poll then for i = 1, n do if " CHECK " then s() end x = x + i end\n"
    " else for i = 1, n do x = x + i end end return (os.clock() - t) / n * 1e9 end\n"
    "jit.off(); print('interpreted, no poll, ns', run(false, 1e7)); print('interpreted, poll, ns', run(true, 1e7))\n"
    "jit.on(); print('compiled, no poll, ns', run(false, 1e8)); print('compiled, poll, ns', run(true, 1e8))\n";

int main(void) {
  lua_State *L = luaL_newstate();
  luaL_openlibs(L);
  lua_pushlightuserdata(L, (void *)&flag);
  lua_setglobal(L, "FLAGP");
  lua_pushcfunction(L, S);
  lua_setglobal(L, "S");
  if (luaL_dostring(L, SETUP) || luaL_dostring(L, bench)) {
    printf("%s\n", lua_tostring(L, -1));
    return 1;
  }
  pthread_t th;
  pthread_create(&th, 0, arm, 0);
  double t0 = now();
  fflush(stdout);
  int r = luaL_dostring(L, "local p, s = P, S; local x = 0; while true do if " CHECK " then s() end x = x + 1 end");
  printf("runaway loop: %s after %.3f s (slow path ran %d times)\n", r ? lua_tostring(L, -1) : "returned", now() - t0, stops);
  return 0;
}
