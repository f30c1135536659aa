/* SPDX-License-Identifier: MIT */
/*
 * What ulsock knows about each descriptor number of this process. Entries start UNKNOWN
 * and are classified on first use (a descriptor inherited over exec or received over
 * SCM_RIGHTS is found that way); close, dup and friends keep them true.
 */
#ifndef ULS_FDTABLE_H
#define ULS_FDTABLE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

struct uls_conn;
struct uls_epoll;

enum uls_fd_kind {
	ULS_FD_UNKNOWN = 0,
	ULS_FD_PLAIN,  /* everything ulsock leaves to the kernel */
	ULS_FD_TCP,    /* an unconnected TCP socket: connect() may accelerate it */
	ULS_FD_CONN,   /* a connected TCP socket with a conn (any path) */
	ULS_FD_EPOLL,  /* an epoll instance created in this process */
};

struct uls_fd {
	_Atomic uint8_t kind;
	uint8_t nonblock; /* ULS_FD_TCP: O_NONBLOCK before connect */
	uint32_t sndbuf, rcvbuf; /* ULS_FD_TCP: SO_SNDBUF/SO_RCVBUF before connect */
	uint64_t rcvtimeo_ns, sndtimeo_ns;
	int rcvlowat; /* ULS_FD_TCP (listeners too): SO_RCVLOWAT as the kernel took it, 0: never set */
	struct uls_conn *conn;
	struct uls_epoll *ep;
};

int uls_fdtable_init(void);
/* The table, sized for the hard RLIMIT_NOFILE (fdtable.c); every call looks it up. */
extern struct uls_fd *uls_fd_table;
extern int uls_fd_table_size;

/* The entry for fd, or NULL when fd is out of range. */
static inline struct uls_fd *uls_fd_get(int fd)
{
	if (fd < 0 || fd >= uls_fd_table_size || !uls_fd_table)
		return NULL;
	return &uls_fd_table[fd];
}
/* The entry for fd, classifying an UNKNOWN descriptor first. */
struct uls_fd *uls_fd_classify(int fd);
/* Does socket fd listen? (A listener never becomes a connection: the kernel's alone.) */
int uls_fd_listening(int fd);
/* Forgets fd (after it was closed by the kernel). */
void uls_fd_clear(int fd);
/* Makes newfd describe the same object as oldfd (dup family). */
void uls_fd_dup(int oldfd, int newfd);
/* The conn of fd, if fd is an accelerated-or-pending TCP connection, else NULL. */
struct uls_conn *uls_fd_conn(int fd);
int uls_fd_max(void);

#endif
