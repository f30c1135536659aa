/* SPDX-License-Identifier: MIT */
/*
 * The layout parser. Strict on purpose: an unknown keyword, a missing or repeated name,
 * a count out of range or a stream that names no filter is an error naming its line,
 * never a guess, because a wrong guess shows up as a hang across hosts.
 */
#include "layout.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <stdbool.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TOKENS 64

struct parser {
	struct ulf_layout *l;
	const char *name;
	int line;
	char *err;
	size_t errlen;
	int (*policy_ok)(const char *);
};

__attribute__((format(printf, 2, 3))) static int fail(struct parser *p, const char *fmt, ...)
{
	va_list ap;
	int n = snprintf(p->err, p->errlen, "%s:%d: ", p->name, p->line);

	va_start(ap, fmt);
	if (n >= 0 && (size_t)n < p->errlen)
		vsnprintf(p->err + n, p->errlen - (size_t)n, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

static bool valid_name(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n >= ULF_NAME_MAX)
		return false;
	for (; *s; s++)
		if (!isalnum((unsigned char)*s) && *s != '_' && *s != '-' && *s != '.')
			return false;
	return true;
}

/* A decimal count with an optional K, M or G suffix (powers of 1024), within [lo, hi]. */
static int parse_size(struct parser *p, const char *what, const char *s, unsigned long long lo,
		      unsigned long long hi, unsigned long long *out)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (end == s || errno || *s == '-')
		return fail(p, "%s: '%s' is not a number", what, s);
	if (*end == 'K' || *end == 'k')
		v <<= 10, end++;
	else if (*end == 'M' || *end == 'm')
		v <<= 20, end++;
	else if (*end == 'G' || *end == 'g')
		v <<= 30, end++;
	if (*end)
		return fail(p, "%s: '%s' is not a number", what, s);
	if (v < lo || v > hi)
		return fail(p, "%s: %llu is out of range [%llu, %llu]", what, v, lo, hi);
	*out = v;
	return 0;
}

static int find_proc(const struct ulf_layout *l, const char *name)
{
	for (int i = 0; i < l->nprocs; i++)
		if (strcmp(l->procs[i].name, name) == 0)
			return i;
	return -1;
}

static int find_filter(const struct ulf_layout *l, const char *name)
{
	for (int i = 0; i < l->nfilters; i++)
		if (strcmp(l->filters[i].name, name) == 0)
			return i;
	return -1;
}

static int add_kv(struct parser *p, struct ulf_kv *kv, int *n, const char *k, const char *v)
{
	for (int i = 0; i < *n; i++)
		if (strcmp(kv[i].key, k) == 0)
			return fail(p, "'%s' given twice", k);
	if (*n == ULF_MAX_ARGS)
		return fail(p, "more than %d arguments", ULF_MAX_ARGS);
	kv[*n].key = strdup(k);
	kv[*n].val = strdup(v);
	if (!kv[*n].key || !kv[*n].val) {
		free(kv[*n].key);
		free(kv[*n].val);
		return fail(p, "out of memory");
	}
	(*n)++;
	return 0;
}

static int kw_process(struct parser *p, char **t, int n)
{
	struct ulf_layout *l = p->l;
	struct in_addr a;
	struct ulf_lproc *pr;

	if (n != 3)
		return fail(p, "usage: process NAME IPV4-ADDRESS");
	if (!valid_name(t[1]))
		return fail(p, "bad process name '%s'", t[1]);
	if (find_proc(l, t[1]) >= 0)
		return fail(p, "process '%s' defined twice", t[1]);
	if (strlen(t[2]) >= sizeof(pr->host) || inet_pton(AF_INET, t[2], &a) != 1)
		return fail(p, "process %s: '%s' is not an IPv4 address", t[1], t[2]);
	if (l->nprocs == ULF_MAX_PROCS)
		return fail(p, "more than %d processes", ULF_MAX_PROCS);
	pr = &l->procs[l->nprocs++];
	snprintf(pr->name, sizeof(pr->name), "%s", t[1]);
	snprintf(pr->host, sizeof(pr->host), "%s", t[2]);
	return 0;
}

