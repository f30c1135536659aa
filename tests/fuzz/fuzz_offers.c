/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the offer board (src/transport/shm/offers.h): a file any process
 * of the user can write, which a server reads to decide whether to look for a client's
 * segment. The harness makes the board file from the input, then plays another process
 * of the user through its own mapping (any slot word to any value, the file shrunk)
 * between the module's own calls (an offer made, one taken back, a server's question).
 *
 * Input layout (little-endian):
 *   u8  flags   bit 0: the header below, else zeros (a new file, which the module fills);
 *               bits 1-2: the file's size: the board's, 0, half of it, or a page more;
 *               bit 3: mode 0620 (writable by the group); bit 4: stamps written as now
 *               plus a signed offset; bits 5, 6, 7: the header's uid, magic, and version
 *               and slot count set right over what the input says
 *   24 bytes    the header: version, slots, uid, pad, magic
 *   then ops of 7 bytes: u8 kind, u16 port, u32 value
 *     kind % 6: 0 a slot's pending := value; 1 its stamp := value (or now + (int32)value);
 *     2 uls_offer_made; 3 uls_offer_done; 4 uls_offer_waiting; 5 the file shrunk to
 *     value % (the board's size) bytes
 *
 * What must hold: a board the module does not make as it makes them (another layout,
 * writable by others) is never written and a server always looks (waiting is 1); a valid
 * one counts an offer exactly (pending + 1, or 1 where the slot's stamp is more than
 * ULS_OFFER_FRESH_S in the past: the count restarts; the stamp now), takes one back never below
 * zero, and answers waiting exactly when an offer stamped within ULS_OFFER_FRESH_S is
 * pending; a file shrunk under the module never crashes it (the guard cuts the mapping;
 * from then on any answer is allowed but the process lives).
 */
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/config.h"
#include "fuzz_shm.h"
#include "os/libc.h"
#include "transport/shm/guard.h"
#include "transport/shm/offers.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define BOARD_SIZE sizeof(struct uls_offer_board)
#define PAGE 4096u
#define OP_SIZE 7

enum { OP_PENDING, OP_STAMP, OP_MADE, OP_DONE, OP_WAITING, OP_SHRINK, OP_KINDS };

static char dir[64], path[128];

static void cleanup(void)
{
	unlink(path);
	rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc, (void)argv;
	uls_libc_init();
	uls_config_load();
	uls_cfg.ntrusted = 0;
	if (uls_guard_install(sigaction) < 0)
		abort();
	snprintf(dir, sizeof(dir), "/tmp/uls-fuzz-offers.XXXXXX");
	if (!mkdtemp(dir))
		abort();
	snprintf(path, sizeof(path), "%s/ulsock-offers.%u", dir, (unsigned)uls_uid());
	atexit(cleanup);
	return 0;
}

static uint32_t now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint32_t)ts.tv_sec + 1;
}

/* The harness's view: its own mapping of the whole board, readable while len covers it. */
struct view {
	struct uls_offer_board *map;
	size_t len;  /* the file's size as the harness left it */
	int valid;   /* the module uses this board */
	int shrunk;  /* the file was shrunk under the module: no more exact answers */
};

/* Can the harness touch the slot's words without a SIGBUS of its own? */
static struct uls_offer_slot *slot(struct view *v, uint16_t port)
{
	struct uls_offer_slot *s = &v->map->slot[uls_offer_slot_index(port)];
	size_t end = (size_t)((uint8_t *)(s + 1) - (uint8_t *)v->map);

	return end <= ((v->len + PAGE - 1) & ~(size_t)(PAGE - 1)) ? s : NULL;
}

static struct sockaddr_in addr(uint16_t port)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port),
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	return a;
}

