/* SPDX-License-Identifier: MIT */
/* The process hooks of the transports of the table (transport.h), each called in turn. */
#include "transport.h"

#define EACH(t) for (const struct uls_transport_ops *const *t = uls_transports; *t; t++)

void uls_transports_init(void)
{
	EACH(t)
		if ((*t)->process_init)
			(*t)->process_init();
}

void uls_transports_idle(void)
{
	EACH(t)
		if ((*t)->idle)
			(*t)->idle();
}

int uls_transports_fd_shortage(void)
{
	EACH(t)
		if ((*t)->fd_shortage && (*t)->fd_shortage())
			return 1;
	return 0;
}

void uls_transports_uid_changed(void)
{
	EACH(t)
		if ((*t)->uid_changed)
			(*t)->uid_changed();
}

void uls_transports_fork_prepare(void)
{
	EACH(t)
		if ((*t)->fork_prepare)
			(*t)->fork_prepare();
}

void uls_transports_atfork_child(void)
{
	EACH(t)
		if ((*t)->atfork_child)
			(*t)->atfork_child();
}

void uls_transports_exit(void)
{
	EACH(t)
		if ((*t)->process_exit)
			(*t)->process_exit();
}

void uls_transports_exec_begin(int spawn)
{
	EACH(t)
		if ((*t)->exec_begin)
			(*t)->exec_begin(spawn);
}

void uls_transports_exec_failed(void)
{
	EACH(t)
		if ((*t)->exec_failed)
			(*t)->exec_failed();
}

int uls_transports_sigaction(int sig, const struct sigaction *act, struct sigaction *old,
			     int *ret)
{
	EACH(t)
		if ((*t)->sigaction && (*t)->sigaction(sig, act, old, ret) == 0)
			return 0;
	return -1;
}

int uls_transports_wait_fd(void)
{
	EACH(t)
		if ((*t)->wait_fd) {
			int fd = (*t)->wait_fd();
			if (fd >= 0)
				return fd;
		}
	return -1;
}

uint64_t uls_transports_nap_ns(void)
{
	uint64_t nap = 0;

	EACH(t)
		if ((*t)->nap_ns) {
			uint64_t n = (*t)->nap_ns();
			if (n && (!nap || n < nap))
				nap = n;
		}
	return nap;
}
