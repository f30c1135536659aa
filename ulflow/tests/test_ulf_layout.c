/* SPDX-License-Identifier: MIT */
/* The layout parser: a good group parses into ports and placements; each mistake is an
 * error that names its line. */
#include "../../tests/unit/check.h"
#include "layout.h"

#include <errno.h>

static const char good[] =
	"# a comment\n"
	"block 16K\n"
	"window 3\n"
	"timeout 5\n"
	"coordinator 7400\n"
	"set image 1M\n"
	"process p0 127.0.0.1\n"
	"process p1 10.231.0.2   # trailing comment\n"
	"\n"
	"filter read vis_read on=p0\n"
	"filter st vis_stage copies=3 on=p0,p1,p1 cost=18\n"
	"filter view vis_view copies=2 on=p1\n"
	"stream read -> st policy=dd window=2\n"
	"stream st -> view block=32K\n"
	"work 2 complete\n"
	"work 1 partial 16\n";

static int only_rr_dd(const char *p)
{
	return strcmp(p, "rr") == 0 || strcmp(p, "dd") == 0;
}

static void test_good(void)
{
	struct ulf_layout l;
	char err[256] = "";

	CHECK_EQ(ulf_layout_parse(&l, good, "good", only_rr_dd, err, sizeof(err)), 0);
	CHECK_EQ(l.nprocs, 2);
	CHECK_EQ(l.nfilters, 3);
	CHECK_EQ(l.block, 16384);
	CHECK_EQ(l.coord_port, 7400);
	CHECK_EQ(l.filters[1].copies, 3);
	CHECK_EQ(l.filters[1].proc[0], 0);
	CHECK_EQ(l.filters[1].proc[2], 1);
	CHECK_EQ(l.filters[2].proc[1], 1);
	CHECK_EQ(l.filters[1].nin, 1);
	CHECK_EQ(l.filters[1].nout, 1);
	CHECK(strcmp(ulf_kv_get(l.filters[1].args, l.filters[1].nargs, "cost"), "18") == 0);
	CHECK(strcmp(ulf_kv_get(l.sets, l.nsets, "image"), "1M") == 0);
	CHECK(strcmp(l.streams[0].policy, "dd") == 0);
	CHECK_EQ(l.streams[0].window, 2);
	CHECK_EQ(l.streams[0].block, 16384);
	CHECK_EQ(l.streams[1].window, 3);
	CHECK_EQ(l.streams[1].block, 32768);
	CHECK_EQ(l.nworks, 3);
	CHECK(strcmp(l.works[2], "partial 16") == 0);
	ulf_layout_fini(&l);
}

struct bad {
	const char *text;
	const char *where; /* "bad:LINE:" */
	const char *words; /* a phrase of the message */
};

static const char head[] = "process p0 127.0.0.1\nfilter a vis_read on=p0\n"
			   "filter b vis_view on=p0\n";

/* Each case follows head, so an error in its first line names line 4. */
static void test_bad(void)
{
	static const struct bad cases[] = {
		{ "frobnicate 3\n", "bad:4:", "unknown keyword" },
		{ "stream a -> c\n", "bad:4:", "no filter 'c'" },
		{ "stream a -> a\n", "bad:4:", "feeds itself" },
		{ "stream a -> b\nstream b -> a\n", "bad:5:", "cycle (a -> b -> a)" },
		{ "filter c vis_stage on=p0\nstream a -> b\nstream b -> c\nstream c -> a\n",
		  "bad:7:", "stream c -> a closes a cycle (a -> b -> c -> a)" },
		{ "stream a -> b\nstream a -> b\nstream b -> a\n", "bad:6:", "must form a DAG" },
		{ "stream a b\n", "bad:4:", "usage: stream" },
		{ "stream a -> b policy=fastest\n", "bad:4:", "unknown policy" },
		{ "stream a -> b window=0\n", "bad:4:", "out of range" },
		{ "stream a -> b speed=3\n", "bad:4:", "unknown option" },
		{ "block 12Q\n", "bad:4:", "not a number" },
		{ "process p0 127.0.0.2\n", "bad:4:", "defined twice" },
		{ "process p9 host.example\n", "bad:4:", "not an IPv4 address" },
		{ "filter c vis_stage copies=2 on=p0,p0,p0\n", "bad:4:", "2 copies but 3" },
		{ "filter c vis_stage on=p7\n", "bad:4:", "no process 'p7'" },
		{ "filter c vis_stage copies=2\n", "bad:4:", "on=PROCESS is required" },
		{ "filter c vis_stage on=p0 cost\n", "bad:4:", "not KEY=VALUE" },
		{ "filter c vis_stage on=p0 x=1 x=2\n", "bad:4:", "given twice" },
		{ "filter a vis_stage on=p0\n", "bad:4:", "defined twice" },
		{ "work 0 complete\n", "bad:4:", "out of range" },
		{ "\n", "bad:0:", "no work line" },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char text[512], err[256] = "";
		struct ulf_layout l;
		int rc;

		snprintf(text, sizeof(text), "%s%s", head, cases[i].text);
		check_context("case %zu: %s", i, cases[i].text);
		rc = ulf_layout_parse(&l, text, "bad", only_rr_dd, err, sizeof(err));
		ulf_layout_fini(&l);
		if (rc != -EINVAL || strncmp(err, cases[i].where, strlen(cases[i].where)) != 0 ||
		    !strstr(err, cases[i].words))
			fprintf(stderr, "message: %s\n", err);
		CHECK_EQ(rc, -EINVAL);
		CHECK(strncmp(err, cases[i].where, strlen(cases[i].where)) == 0);
		CHECK(strstr(err, cases[i].words) != NULL);
	}
}

int main(void)
{
	test_good();
	test_bad();
	return CHECK_PASS;
}
