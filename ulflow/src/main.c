/* SPDX-License-Identifier: MIT */
/* The `ulflow` command: run a layout on this host, or be one rank of it. */
#include "runtime.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
	"usage: ulflow run [--timeout SECONDS] LAYOUT   start every process of LAYOUT here\n"
	"       ulflow worker LAYOUT                    be one rank (ULFLOW_RANK, SLURM_PROCID,\n"
	"                                               PMI_RANK or OMPI_COMM_WORLD_RANK)\n"
	"       ulflow check LAYOUT                     parse LAYOUT and print its group\n"
	"       ulflow --help | --version\n";

static int load(struct ulf_layout *l, const char *path)
{
	char err[512];
	const struct ulf_layout *lc = l;

	if (ulf_layout_load(l, path, ulf_policy_known, err, sizeof(err)) < 0) {
		fprintf(stderr, "ulflow: error: %s\n", err);
		return -1;
	}
	for (int i = 0; i < lc->nfilters; i++)
		if (!ulf_filter_find(lc->filters[i].kind)) {
			fprintf(stderr, "ulflow: error: %s: filter %s: unknown kind '%s'\n", path,
				lc->filters[i].name, lc->filters[i].kind);
			return -1;
		}
	return 0;
}

/* The first launcher variable that is set, or -1. */
static long env_first(const char *const *names, const char **which)
{
	for (int i = 0; names[i]; i++) {
		const char *v = getenv(names[i]);
		if (v && *v) {
			*which = names[i];
			return strtol(v, NULL, 10);
		}
	}
	return -1;
}

static int cmd_worker(const char *path)
{
	static const char *const rank_vars[] = { "ULFLOW_RANK", "SLURM_PROCID", "PMI_RANK",
						 "OMPI_COMM_WORLD_RANK", NULL };
	static const char *const size_vars[] = { "SLURM_NTASKS", "PMI_SIZE",
						 "OMPI_COMM_WORLD_SIZE", NULL };
	static struct ulf_layout l;
	const char *rv = NULL, *sv = NULL, *cp = getenv("ULFLOW_COORD_PORT"),
		   *pf = getenv("ULFLOW_PORT_FD");
	long rank, size;
	unsigned port;

	if (load(&l, path) < 0)
		return 2;
	rank = env_first(rank_vars, &rv);
	size = getenv("ULFLOW_RANK") ? -1 : env_first(size_vars, &sv);
	if (rank < 0 || rank >= l.nprocs) {
		fprintf(stderr, "ulflow: error: rank %ld%s%s is not one of the layout's %d "
				"processes\n", rank, rv ? " from " : " (no rank variable set)",
			rv ? rv : "", l.nprocs);
		return 2;
	}
	if (size >= 0 && size != l.nprocs) {
		fprintf(stderr, "ulflow: error: %s=%ld but the layout has %d processes\n", sv,
			size, l.nprocs);
		return 2;
	}
	port = cp ? (unsigned)strtoul(cp, NULL, 10) : l.coord_port;
	if (port == 0 && !(rank == 0 && pf)) {
		fprintf(stderr, "ulflow: error: no coordinator port: add 'coordinator PORT' to "
				"%s or set ULFLOW_COORD_PORT\n", path);
		return 2;
	}
	return ulf_worker_main(&l, (int)rank, port, pf ? atoi(pf) : -1);
}

static int cmd_check(const char *path)
{
	static struct ulf_layout l;

	if (load(&l, path) < 0)
		return 2;
	printf("%d processes, %d filters, %d streams, %d units of work\n", l.nprocs,
	       l.nfilters, l.nstreams, l.nworks);
	for (int i = 0; i < l.nstreams; i++)
		printf("stream %s -> %s policy=%s window=%u block=%zu\n",
		       l.filters[l.streams[i].from].name, l.filters[l.streams[i].to].name,
		       l.streams[i].policy, l.streams[i].window, l.streams[i].block);
	ulf_layout_fini(&l);
	return 0;
}

static int cmd_run(int argc, char **argv)
{
	static struct ulf_layout l;
	double timeout = 0;
	int i = 2, rc;

	if (i + 1 < argc && strcmp(argv[i], "--timeout") == 0) {
		timeout = strtod(argv[i + 1], NULL);
		i += 2;
	}
	if (i + 1 != argc) {
		fputs(usage, stderr);
		return 2;
	}
	if (load(&l, argv[i]) < 0)
		return 2;
	rc = ulf_launch(argv[i], &l, timeout);
	ulf_layout_fini(&l);
	return rc;
}

int ulf_main(int argc, char **argv)
{
	if (argc >= 2 && strcmp(argv[1], "--help") == 0) {
		fputs(usage, stdout);
		return 0;
	}
	if (argc >= 2 && strcmp(argv[1], "--version") == 0) {
		printf("ulflow %s\n", ULS_VERSION);
		return 0;
	}
	if (argc >= 3 && strcmp(argv[1], "run") == 0)
		return cmd_run(argc, argv);
	if (argc == 3 && strcmp(argv[1], "worker") == 0)
		return cmd_worker(argv[2]);
	if (argc == 3 && strcmp(argv[1], "check") == 0)
		return cmd_check(argv[2]);
	fputs(usage, stderr);
	return 2;
}