static void run_op(struct view *v, const uint8_t *op, uint8_t flags)
{
	uint16_t port = (uint16_t)fuzz_le(op + 1, 2);
	uint32_t value = (uint32_t)fuzz_le(op + 3, 4);
	struct sockaddr_in a = addr(port);
	struct uls_offer_slot *s = slot(v, port);
	uint32_t before = s ? s->pending : 0, stamp = s ? s->stamp : 0;
	int exact = v->valid && !v->shrunk && s;

	switch (op[0] % OP_KINDS) {
	case OP_PENDING:
		if (s)
			s->pending = value;
		break;
	case OP_STAMP:
		if (s)
			s->stamp = flags & 0x10 ? now_s() + value : value;
		break;
	case OP_MADE: {
		uint32_t t0 = now_s();
		uls_offer_made((struct sockaddr *)&a);
		uint32_t t1 = now_s();
		if (exact) {
			/* A faded stamp (by the module's clock, t0 or t1) restarts the count. */
			uint32_t at0 = (int32_t)(t0 - stamp) > (int32_t)ULS_OFFER_FRESH_S ? 1 : before + 1;
			uint32_t at1 = (int32_t)(t1 - stamp) > (int32_t)ULS_OFFER_FRESH_S ? 1 : before + 1;
			FUZZ_ASSERT(s->pending == at0 || s->pending == at1);
			FUZZ_ASSERT(s->stamp >= t0 && s->stamp <= t1);
		} else if (s && !v->shrunk) {
			FUZZ_ASSERT(s->pending == before && s->stamp == stamp);
		}
		break;
	}
	case OP_DONE:
		uls_offer_done((struct sockaddr *)&a);
		if (exact)
			FUZZ_ASSERT(s->pending == (before ? before - 1 : 0));
		else if (s && !v->shrunk)
			FUZZ_ASSERT(s->pending == before);
		break;
	case OP_WAITING: {
		uint32_t t0 = now_s();
		int w = uls_offer_waiting((struct sockaddr *)&a);
		uint32_t t1 = now_s();
		FUZZ_ASSERT(w == 0 || w == 1);
		if (exact && t0 == t1)
			FUZZ_ASSERT(w == (before && t0 - stamp <= ULS_OFFER_FRESH_S));
		else if (!v->valid && !v->shrunk)
			FUZZ_ASSERT(w == 1);
		break;
	}
	case OP_SHRINK:
		v->len = value % BOARD_SIZE;
		FUZZ_ASSERT(truncate(path, (off_t)v->len) == 0);
		v->shrunk = 1;
		break;
	}
}

static const size_t sizes[4] = {BOARD_SIZE, 0, BOARD_SIZE / 2, BOARD_SIZE + PAGE};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct uls_offer_board head = {0};
	struct view v = {0};
	uint8_t flags;
	int fd;

	if (size < 25)
		return 0;
	flags = data[0];
	if (flags & 1)
		memcpy(&head, data + 1, 24);
	if (flags & 0x20)
		head.uid = (uint32_t)uls_uid();
	if (flags & 0x40)
		head.magic = ULS_OFFER_MAGIC;
	if (flags & 0x80) {
		head.version = ULS_OFFER_VERSION;
		head.slots = ULS_OFFER_SLOTS;
	}

	unlink(path);
	fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	FUZZ_ASSERT(fd >= 0);
	v.len = sizes[(flags >> 1) & 3];
	FUZZ_ASSERT(ftruncate(fd, (off_t)(v.len > 64 ? v.len : 64)) == 0);
	FUZZ_ASSERT(pwrite(fd, &head, 64, 0) == 64);
	FUZZ_ASSERT(ftruncate(fd, (off_t)v.len) == 0);
	if (flags & 8)
		FUZZ_ASSERT(fchmod(fd, 0620) == 0);
	/* The module grows a short file to the board's size: map all of it. */
	v.map = mmap(NULL, BOARD_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	FUZZ_ASSERT(v.map != MAP_FAILED);
	close(fd);
	/* What the module will do with it: a new header (all zeros) it fills in; another
	 * header, or a file others may write, it leaves alone. A file of size 0 has no
	 * header yet: zeros. */
	int zero = v.len == 0 || (head.magic == 0);
	int right = head.magic == ULS_OFFER_MAGIC && head.version == ULS_OFFER_VERSION &&
		    head.slots == ULS_OFFER_SLOTS && head.uid == (uint32_t)uls_uid();
	v.valid = !(flags & 8) && (zero || right);

	uls_offer_reset(dir);
	/* The first call maps the board: from then on the harness may read it whole. */
	(void)uls_offer_waiting((struct sockaddr *)&(struct sockaddr_in){.sin_family = AF_INET});
	if (v.valid) {
		v.len = v.len > BOARD_SIZE ? v.len : BOARD_SIZE;
		FUZZ_ASSERT(v.map->magic == ULS_OFFER_MAGIC);
	}
	for (size_t off = 25; off + OP_SIZE <= size; off += OP_SIZE)
		run_op(&v, data + off, flags);

	uls_offer_reset(dir);
	munmap(v.map, BOARD_SIZE);
	return 0;
}
