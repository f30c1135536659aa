/* SPDX-License-Identifier: MIT */
/*
 * Per-process connection records for `ulsock stat`: an unlinked file in /dev/shm per
 * process (mode 0600), kept open as a descriptor that `ulsock stat` reaches through
 * /proc/PID/fd; an array of fixed-size slots written only by that process.
 */
#ifndef ULS_STAT_H
#define ULS_STAT_H

#include <stdatomic.h>
#include <stdint.h>

#define ULS_STAT_MAGIC 0x3154415453534c55ULL /* "ULSSTAT1" */
#define ULS_STAT_SLOTS 2048

struct uls_stat_rec {
	_Atomic uint32_t used;
	int32_t fd;
	uint32_t role; /* 0 client, 1 server */
	_Atomic uint32_t path; /* enum uls_path */
	uint8_t local[28]; /* struct sockaddr_in or sockaddr_in6, formatted by `ulsock stat` */
	uint8_t peer[28];
	char reason[96];
	_Atomic uint64_t tx_bytes;
	_Atomic uint64_t rx_bytes;
};

struct uls_stat_file {
	uint64_t magic;
	uint32_t pid;
	uint32_t nslots;
	struct uls_stat_rec rec[ULS_STAT_SLOTS];
};

/* Returns a slot for a new connection, or NULL when stats are unavailable. */
struct uls_stat_rec *uls_stat_slot(void);
void uls_stat_release(struct uls_stat_rec *r);
/* After fork, in the child: forgets the parent's file (returned, still mapped, so the
 * child can move its records) and writes its own from now on. */
void *uls_stat_atfork_child(void);
void uls_stat_unmap(void *parent);

#endif
