/* SPDX-License-Identifier: MIT */
/*
 * The synthetic visualization server of seed 000, section 5.2: an image stored as chunks
 * of the distribution block size, read by vis_read, passed through vis_stage copies and
 * checked by vis_view. See docs/ulflow.md for the queries and arguments.
 */
#ifndef ULF_VIS_H
#define ULF_VIS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The image is w x h one-byte pixels cut into tw x th tiles, one chunk each. */
struct vis_geom {
	size_t image, chunk, nchunks;
	unsigned w, h, tw, th, cols, rows;
	unsigned view; /* side of the square view window a partial update moves */
};

/* 0, or -EINVAL when the sizes are not powers of two with chunk <= image. */
int vis_geom_init(struct vis_geom *g, size_t image, size_t chunk, unsigned view);
/*
 * Marks in need[] (nchunks entries) the chunks query work needs in UOW uow; returns how
 * many, or -EINVAL for a query it does not know: complete | partial DX | zoom N |
 * rect X Y W H.
 */
long vis_query(const struct vis_geom *g, const char *work, unsigned uow, bool *need);
/* Byte k of chunk c in the repository. */
void vis_chunk_fill(uint8_t *buf, size_t n, uint64_t c);

void vis_register(void);

#endif
