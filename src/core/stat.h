/* SPDX-License-Identifier: MIT */
/*
 * Per-process connection records for `ulsock stat`: an unlinked file in /dev/shm per
 * process (mode 0600), kept open as a descriptor that `ulsock stat` reaches through
 * /proc/PID/fd; an array of fixed-size slots written only by that process. The layout is
 * an ABI shared with the command: include/ulsock/stat.h.
 */
#ifndef ULS_STAT_H
#define ULS_STAT_H

#include "ulsock/stat.h"

/* Returns a slot for a new connection, or NULL when stats are unavailable. */
struct ulsock_stat_rec *uls_stat_slot(void);
void uls_stat_release(struct ulsock_stat_rec *r);
/* After fork, in the child: forgets the parent's file (returned, still mapped, so the
 * child can move its records) and writes its own from now on. */
void *uls_stat_atfork_child(void);
void uls_stat_unmap(void *parent);

#endif