/* on=P or on=P1,P2,...: one process for every copy, or one per copy. */
static int place_copies(struct parser *p, struct ulf_lfilter *f, char *list)
{
	int cnt = 0;
	char *save = NULL;

	for (char *s = strtok_r(list, ",", &save); s; s = strtok_r(NULL, ",", &save)) {
		int pi = find_proc(p->l, s);
		if (pi < 0)
			return fail(p, "filter %s: no process '%s' (define it first)", f->name, s);
		if (cnt == ULF_MAX_COPIES)
			return fail(p, "filter %s: too many processes in on=", f->name);
		f->proc[cnt++] = pi;
	}
	if (cnt == 1)
		for (int c = 1; c < f->copies; c++)
			f->proc[c] = f->proc[0];
	else if (cnt != f->copies)
		return fail(p, "filter %s: %d copies but %d processes in on=", f->name,
			    f->copies, cnt);
	return 0;
}

static int kw_filter(struct parser *p, char **t, int n)
{
	struct ulf_layout *l = p->l;
	struct ulf_lfilter *f;
	char *on = NULL;
	unsigned long long v;

	if (n < 4)
		return fail(p, "usage: filter NAME KIND [copies=N] on=PROCESS[,...] [KEY=VALUE...]");
	if (!valid_name(t[1]) || !valid_name(t[2]))
		return fail(p, "bad filter name or kind '%s %s'", t[1], t[2]);
	if (find_filter(l, t[1]) >= 0)
		return fail(p, "filter '%s' defined twice", t[1]);
	if (l->nfilters == ULF_MAX_FILTERS)
		return fail(p, "more than %d filters", ULF_MAX_FILTERS);
	f = &l->filters[l->nfilters++];
	snprintf(f->name, sizeof(f->name), "%s", t[1]);
	snprintf(f->kind, sizeof(f->kind), "%s", t[2]);
	f->copies = 1;
	for (int i = 3; i < n; i++) {
		char *eq = strchr(t[i], '=');
		if (!eq || eq == t[i])
			return fail(p, "filter %s: '%s' is not KEY=VALUE", f->name, t[i]);
		*eq = '\0';
		if (strcmp(t[i], "copies") == 0) {
			if (parse_size(p, "copies", eq + 1, 1, ULF_MAX_COPIES, &v) < 0)
				return -EINVAL;
			f->copies = (int)v;
		} else if (strcmp(t[i], "on") == 0) {
			on = eq + 1;
		} else if (add_kv(p, f->args, &f->nargs, t[i], eq + 1) < 0) {
			return -EINVAL;
		}
	}
	if (!on)
		return fail(p, "filter %s: on=PROCESS is required", f->name);
	return place_copies(p, f, on);
}

static int stream_option(struct parser *p, struct ulf_lstream *s, char *opt)
{
	char *eq = strchr(opt, '=');
	unsigned long long v;

	if (!eq)
		return fail(p, "stream: '%s' is not KEY=VALUE", opt);
	*eq++ = '\0';
	if (strcmp(opt, "policy") == 0) {
		if (!valid_name(eq) || (p->policy_ok && !p->policy_ok(eq)))
			return fail(p, "stream: unknown policy '%s' (rr, dd or a registered one)",
				    eq);
		snprintf(s->policy, sizeof(s->policy), "%s", eq);
	} else if (strcmp(opt, "window") == 0) {
		if (parse_size(p, "window", eq, 1, 1u << 16, &v) < 0)
			return -EINVAL;
		s->window = (unsigned)v;
	} else if (strcmp(opt, "block") == 0) {
		if (parse_size(p, "block", eq, 1, 64u << 20, &v) < 0)
			return -EINVAL;
		s->block = (size_t)v;
	} else {
		return fail(p, "stream: unknown option '%s' (policy, window, block)", opt);
	}
	return 0;
}

/*
 * Whether filter dst is reachable from src along the streams read so far; on success
 * path[] holds the filters from src to dst and *len their count. Depth-first, each filter
 * visited once, so a layout of ULF_MAX_FILTERS filters costs at most that many steps.
 */
static bool reaches(const struct ulf_layout *l, int src, int dst, bool *seen, int *path,
		    int *len)
{
	path[(*len)++] = src;
	if (src == dst)
		return true;
	seen[src] = true;
	for (int i = 0; i < l->nstreams; i++)
		if (l->streams[i].from == src && !seen[l->streams[i].to] &&
		    reaches(l, l->streams[i].to, dst, seen, path, len))
			return true;
	(*len)--;
	return false;
}

