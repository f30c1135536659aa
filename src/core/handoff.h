/* SPDX-License-Identifier: MIT */
/*
 * Hand-off: a socket leaving ulsock's reach, and what ulsock does about it. The interposer
 * (src/preload/: io.c, exec.c, socket.c, init.c) only calls these at the moment a socket
 * leaves; the policy is here.
 * - SCM_RIGHTS: the descriptors sent may reach a process without ulsock, and nothing
 *   at the moment of sending can prove otherwise (the receiver may exec a plain program
 *   while the descriptor is queued): the connection moves back to kernel TCP first.
 *   Another process may hold the socket from then on.
 * - exec and posix_spawn: an accelerated socket that survives exec keeps working if the
 *   new program runs ulsock too (it finds the connection again through the socket's
 *   inode). When the new environment drops the library, each inherited accelerated socket
 *   first moves back to kernel TCP in place; if one cannot (its peer does not answer in
 *   time), the library is put back into the environment instead, so that no byte is lost.
 * - stdio: it reads and writes a descriptor with glibc's internal calls, which ulsock
 *   cannot see. A connection handed to fdopen, or landing on descriptor 0, 1 or 2 (inetd,
 *   a daemon's dup2 before exec), moves back to kernel TCP in place.
 */
#ifndef ULS_HANDOFF_H
#define ULS_HANDOFF_H

#include <sys/socket.h>

/* Before sendmsg with msg: its SCM_RIGHTS descriptors are leaving. */
void uls_handoff_sent(const struct msghdr *msg);
/* After recvmsg: a received descriptor may reuse a number whose old entry ulsock never
 * saw closed. */
void uls_handoff_received(const struct msghdr *msg);

/*
 * Before an exec (all = 0) or a posix_spawn (all: with file actions, which may dup a
 * close-on-exec socket into the child) of a program with environment envp: the
 * environment to pass instead. That is envp itself, with *to_free NULL, unless the program
 * drops the library and an inherited socket could not move back to kernel TCP; then a new
 * array with the library in LD_PRELOAD, whose new entry is *to_free. The caller frees
 * both when the call returns (the array, not its other entries, which are envp's).
 */
char **uls_handoff_exec_env(char *const envp[], char **to_free, int all, int gate);
/* With gate, a program without the library also keeps other threads' new connections on
 * kernel TCP from now on (conn.h, births and execs) until uls_handoff_exec_end, which the
 * caller calls when the exec failed or the spawn returned. A vfork child passes 0: the
 * gate is the parent's memory, which its successful exec would leave closed. */
void uls_handoff_exec_end(void);
/* fd is now descriptor 0, 1 or 2 (any other fd is ignored): stdio may meet it. Best
 * effort: a connection that cannot move yet stays accelerated (logged at debug). */
void uls_handoff_stdio(int fd);
/* Before fdopen(fd): a connection that cannot move back is logged as an error. */
void uls_handoff_fdopen(int fd);

#endif
