/* SPDX-License-Identifier: MIT */
/* Image geometry and queries of the visualization server, shared by read and view. */
#include "vis.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static bool pow2(size_t v)
{
	return v && !(v & (v - 1));
}

static unsigned log2z(size_t v)
{
	unsigned k = 0;

	while ((size_t)1 << (k + 1) <= v)
		k++;
	return k;
}

int vis_geom_init(struct vis_geom *g, size_t image, size_t chunk, unsigned view)
{
	unsigned li, lc;

	if (!pow2(image) || !pow2(chunk) || chunk > image)
		return -EINVAL;
	li = log2z(image);
	lc = log2z(chunk);
	memset(g, 0, sizeof(*g));
	g->image = image;
	g->chunk = chunk;
	/* Square when the exponent is even, twice as wide as high otherwise. */
	g->w = 1u << ((li + 1) / 2);
	g->h = 1u << (li / 2);
	g->tw = 1u << ((lc + 1) / 2);
	g->th = 1u << (lc / 2);
	if (g->tw > g->w || g->th > g->h) {
		g->tw = g->w;
		g->th = (unsigned)(chunk / g->w);
	}
	g->cols = g->w / g->tw;
	g->rows = g->h / g->th;
	g->nchunks = (size_t)g->cols * g->rows;
	g->view = view && view < g->w / 2 ? view : g->w / 4;
	return 0;
}

/* Marks the chunks that intersect the rectangle [x, x+w) x [y, y+h), clipped. */
static long mark_rect(const struct vis_geom *g, unsigned x, unsigned y, unsigned w,
		      unsigned h, bool *need)
{
	long n = 0;

	if (w == 0 || h == 0 || x >= g->w || y >= g->h)
		return 0;
	if (x + w > g->w)
		w = g->w - x;
	if (y + h > g->h)
		h = g->h - y;
	for (unsigned r = y / g->th; r <= (y + h - 1) / g->th; r++)
		for (unsigned c = x / g->tw; c <= (x + w - 1) / g->tw; c++) {
			size_t id = (size_t)r * g->cols + c;
			if (!need[id])
				need[id] = true, n++;
		}
	return n;
}

long vis_query(const struct vis_geom *g, const char *work, unsigned uow, bool *need)
{
	unsigned a, b, c, d;

	memset(need, 0, g->nchunks * sizeof(*need));
	if (strcmp(work, "complete") == 0 || work[0] == '\0')
		return mark_rect(g, 0, 0, g->w, g->h, need);
	if (sscanf(work, "partial %u", &a) == 1 && a > 0) {
		/*
		 * The view slides right by a pixels per query and wraps: the query needs the
		 * strip of pixels that comes into view, each chunk touching it fetched whole.
		 */
		unsigned span = g->w - g->view - a + 1;
		unsigned vx = (unsigned)(((unsigned long long)uow * a) % (span ? span : 1));
		unsigned vy = (g->h - g->view) / 2;
		return mark_rect(g, vx + g->view, vy, a, g->view, need);
	}
	if (sscanf(work, "zoom %u", &a) == 1 && a > 0) {
		long n = 0;
		for (unsigned i = 0; i < a && (size_t)n < g->nchunks; i++) {
			size_t id = ((size_t)uow * a + i) % g->nchunks;
			if (!need[id])
				need[id] = true, n++;
		}
		return n;
	}
	if (sscanf(work, "rect %u %u %u %u", &a, &b, &c, &d) == 4)
		return mark_rect(g, a, b, c, d, need);
	return -EINVAL;
}

void vis_chunk_fill(uint8_t *buf, size_t n, uint64_t c)
{
	uint64_t x = (c + 1) * 0x9e3779b97f4a7c15ull;

	/* Eight bytes per step of a cheap mixing sequence: distinct per chunk and offset. */
	for (size_t i = 0; i < n; i += 8) {
		x ^= x >> 29;
		x *= 0xbf58476d1ce4e5b9ull;
		x += i;
		memcpy(buf + i, &x, n - i < 8 ? n - i : 8);
	}
}