/* A group is a DAG (docs/ulflow.md): end of work could never reach a filter on a cycle. */
static int check_acyclic(struct parser *p, int from, int to)
{
	const struct ulf_layout *l = p->l;
	bool seen[ULF_MAX_FILTERS] = { false };
	int path[ULF_MAX_FILTERS], len = 0;
	char cycle[ULF_MAX_FILTERS * (ULF_NAME_MAX + 4)] = "";
	size_t used = 0;

	if (!reaches(l, to, from, seen, path, &len))
		return 0;
	for (int i = 0; i < len; i++)
		used += (size_t)snprintf(cycle + used, sizeof(cycle) - used, "%s -> ",
					 l->filters[path[i]].name);
	snprintf(cycle + used, sizeof(cycle) - used, "%s", l->filters[to].name);
	return fail(p, "stream %s -> %s closes a cycle (%s): streams must form a DAG",
		    l->filters[from].name, l->filters[to].name, cycle);
}

static int kw_stream(struct parser *p, char **t, int n)
{
	struct ulf_layout *l = p->l;
	struct ulf_lstream *s;
	int from, to;

	if (n < 4 || strcmp(t[2], "->") != 0)
		return fail(p, "usage: stream FROM -> TO [policy=P] [window=N] [block=SIZE]");
	from = find_filter(l, t[1]);
	to = find_filter(l, t[3]);
	if (from < 0 || to < 0)
		return fail(p, "stream: no filter '%s' (define filters first)",
			    from < 0 ? t[1] : t[3]);
	if (from == to)
		return fail(p, "stream: %s feeds itself", t[1]);
	if (check_acyclic(p, from, to) < 0)
		return -EINVAL;
	if (l->nstreams == ULF_MAX_STREAMS)
		return fail(p, "more than %d streams", ULF_MAX_STREAMS);
	s = &l->streams[l->nstreams];
	memset(s, 0, sizeof(*s));
	s->from = from;
	s->to = to;
	snprintf(s->policy, sizeof(s->policy), "rr");
	for (int i = 4; i < n; i++)
		if (stream_option(p, s, t[i]) < 0)
			return -EINVAL;
	s->from_port = l->filters[from].nout++;
	s->to_port = l->filters[to].nin++;
	l->nstreams++;
	return 0;
}

static int kw_work(struct parser *p, char **t, int n)
{
	struct ulf_layout *l = p->l;
	unsigned long long cnt;
	char text[1024] = "";
	char **w;

	if (n < 2 || parse_size(p, "work count", t[1], 1, 100000, &cnt) < 0)
		return n < 2 ? fail(p, "usage: work COUNT [TEXT...]") : -EINVAL;
	for (int i = 2; i < n; i++) {
		size_t used = strlen(text);
		if (snprintf(text + used, sizeof(text) - used, "%s%s", i > 2 ? " " : "", t[i]) >=
		    (int)(sizeof(text) - used))
			return fail(p, "work text longer than %zu bytes", sizeof(text) - 1);
	}
	if (l->nworks + cnt > 1000000)
		return fail(p, "more than 1000000 units of work");
	w = realloc(l->works, (size_t)(l->nworks + (int)cnt) * sizeof(*w));
	if (!w)
		return fail(p, "out of memory");
	l->works = w;
	for (unsigned long long i = 0; i < cnt; i++) {
		if (!(l->works[l->nworks] = strdup(text)))
			return fail(p, "out of memory");
		l->nworks++;
	}
	return 0;
}

static int kw_scalar(struct parser *p, char **t, int n)
{
	struct ulf_layout *l = p->l;
	unsigned long long v;

	if (n != 2)
		return fail(p, "usage: %s VALUE", t[0]);
	if (strcmp(t[0], "block") == 0) {
		if (parse_size(p, "block", t[1], 1, 64u << 20, &v) < 0)
			return -EINVAL;
		l->block = (size_t)v;
	} else if (strcmp(t[0], "window") == 0) {
		if (parse_size(p, "window", t[1], 1, 1u << 16, &v) < 0)
			return -EINVAL;
		l->window = (unsigned)v;
	} else if (strcmp(t[0], "timeout") == 0) {
		if (parse_size(p, "timeout", t[1], 1, 3600, &v) < 0)
			return -EINVAL;
		l->timeout_s = (double)v;
	} else {
		if (parse_size(p, "coordinator port", t[1], 1, 65535, &v) < 0)
			return -EINVAL;
		l->coord_port = (unsigned)v;
	}
	return 0;
}

