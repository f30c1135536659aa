/* SPDX-License-Identifier: MIT */
/*
 * poll, select and epoll over a mix of kernel descriptors and accelerated sockets, whose
 * readiness lives in shared memory. A wait first checks the rings in user space (spinning
 * within the profile's budget), then arms wake-ups and sleeps in the kernel, where the
 * peer's wake-up byte makes the socket readable.
 *
 * poll.c holds poll and select; epoll.c the sets, their registrations and epoll_ctl;
 * epoll_ghost.c the registrations that outlive the program's view of them; epoll_wait.c
 * the wait. event_int.h is what they share.
 */
#ifndef ULS_EVENT_H
#define ULS_EVENT_H

#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <sys/epoll.h>

struct uls_epoll;

/* timeout_ns < 0: forever. Returns a count or -errno. */
int uls_poll(struct pollfd *fds, nfds_t n, int64_t timeout_ns, const sigset_t *mask);

struct uls_epoll *uls_epoll_create(int epfd);
void uls_epoll_get(struct uls_epoll *ep);
void uls_epoll_put(struct uls_epoll *ep);
int uls_epoll_ctl(struct uls_epoll *ep, int epfd, int op, int fd, struct epoll_event *ev);
int uls_epoll_wait(struct uls_epoll *ep, int epfd, struct epoll_event *evs, int max,
		   int64_t timeout_ns, const sigset_t *mask);
/* An fd was closed: forget its registrations in every epoll set of this process. */
void uls_epoll_forget_fd(int fd);
/* Before fork or exec: the kernel epoll sets become visible to another process image. */
void uls_epoll_unshare(void);
/* In a fork child. */
void uls_epoll_atfork_child(void);

#endif
