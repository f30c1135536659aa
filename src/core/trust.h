/* SPDX-License-Identifier: MIT */
/*
 * Files that the users of ULSOCK_TRUST_UIDS must reach: a segment (they read and write
 * it) and, with trust set, a sleeper's bell (they only write it: core/bell.h).
 */
#ifndef ULS_TRUST_H
#define ULS_TRUST_H

/*
 * Gives fd's file a POSIX ACL: the owner reads and writes, each trusted user other than
 * this process's gets perm (a mode's three bits: 6 read and write, 2 write only), nobody
 * else anything. 0 with no users trusted or when done; -errno when the kernel refused.
 */
int uls_trust_grant(int fd, unsigned perm);

#endif
