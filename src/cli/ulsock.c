/* SPDX-License-Identifier: MIT */
/* The ulsock command: run a program under the library, list live connections. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fabricd.h"
#include "ulsock/config.h"
#include "ulsock/stat.h"
#include "ulsock/ulsock.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: ulsock run [--profile latency|balanced|efficient] -- PROGRAM [ARGS...]\n"
		"       ulsock stat [--json]\n"
		"       ulsock fabricd [--port N] [--foreground]\n"
		"       ulsock --help | --version\n"
		"\n"
		"run   replaces itself with PROGRAM, with libulsock preloaded: TCP connections\n"
		"      between two ulsock processes on this host use shared memory, those to\n"
		"      allow-listed ulsock peers on other hosts the fabric, all others the\n"
		"      kernel. Profiles set how long a waiting call spins before it sleeps.\n"
		"stat  lists the live TCP connections of this user's ulsock processes, their\n"
		"      path (shm, fabric or kernel) and, for kernel ones, why; for fabric ones,\n"
		"      the provider.\n"
		"fabricd  the directory service that lets clients on other hosts reach this\n"
		"      host's ulsock servers over the fabric (docs/protocol.md 9.3).\n"
		"\n"
		"Environment: ULSOCK_PROFILE, ULSOCK_SPIN_US, ULSOCK_RX_PACE_NS, ULSOCK_RING_SIZE,\n"
		"ULSOCK_LOG, ULSOCK_LOG_FILE, ULSOCK_DISABLE, ULSOCK_SHORT_CALLS, ULSOCK_TRUST_UIDS,\n"
		"ULSOCK_LIBRARY, ULSOCK_FABRIC_PEERS, ULSOCK_FABRIC_PROVIDER, ULSOCK_FABRIC_PORT,\n"
		"ULSOCK_FABRIC_KEY, ULSOCK_FABRIC_WAIT_MS, ULSOCK_FABRIC_UNTAGGED\n"
		"(see README.md). run refuses to start PROGRAM when one of them is not valid.\n");
}

/* The library: ULSOCK_LIBRARY when set, else ../lib next to the directory of this
 * executable. Returns 0, or after saying why there is none -2 (a bad ULSOCK_LIBRARY) or
 * -1. */
