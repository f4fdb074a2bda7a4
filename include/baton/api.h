/* baton/api.h: BT_API marks every function libbaton exports. The library is built with
 * -fvisibility=hidden, so a function without BT_API is internal: callable inside the library (and
 * from the tests and the baton command, which link the static library) but absent from
 * libbaton.so's dynamic symbol table. Every function declared in baton.h and in the headers under
 * baton/ carries it, and only those: `make check` (tests/public_symbols.sh) compares `nm -D` with
 * these headers. */
#ifndef BATON_API_H
#define BATON_API_H

#if defined(__GNUC__) && __GNUC__ >= 4
#define BT_API __attribute__((visibility("default")))
#else
#define BT_API
#endif

#endif
