/* SPDX-License-Identifier: MIT */
/*
 * The frames every ulflow connection carries, data streams and the control plane alike:
 * a 16-byte header (little-endian) and len payload bytes. See docs/ulflow.md.
 */
#ifndef ULF_WIRE_H
#define ULF_WIRE_H

#include <stddef.h>
#include <stdint.h>

#define ULF_WIRE_MAGIC 0x554c46u /* "ULF" in the top 24 bits of word 0 */
#define ULF_WIRE_MAX (64u << 20) /* the largest payload a peer may announce */

enum ulf_frame_type {
	/* Data streams: producer -> consumer, and ACK back. */
	ULF_F_DATA = 1, /* tag: the application's */
	ULF_F_EOW = 2,	/* end-of-work marker of one producer copy */
	ULF_F_ACK = 3,	/* tag: buffers the consumer started processing */
	ULF_F_CONN = 4, /* first frame of a data connection; tag: stream, copies */
	/* Control plane: worker <-> coordinator. */
	ULF_F_HELLO = 16, /* tag: rank; payload: u32 data port */
	ULF_F_TABLE = 17, /* payload: u32 data port per rank */
	ULF_F_READY = 18,
	ULF_F_START = 19, /* tag: uow; payload: work text */
	ULF_F_DONE = 20,  /* tag: uow */
	ULF_F_ERROR = 21, /* payload: message */
	ULF_F_ABORT = 22,
	ULF_F_QUIT = 23,
};

struct ulf_frame {
	uint32_t magic_type; /* magic << 8 | type */
	uint32_t len;
	uint64_t tag;
};
_Static_assert(sizeof(struct ulf_frame) == 16, "frame header is 16 bytes on the wire");

int ulf_read_full(int fd, void *buf, size_t n);
int ulf_write_full(int fd, const void *buf, size_t n);
/* Header and payload in one writev. */
int ulf_wire_send(int fd, unsigned type, uint64_t tag, const void *payload, uint32_t len);
/* Reads and checks a header: its type in *type; -EPROTO on a bad magic or size. */
int ulf_wire_recv_hdr(int fd, unsigned *type, uint32_t *len, uint64_t *tag);
/* A whole frame into buf (cap bytes); -EMSGSIZE when the payload does not fit. */
int ulf_wire_recv(int fd, unsigned *type, uint64_t *tag, void *buf, uint32_t cap,
		  uint32_t *len);

#endif