static int library_path(char *out, size_t len, const char *prog)
{
	char exe[PATH_MAX], real[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	const char *env = getenv("ULSOCK_LIBRARY");

	if (env && *env) {
		/* A file this user can read (the dynamic loader would skip anything else with
		 * a message, and run the program without ulsock), by its full path, so that
		 * children in other directories find it too. */
		struct stat st;
		int fd = open(env, O_RDONLY | O_CLOEXEC), err = 0;

		if (fd < 0 || fstat(fd, &st) < 0)
			err = errno;
		else if (!S_ISREG(st.st_mode))
			err = S_ISDIR(st.st_mode) ? EISDIR : EINVAL;
		else if (!realpath(env, real))
			err = errno;
		if (fd >= 0)
			close(fd);
		if (err) {
			fprintf(stderr, "ulsock run: ULSOCK_LIBRARY='%s' cannot be read (%s): "
				"refusing to run %s\n", env, strerror(err), prog);
			return -2;
		}
		snprintf(out, len, "%s", real);
		return 0;
	}
	if (n >= 0) {
		exe[n] = '\0';
		snprintf(out, len, "%s/../lib/libulsock.so", dirname(exe));
		if (access(out, R_OK) == 0) {
			if (realpath(out, real))
				snprintf(out, len, "%s", real);
			return 0;
		}
	}
	fprintf(stderr, "ulsock: cannot find libulsock.so next to this command\n");
	return -1;
}

static void say_bad(const struct ulsock_config_bad *bad, void *prog)
{
	fprintf(stderr, "ulsock run: %s='%s' %s: refusing to run %s\n", bad->var, bad->value,
		bad->problem, (const char *)prog);
}

/* The library would warn about a bad value and go on with another; run refuses it
 * outright, before the program starts, so that a typo cannot go unseen. */
static int config_ok(const char *prog)
{
	return ulsock_config_check(say_bad, (void *)prog) == 0;
}

static int cmd_run(int argc, char **argv)
{
	static const struct option opts[] = {
		{"profile", required_argument, NULL, 'p'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	char lib[PATH_MAX], *preload;
	const char *old;
	int c, err;

	optind = 1;
	while ((c = getopt_long(argc, argv, "+p:h", opts, NULL)) != -1) {
		if (c == 'p') {
			if (!ulsock_profile_known(optarg)) {
				fprintf(stderr, "ulsock: unknown profile '%s'\n", optarg);
				return 2;
			}
			setenv(ULSOCK_ENV_PROFILE, optarg, 1);
		} else if (c == 'h') {
			usage(stdout);
			return 0;
		} else {
			usage(stderr);
			return 2;
		}
	}
	if (optind >= argc) {
		fprintf(stderr, "ulsock run: no program given\n");
		return 2;
	}
	if (!config_ok(argv[optind]))
		return 2;
	err = library_path(lib, sizeof(lib), argv[optind]);
	if (err < 0)
		return err == -2 ? 2 : 1;
	old = getenv("LD_PRELOAD");
	if (old && *old) {
		if (asprintf(&preload, "%s:%s", lib, old) < 0)
			return 1;
	} else {
		preload = lib;
	}
	setenv("LD_PRELOAD", preload, 1);
	execvp(argv[optind], argv + optind);
	fprintf(stderr, "ulsock run: cannot run %s: %s\n", argv[optind], strerror(errno));
	return errno == ENOENT ? 127 : 126;
}

static void json_str(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			printf("\\%c", *s);
		else if ((unsigned char)*s < 0x20)
			printf("\\u%04x", *s);
		else
			putchar(*s);
	}
	putchar('"');
}

/* Formats a binary address another process wrote: the family decides, nothing else. */
static void addr_str(const uint8_t raw[28], char *buf, size_t len)
{
	struct sockaddr_in6 s6;
	struct sockaddr_in s4;
	char a[INET6_ADDRSTRLEN] = "?";
	sa_family_t fam;

	memcpy(&fam, raw, sizeof(fam));
	if (fam == AF_INET) {
		memcpy(&s4, raw, sizeof(s4));
		inet_ntop(AF_INET, &s4.sin_addr, a, sizeof(a));
		snprintf(buf, len, "%s:%u", a, ntohs(s4.sin_port));
	} else if (fam == AF_INET6) {
		memcpy(&s6, raw, sizeof(s6));
		inet_ntop(AF_INET6, &s6.sin6_addr, a, sizeof(a));
		snprintf(buf, len, "[%s]:%u", a, ntohs(s6.sin6_port));
	} else {
		snprintf(buf, len, "-");
	}
}

/* The length of the UTF-8 character at p (n bytes there), or 0 when it is not one. */
static size_t utf8_char(const unsigned char *p, size_t n)
{
	unsigned char c = p[0], lo = 0x80, hi = 0xbf;
	size_t len;

	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf) {
		len = 2;
	} else if (c >= 0xe0 && c <= 0xef) {
		/* Not overlong, not a surrogate. */
		len = 3;
		lo = c == 0xe0 ? 0xa0 : 0x80;
		hi = c == 0xed ? 0x9f : 0xbf;
	} else if (c >= 0xf0 && c <= 0xf4) {
		/* Not overlong, not past U+10FFFF. */
		len = 4;
		lo = c == 0xf0 ? 0x90 : 0x80;
		hi = c == 0xf4 ? 0x8f : 0xbf;
	} else {
		return 0;
	}
	if (n < len || p[1] < lo || p[1] > hi)
		return 0;
	for (size_t i = 2; i < len; i++)
		if ((p[i] & 0xc0) != 0x80)
			return 0;
	return len;
}

/*
 * A reason as it may be printed: valid UTF-8 is kept, any other byte becomes U+FFFD, so
 * that the output is UTF-8 whatever the record holds (a strerror text in a Latin-1
 * locale, or one cut inside a character at 96 bytes, made --json invalid). The table
 * also shows a control character as '?': a newline or an escape sequence would forge
 * lines of it. JSON escapes those itself. out has room for 3 bytes per byte of in.
 */
static void reason_str(const char *in, char *out, int json)
{
	const unsigned char *p = (const unsigned char *)in;
	size_t n = strlen(in), k;

	for (size_t i = 0; i < n; i += k) {
		k = utf8_char(p + i, n - i);
		if (!k) {
			memcpy(out, "\xef\xbf\xbd", 3);
			out += 3;
			k = 1;
		} else if (!json && (p[i] < 0x20 || p[i] == 0x7f)) {
			*out++ = '?';
		} else {
			memcpy(out, p + i, k);
			out += k;
		}
	}
	*out = '\0';
}

static void print_rec(const struct ulsock_stat_rec *r, uint32_t pid, int json, int *first)
{
	uint32_t path = atomic_load(&r->path);
	char local[64], peer[64], raw[97], reason[3 * 96 + 1];

	/* Another process writes these: copy with a terminator, check the path. */
	addr_str(r->local, local, sizeof(local));
	addr_str(r->peer, peer, sizeof(peer));
	snprintf(raw, sizeof(raw), "%.96s", r->reason);
	reason_str(raw, reason, json);
	if (json) {
		printf("%s\n  {\"pid\": %u, \"fd\": %d, \"role\": \"%s\", \"local\": ", *first ? "" : ",",
		       pid, r->fd, r->role ? "server" : "client");
		json_str(local);
		printf(", \"peer\": ");
		json_str(peer);
		printf(", \"path\": \"%s\", \"tx_bytes\": %llu, \"rx_bytes\": %llu, \"reason\": ",
		       ulsock_path_name(path), (unsigned long long)atomic_load(&r->tx_bytes),
		       (unsigned long long)atomic_load(&r->rx_bytes));
		json_str(path == ULSOCK_PATH_SHM ? "" : reason);
		printf("}");
	} else {
		printf("%-7u %-5d %-6s %-26s %-26s %-7s %12llu %12llu %s\n", pid, r->fd,
		       r->role ? "server" : "client", local, peer, ulsock_path_name(path),
		       (unsigned long long)atomic_load(&r->tx_bytes),
		       (unsigned long long)atomic_load(&r->rx_bytes),
		       path == ULSOCK_PATH_SHM ? "" : reason);
	}
	*first = 0;
}

/*
 * Lists the live records of one process's file. A file of another layout (a process
 * running another ulsock version) is named on stderr and skipped; one whose header is not
 * written yet (the process is starting) is skipped without a word.
 */
static void stat_file(const char *path, const char *pid, int json, int *first)
{
	struct ulsock_stat_file *f, head;
	struct stat st;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return;
	if (fstat(fd, &st) < 0 || st.st_uid != getuid() ||
	    pread(fd, &head, offsetof(struct ulsock_stat_file, rec), 0) !=
		    (ssize_t)offsetof(struct ulsock_stat_file, rec) ||
	    head.magic != ULSOCK_STAT_MAGIC) {
		close(fd);
		return;
	}
	if (head.version != ULSOCK_STAT_VERSION || head.rec_size != sizeof(struct ulsock_stat_rec) ||
	    head.nslots != ULSOCK_STAT_SLOTS || st.st_size != (off_t)sizeof(struct ulsock_stat_file)) {
		fprintf(stderr,
			"ulsock stat: process %s keeps its records in another layout (another "
			"ulsock version): not listed\n", pid);
		close(fd);
		return;
	}
	/*
	 * A copy, not a mapping: the process may shrink its file between the size check and
	 * the read (a mapping would then fault with SIGBUS); a short read skips the file.
	 */
	f = malloc(sizeof(*f));
	if (f && pread(fd, f, sizeof(*f), 0) == (ssize_t)sizeof(*f)) {
		for (uint32_t i = 0; i < ULSOCK_STAT_SLOTS; i++)
			if (atomic_load(&f->rec[i].used))
				print_rec(&f->rec[i], f->pid, json, first);
	}
	free(f);
	close(fd);
}

/* Each ulsock process keeps its (unlinked) record file open: find it in /proc. */
static void stat_process(const char *pid, const char *want, int json, int *first)
{
	char dir[300], link[600], target[300];
	struct dirent *de;
	DIR *d;
	ssize_t n;

	snprintf(dir, sizeof(dir), "/proc/%s/fd", pid);
	d = opendir(dir);
	if (!d)
		return;
	while ((de = readdir(d)) != NULL) {
		if (de->d_name[0] == '.')
			continue;
		snprintf(link, sizeof(link), "%s/%s", dir, de->d_name);
		n = readlink(link, target, sizeof(target) - 1);
		if (n <= 0)
			continue;
		target[n] = '\0';
		/* The link names the file as its process's mount namespace sees it: under
		 * `ip netns exec` in a chroot, /dev/shm is reached by a longer path. */
		const char *name = strrchr(target, '/');
		if (name && strncmp(name + 1, want, strlen(want)) == 0) {
			stat_file(link, pid, json, first);
			break;
		}
	}
	closedir(d);
}

static int cmd_stat(int argc, char **argv)
{
	int json = argc > 1 && strcmp(argv[1], "--json") == 0, first = 1;
	char want[64];
	struct dirent *de;
	DIR *d = opendir("/proc");

	/* The record files' name, after the directory (ULSOCK_STAT_PREFIX's last part). */
	snprintf(want, sizeof(want), "%s%u.", strrchr(ULSOCK_STAT_PREFIX, '/') + 1,
		 (unsigned)getuid());
	if (json)
		printf("[");
	else
		printf("%-7s %-5s %-6s %-26s %-26s %-7s %12s %12s %s\n", "PID", "FD", "ROLE",
		       "LOCAL", "PEER", "PATH", "TX", "RX", "REASON");
	while (d && (de = readdir(d)) != NULL)
		if (de->d_name[0] >= '1' && de->d_name[0] <= '9')
			stat_process(de->d_name, want, json, &first);
	if (d)
		closedir(d);
	if (json)
		printf("%s]\n", first ? "" : "\n");
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
	    strcmp(argv[1], "help") == 0) {
		usage(stdout);
		return 0;
	}
	if (strcmp(argv[1], "--version") == 0) {
		printf("ulsock %s\n", ULS_VERSION);
		return 0;
	}
	if (strcmp(argv[1], "run") == 0)
		return cmd_run(argc - 1, argv + 1);
	if (strcmp(argv[1], "fabricd") == 0)
		return uls_fabricd_main(argc - 1, argv + 1);
	if (strcmp(argv[1], "stat") == 0)
		return cmd_stat(argc - 1, argv + 1);
	fprintf(stderr, "ulsock: unknown command '%s'\n", argv[1]);
	usage(stderr);
	return 2;
}
