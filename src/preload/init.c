/* SPDX-License-Identifier: MIT */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <sys/syscall.h>
#include <unistd.h>

#include "preload.h"
#include "../core/config.h"
#include "../core/bell.h"
#include "../core/conn.h"
#include "../os/ownfd.h"
#include "../core/event.h"
#include "../core/fdtable.h"
#include "../core/handoff.h"
#include "../core/log.h"
#include "../core/stat.h"

_Atomic int uls_ready;
static pthread_once_t init_once = PTHREAD_ONCE_INIT;

void uls_atfork_child(void)
{
	uls_own_fd_atfork_child();
	uls_bell_atfork_child();
	uls_epoll_atfork_child();
	uls_splice_atfork_child();
	uls_config_atfork_child();
	uls_conn_atfork_child();
}

void uls_atfork_prepare(void)
{
	if (!uls_cfg.disabled)
		uls_transports_fork_prepare();
	uls_conn_mark_shared_all(ULS_SHARED_FORK);
	uls_epoll_unshare();
}

static void do_init(void)
{
	/* The start-up's own calls reach libc (os/guard.h): a socket call that the start-up
	 * made through an export would otherwise wait for this very start-up. */
	uls_inside_begin();
	uls_libc_init();
	uls_config_load();
	uls_log_open();
	if (uls_fdtable_init() < 0)
		uls_cfg.disabled = 1;
	pthread_atfork(uls_atfork_prepare, NULL, uls_atfork_child);
	uls_clone_init();
	if (!uls_cfg.disabled)
		uls_transports_init(); /* the shm transport's sweeps bells' names too */
	uls_inside_end();
	atomic_store_explicit(&uls_ready, 1, memory_order_release);
	uls_dbg("loaded, profile %s", uls_profile_name(uls_cfg.profile));
	/* A socket handed over as a standard stream (inetd, a dup2 before exec) meets stdio,
	 * which ulsock cannot see: its connection moves back to kernel TCP (core/handoff.c). */
	for (int fd = 0; fd <= 2 && !uls_cfg.disabled; fd++) {
		struct stat st;
		if (fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode))
			uls_handoff_stdio(fd);
	}
}

void uls_preload_init(void)
{
	pthread_once(&init_once, do_init);
}

__attribute__((constructor)) static void uls_ctor(void)
{
	uls_preload_init();
}

/* exit() and a return from main: the transports' last words (the fabric's FINs). */
__attribute__((destructor)) static void uls_dtor(void)
{
	if (!uls_vfork_child()) {
		uls_transports_exit();
		uls_bell_unname();
	}
}

/*
 * _exit and _Exit skip the destructors: the same last words first, then the process ends
 * as glibc's _exit ends it (exit_group). Not in a vfork child, which shares the parent's
 * memory and connections.
 */
ULS_EXPORT void _exit(int status)
{
	if (uls_enter() && !uls_vfork_child()) {
		uls_transports_exit();
		uls_bell_unname();
	}
	for (;;)
		syscall(SYS_exit_group, status);
}

ULS_EXPORT void _Exit(int status)
{
	_exit(status);
}
