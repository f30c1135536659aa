/* SPDX-License-Identifier: MIT */
#include "libc.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

struct uls_libc uls_libc;
static pthread_once_t libc_once = PTHREAD_ONCE_INIT;

static void resolve(void)
{
#define ULS_LIBC_RESOLVE(ret, name, args) uls_libc.name = (ret(*) args)dlsym(RTLD_NEXT, #name);
	ULS_LIBC_FUNCS(ULS_LIBC_RESOLVE)
#undef ULS_LIBC_RESOLVE
	if (!uls_libc.write || !uls_libc.close || !uls_libc.socket) {
		static const char msg[] = "ulsock: cannot resolve libc functions\n";
		ssize_t r = write(2, msg, sizeof(msg) - 1);
		(void)r;
		abort();
	}
}

void uls_libc_init(void)
{
	pthread_once(&libc_once, resolve);
}

/* The real syscall() for a caller that may run before the rest of the library started. */
uls_syscall_fn uls_libc_syscall(void)
{
	uls_libc_init();
	return uls_libc.syscall;
}
