/* SPDX-License-Identifier: MIT */
/*
 * The `ulsock stat` record: an ABI between two programs that may come from different
 * builds (the library inside a running program, and the `ulsock` command a user runs).
 *
 * Each process running ulsock keeps one file, created in /dev/shm as
 * ULSOCK_STAT_PREFIX "<uid>.<pid>" with mode 0600, unlinked at once and held open (close-on-
 * exec) for as long as the process lives; a reader finds it through /proc/<pid>/fd. The file
 * is a struct ulsock_stat_file: a header, then ULSOCK_STAT_SLOTS fixed-size records that only
 * the owning process writes. A record is live while `used` is 1; the owner sets its fields
 * before `used` and keeps `path` and the byte counters current with relaxed atomic stores.
 *
 * A reader checks the size of the file, `magic`, `version`, `rec_size` and `nslots` before
 * it reads a record, and treats every field as untrusted: the owner may be any program of
 * the same user. A change of layout increments ULSOCK_STAT_VERSION; the asserts below pin
 * the offsets, so a change cannot happen by accident.
 */
#ifndef ULSOCK_STAT_H
#define ULSOCK_STAT_H

#include <assert.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define ULSOCK_STAT_PREFIX "/dev/shm/ulsock-stat."
#define ULSOCK_STAT_MAGIC 0x3154415453534c55ULL /* "ULSSTAT1" in memory order */
#define ULSOCK_STAT_VERSION 2u /* 1: no version field (until 2026-11) */
#define ULSOCK_STAT_SLOTS 2048u

/* Where a connection's bytes go. */
enum ulsock_path {
	ULSOCK_PATH_PENDING = 0, /* connected, the fast path not decided yet */
	ULSOCK_PATH_SHM = 1,     /* shared-memory rings */
	ULSOCK_PATH_KERNEL = 2,  /* kernel TCP; `reason` says why */
	ULSOCK_PATH_FABRIC = 3,  /* a libfabric provider; `reason` names it */
	ULSOCK_PATH_COUNT
};

/* The name `ulsock stat` prints for a path; "?" for a value out of range. */
static inline const char *ulsock_path_name(uint32_t path)
{
	static const char *const names[ULSOCK_PATH_COUNT] = {"pending", "shm", "kernel", "fabric"};

	return path < ULSOCK_PATH_COUNT ? names[path] : "?";
}

enum ulsock_role { ULSOCK_ROLE_CLIENT = 0, ULSOCK_ROLE_SERVER = 1 };

struct ulsock_stat_rec {
	_Atomic uint32_t used;  /* 1: the record describes a live connection */
	int32_t fd;             /* the owner's descriptor for it */
	uint32_t role;          /* enum ulsock_role */
	_Atomic uint32_t path;  /* enum ulsock_path */
	uint8_t local[28];      /* a struct sockaddr_in or sockaddr_in6 */
	uint8_t peer[28];
	char reason[96];        /* why the kernel path, not always terminated */
	_Atomic uint64_t tx_bytes;
	_Atomic uint64_t rx_bytes;
};

struct ulsock_stat_file {
	uint64_t magic;    /* ULSOCK_STAT_MAGIC, stored last of the header */
	uint32_t version;  /* ULSOCK_STAT_VERSION */
	uint32_t rec_size; /* sizeof(struct ulsock_stat_rec) */
	uint32_t pid;
	uint32_t nslots;   /* ULSOCK_STAT_SLOTS */
	uint64_t reserved;
	struct ulsock_stat_rec rec[ULSOCK_STAT_SLOTS];
};

static_assert(offsetof(struct ulsock_stat_rec, used) == 0, "stat ABI");
static_assert(offsetof(struct ulsock_stat_rec, fd) == 4, "stat ABI");
static_assert(offsetof(struct ulsock_stat_rec, role) == 8, "stat ABI");
static_assert(offsetof(struct ulsock_stat_rec, path) == 12, "stat ABI");
static_assert(offsetof(struct ulsock_stat_rec, local) == 16, "stat ABI");
static_assert(offsetof(struct ulsock_stat_rec, peer) == 44, "stat ABI");
static_assert(offsetof(struct ulsock_stat_rec, reason) == 72, "stat ABI");
static_assert(offsetof(struct ulsock_stat_rec, tx_bytes) == 168, "stat ABI");
static_assert(offsetof(struct ulsock_stat_rec, rx_bytes) == 176, "stat ABI");
static_assert(sizeof(struct ulsock_stat_rec) == 184, "stat ABI");
static_assert(offsetof(struct ulsock_stat_file, version) == 8, "stat ABI");
static_assert(offsetof(struct ulsock_stat_file, rec_size) == 12, "stat ABI");
static_assert(offsetof(struct ulsock_stat_file, pid) == 16, "stat ABI");
static_assert(offsetof(struct ulsock_stat_file, nslots) == 20, "stat ABI");
static_assert(offsetof(struct ulsock_stat_file, rec) == 32, "stat ABI");
static_assert(sizeof(struct ulsock_stat_file) == 32 + 184 * ULSOCK_STAT_SLOTS, "stat ABI");
/* Both programs touch these words at once: they must be plain loads and stores. */
static_assert(ATOMIC_INT_LOCK_FREE == 2 && ATOMIC_LLONG_LOCK_FREE == 2, "stat ABI");

#endif
