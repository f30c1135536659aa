/* SPDX-License-Identifier: MIT */
/*
 * Wake-ups through the sleeper's pipe (docs/protocol.md, section 5). A sleeper in poll,
 * select or epoll_wait names its bell's pipe next to its want word (struct
 * uls_wake_pipe); the waker writes one byte into it through a descriptor of its own,
 * opened once through /proc/PID/fd/FD and kept, instead of sending a byte on the TCP
 * connection: about half the cost where waker and sleeper share a core (docs/design.md,
 * "What a wake-up costs").
 *
 * The name is the peer's word, so the waker trusts only what it opened: a pipe (FIFO)
 * with the inode named, made by this process's own user, and only on a connection whose
 * peer is of that user too: such a peer could write that pipe itself. With
 * ULSOCK_TRUST_UIDS, a sleeper's bell is also a FIFO with a name in /dev/shm (core/bell.h)
 * that the trusted users may write: the waker opens it by that name, never through a
 * link, and writes it when its owner is the peer's user (a server knows its client's) or
 * a trusted one (a client). Anything else, or a pipe that cannot be opened (another
 * user's through /proc, a process that is not dumpable, another pid namespace), is
 * remembered as refused and the wake-up goes on TCP, where the sleeper also waits.
 */
#ifndef ULS_WAKEPIPE_H
#define ULS_WAKEPIPE_H

#include <stdint.h>
#include <sys/types.h>

/*
 * Writes one byte into the pipe (who, ino) names, for a connection whose peer has uid
 * peer_uid (-1: unknown, a client's view): 1 when it is in the pipe (or the pipe is full,
 * so readable already), 0 when the waker must send its byte on TCP instead.
 */
int uls_wakepipe_write(uint64_t who, uint64_t ino, long long peer_uid);

/* In a fork child: the table's lock may have been held. */
void uls_wakepipe_atfork_child(void);

#endif
