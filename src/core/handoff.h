/* SPDX-License-Identifier: MIT */
/*
 * Hand-off: a socket leaving ulsock's reach. Descriptors sent in an SCM_RIGHTS message
 * may reach a process without ulsock: the connection moves back to kernel TCP first
 * unless the receiver is proven to run ulsock (it then finds the connection again by its
 * segment). Either way another process may hold the socket now. (exec, posix_spawn and
 * fdopen hand sockets off too: src/preload/exec.c.)
 */
#ifndef ULS_HANDOFF_H
#define ULS_HANDOFF_H

#include <sys/socket.h>

/* Before sendmsg on unix_fd with msg: its SCM_RIGHTS descriptors are leaving. */
void uls_handoff_sent(int unix_fd, const struct msghdr *msg);
/* After recvmsg: a received descriptor may reuse a number whose old entry ulsock never
 * saw closed. */
void uls_handoff_received(const struct msghdr *msg);

#endif