static int parse_line(struct parser *p, char *line)
{
	char *t[MAX_TOKENS], *save = NULL, *hash = strchr(line, '#');
	int n = 0;

	if (hash)
		*hash = '\0';
	for (char *s = strtok_r(line, " \t\r", &save); s; s = strtok_r(NULL, " \t\r", &save)) {
		if (n == MAX_TOKENS)
			return fail(p, "more than %d words", MAX_TOKENS);
		t[n++] = s;
	}
	if (n == 0)
		return 0;
	if (strcmp(t[0], "process") == 0)
		return kw_process(p, t, n);
	if (strcmp(t[0], "filter") == 0)
		return kw_filter(p, t, n);
	if (strcmp(t[0], "stream") == 0)
		return kw_stream(p, t, n);
	if (strcmp(t[0], "work") == 0)
		return kw_work(p, t, n);
	if (strcmp(t[0], "set") == 0)
		return n == 3 ? add_kv(p, p->l->sets, &p->l->nsets, t[1], t[2])
			      : fail(p, "usage: set KEY VALUE");
	if (strcmp(t[0], "block") == 0 || strcmp(t[0], "window") == 0 ||
	    strcmp(t[0], "timeout") == 0 || strcmp(t[0], "coordinator") == 0)
		return kw_scalar(p, t, n);
	return fail(p, "unknown keyword '%s' (process, filter, stream, work, set, block, "
		       "window, timeout, coordinator)", t[0]);
}

/* Whole-group checks once every line is read. */
static int check_group(struct parser *p)
{
	struct ulf_layout *l = p->l;

	p->line = 0;
	if (l->nprocs == 0)
		return fail(p, "no process line");
	if (l->nfilters == 0)
		return fail(p, "no filter line");
	for (int i = 0; i < l->nstreams; i++) {
		if (!l->streams[i].window)
			l->streams[i].window = l->window;
		if (!l->streams[i].block)
			l->streams[i].block = l->block;
	}
	if (l->nworks == 0)
		return fail(p, "no work line: nothing to run");
	return 0;
}

int ulf_layout_parse(struct ulf_layout *l, const char *text, const char *name,
		     int (*policy_ok)(const char *), char *err, size_t errlen)
{
	struct parser p = { .l = l, .name = name, .err = err, .errlen = errlen,
			    .policy_ok = policy_ok };
	char *copy = strdup(text), *cur;
	int rc = 0;

	memset(l, 0, sizeof(*l));
	l->block = 64 << 10;
	l->window = 4;
	l->timeout_s = 10;
	if (!copy)
		return -ENOMEM;
	/* strtok_r would merge empty lines and lose the numbering: split by hand. */
	cur = copy;
	while (rc == 0 && cur) {
		char *nl = strchr(cur, '\n');
		if (nl)
			*nl = '\0';
		p.line++;
		rc = parse_line(&p, cur);
		cur = nl ? nl + 1 : NULL;
	}
	free(copy);
	return rc ? rc : check_group(&p);
}

int ulf_layout_load(struct ulf_layout *l, const char *path, int (*policy_ok)(const char *),
		    char *err, size_t errlen)
{
	FILE *f = fopen(path, "r");
	char *buf = NULL;
	size_t cap = 0, len = 0;
	int rc;

	memset(l, 0, sizeof(*l));
	if (!f) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return -errno;
	}
	for (;;) {
		if (len + 4096 + 1 > cap) {
			char *nb = realloc(buf, cap = cap * 2 + 8192);
			if (!nb) {
				fclose(f);
				free(buf);
				snprintf(err, errlen, "%s: out of memory", path);
				return -ENOMEM;
			}
			buf = nb;
		}
		size_t r = fread(buf + len, 1, 4096, f);
		len += r;
		if (r < 4096)
			break;
	}
	fclose(f);
	buf[len] = '\0';
	rc = ulf_layout_parse(l, buf, path, policy_ok, err, errlen);
	free(buf);
	return rc;
}

void ulf_layout_fini(struct ulf_layout *l)
{
	if (!l)
		return;
	for (int i = 0; i < l->nfilters; i++)
		for (int k = 0; k < l->filters[i].nargs; k++) {
			free(l->filters[i].args[k].key);
			free(l->filters[i].args[k].val);
		}
	for (int k = 0; k < l->nsets; k++) {
		free(l->sets[k].key);
		free(l->sets[k].val);
	}
	for (int i = 0; i < l->nworks; i++)
		free(l->works[i]);
	free(l->works);
	memset(l, 0, sizeof(*l));
}

const char *ulf_kv_get(const struct ulf_kv *kv, int n, const char *key)
{
	for (int i = 0; i < n; i++)
		if (strcmp(kv[i].key, key) == 0)
			return kv[i].val;
	return NULL;
}
