/* SPDX-License-Identifier: MIT */
/* Loading libfabric (lib.h). */
#include "lib.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

#include "../../os/guard.h"

struct uls_fab_lib uls_fab;

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static int load_result = -1;
static char load_why[128];
static void *handle;

/* Each exported function the table needs, by name. */
static int resolve(void)
{
	static const struct {
		const char *name;
		size_t offset;
	} syms[] = {
		{"fi_getinfo", offsetof(struct uls_fab_lib, getinfo)},
		{"fi_freeinfo", offsetof(struct uls_fab_lib, freeinfo)},
		{"fi_dupinfo", offsetof(struct uls_fab_lib, dupinfo)},
		{"fi_fabric", offsetof(struct uls_fab_lib, fabric)},
		{"fi_strerror", offsetof(struct uls_fab_lib, strerror)},
		{"fi_version", offsetof(struct uls_fab_lib, version)},
	};
	struct uls_fab_lib t;

	for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
		void *p = dlsym(handle, syms[i].name);
		if (!p) {
			snprintf(load_why, sizeof(load_why), "libfabric lacks %s", syms[i].name);
			return -1;
		}
		*(void **)((char *)&t + syms[i].offset) = p;
	}
	uls_fab = t;
	return 0;
}

static void load(void)
{
	/* libfabric's constructors and providers open sockets and files of their own. */
	uls_inside_begin();
	handle = dlopen("libfabric.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!handle) {
		const char *e = dlerror();
		snprintf(load_why, sizeof(load_why), "cannot load libfabric.so.1: %s",
			 e ? e : "unknown error");
	} else if (resolve() == 0) {
		uint32_t v = uls_fab.version();
		if (FI_MAJOR(v) < 1 || (FI_MAJOR(v) == 1 && FI_MINOR(v) < 17))
			snprintf(load_why, sizeof(load_why), "libfabric %u.%u is older than 1.17",
				 FI_MAJOR(v), FI_MINOR(v));
		else
			load_result = 0;
	}
	uls_inside_end();
}

int uls_fab_load(char *why, size_t wlen)
{
	pthread_once(&load_once, load);
	if (load_result < 0 && why)
		snprintf(why, wlen, "%s", load_why);
	return load_result;
}

int uls_fab_loaded(void)
{
	return handle != NULL;
}

const char *uls_fab_err(int r)
{
	if (load_result < 0)
		return "libfabric not loaded";
	uls_inside_begin();
	const char *s = uls_fab.strerror(r < 0 ? -r : r);
	uls_inside_end();
	return s;
}
