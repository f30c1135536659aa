/* SPDX-License-Identifier: MIT */
/*
 * The offer board (transport/shm/offers.h), in a directory of its own: a server looks
 * for a segment only while an offer to its port waits; offers are counted per port and
 * taken back one by one (never below zero); another process of the user sees them;
 * counts nobody takes fade after ULS_OFFER_FRESH_S, and the next offer starts the count
 * again; a board the module did not make as
 * it makes them (group-writable, another owner, another layout) is not used, nor is one
 * shrunk under its mapping, nor the board of a server that trusts other users: then a
 * server always looks. A board removed and made again is found within about a second.
 */
#include <arpa/inet.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "core/config.h"
#include "os/libc.h"
#include "transport/shm/guard.h"
#include "transport/shm/offers.h"

static char dir[64];
static char path[128];

static struct sockaddr_in v4(uint16_t port)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};

	inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
	return a;
}

static struct sockaddr_in6 v6(uint16_t port)
{
	struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_port = htons(port)};

	a.sin6_addr = in6addr_loopback;
	return a;
}

#define SA(x) ((struct sockaddr *)&(x))

/* Two ports in different slots. */
static uint16_t port_a = 7001, port_b;

/* A fresh board: the module makes it again at its next use. */
static void fresh(void)
{
	unlink(path);
	uls_offer_reset(dir);
}

/* The test's own mapping of the board file, to read and write what other processes would. */
static struct uls_offer_board *peek(void)
{
	int fd = open(path, O_RDWR);
	void *m;

	CHECK(fd >= 0);
	m = mmap(NULL, sizeof(struct uls_offer_board), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	CHECK(m != MAP_FAILED);
	close(fd);
	return m;
}

static void test_counts(void)
{
	struct sockaddr_in a = v4(port_a), b = v4(port_b);
	struct sockaddr_in6 a6 = v6(port_a);
	struct stat st;

	check_context("counts");
	fresh();
	CHECK_INT(uls_offer_waiting(SA(a)), ==, 0);
	CHECK_INT(stat(path, &st), ==, 0);
	CHECK_INT(st.st_mode & 0777, ==, 0600);
	CHECK_INT(st.st_size, ==, (long long)sizeof(struct uls_offer_board));

	uls_offer_made(SA(a));
	CHECK_INT(uls_offer_waiting(SA(a)), ==, 1);
	CHECK_INT(uls_offer_waiting(SA(a6)), ==, 1); /* a port, whatever the family */
	CHECK_INT(uls_offer_waiting(SA(b)), ==, 0);
	uls_offer_made(SA(a));
	uls_offer_done(SA(a));
	CHECK_INT(uls_offer_waiting(SA(a)), ==, 1);
	uls_offer_done(SA(a));
	CHECK_INT(uls_offer_waiting(SA(a)), ==, 0);
	/* Taken back once too often (a count the board lost): it stays at zero. */
	uls_offer_done(SA(a));
	CHECK_INT(peek()->slot[uls_offer_slot_index(port_a)].pending, ==, 0);
	uls_offer_made(SA(a));
	CHECK_INT(uls_offer_waiting(SA(a)), ==, 1);
	uls_offer_done(SA(a));
}

static void test_other_process(void)
{
	struct sockaddr_in a = v4(port_a);
	pid_t pid;
	int status;

	check_context("other process");
	fresh();
	CHECK_INT(uls_offer_waiting(SA(a)), ==, 0);
	pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		uls_offer_reset(dir); /* a mapping of its own, as an unrelated process has */
		uls_offer_made(SA(a));
		_exit(0);
	}
	CHECK_INT(waitpid(pid, &status, 0), ==, pid);
	CHECK_INT(status, ==, 0);
	CHECK_INT(uls_offer_waiting(SA(a)), ==, 1);
}

static void test_fade(void)
{
	struct sockaddr_in a = v4(port_a);
	struct uls_offer_slot *s;
	struct timespec ts;

	check_context("fade");
	fresh();
	uls_offer_made(SA(a));
	s = &peek()->slot[uls_offer_slot_index(port_a)];
	clock_gettime(CLOCK_MONOTONIC, &ts);
	s->stamp = (uint32_t)ts.tv_sec + 1 - ULS_OFFER_FRESH_S;
	CHECK_INT(uls_offer_waiting(SA(a)), ==, 1);
	s->stamp = (uint32_t)ts.tv_sec - ULS_OFFER_FRESH_S - 1;
	CHECK_INT(uls_offer_waiting(SA(a)), ==, 0);
	/* A stamp from the future (no honest writer makes one) does not keep it waiting. */
	s->stamp = (uint32_t)ts.tv_sec + 1000;
	CHECK_INT(uls_offer_waiting(SA(a)), ==, 0);
	/* A new offer makes the slot fresh again. The stamp was not old: the count stays (an
	 * offer of another client stamps the next second while this one counts). */
	uls_offer_made(SA(a));
	CHECK_INT(s->pending, ==, 2);
	CHECK_INT(uls_offer_waiting(SA(a)), ==, 1);
	s->stamp = (uint32_t)ts.tv_sec + 2; /* a second ahead of now_s() */
	uls_offer_made(SA(a));
	CHECK_INT(s->pending, ==, 3);
	/* Under an old stamp the count is over: taken, the new offer leaves nothing waiting. */
	s->stamp = (uint32_t)ts.tv_sec - ULS_OFFER_FRESH_S - 1;
	uls_offer_made(SA(a));
	CHECK_INT(s->pending, ==, 1);
	CHECK_INT(uls_offer_waiting(SA(a)), ==, 1);
	uls_offer_done(SA(a));
	CHECK_INT(uls_offer_waiting(SA(a)), ==, 0);
	/* Counts that nobody took back, under a stamp that faded: the same. */
	s->pending = 1550;
	s->stamp = (uint32_t)ts.tv_sec - ULS_OFFER_FRESH_S - 1;
	uls_offer_made(SA(a));
	CHECK_INT(s->pending, ==, 1);
	uls_offer_done(SA(a));
	CHECK_INT(uls_offer_waiting(SA(a)), ==, 0);
	/* A fresh stamp keeps the counts: two offers, two finds. */
	uls_offer_made(SA(a));
	uls_offer_made(SA(a));
	CHECK_INT(s->pending, ==, 2);
	uls_offer_done(SA(a));
	CHECK_INT(uls_offer_waiting(SA(a)), ==, 1);
	uls_offer_done(SA(a));
	CHECK_INT(uls_offer_waiting(SA(a)), ==, 0);
}

/*
 * Two clients offer at once to a slot whose stamp faded over counts nobody took: the old
 * counts may go, never an offer of the two (a server would then not look for it, and
 * its connection would stay on TCP). Counted: 2 (the old counts gone) or OLD + 2, never
 * less.
 */
#define RACE_ROUNDS 20000
#define RACE_OLD 5u

static _Atomic unsigned race_go, race_done;

static void *race_offer(void *arg)
{
	struct sockaddr_in a = v4(port_a);

	for (unsigned r = 1; r <= RACE_ROUNDS; r++) {
		for (unsigned spins = 0; atomic_load(&race_go) != r; spins++)
			if ((spins & 255) == 255)
				sched_yield();
		uls_offer_made(SA(a));
		atomic_fetch_add(&race_done, 1);
	}
	(void)arg;
	return NULL;
}

static void test_race(void)
{
	struct uls_offer_slot *s;
	struct timespec ts;
	pthread_t t[2];
	int lost = 0;

	check_context("two offers at once");
	fresh();
	struct sockaddr_in a = v4(port_a);
	uls_offer_made(SA(a)); /* the module makes the board */
	s = &peek()->slot[uls_offer_slot_index(port_a)];
	for (int i = 0; i < 2; i++)
		CHECK_INT(pthread_create(&t[i], NULL, race_offer, NULL), ==, 0);
	for (unsigned r = 1; r <= RACE_ROUNDS; r++) {
		clock_gettime(CLOCK_MONOTONIC, &ts);
		s->pending = RACE_OLD;
		s->stamp = (uint32_t)ts.tv_sec - ULS_OFFER_FRESH_S - 1;
		atomic_store(&race_done, 0);
		atomic_store(&race_go, r);
		while (atomic_load(&race_done) != 2)
			sched_yield();
		uint32_t n = s->pending;
		if (n != 2 && n != RACE_OLD + 2)
			lost++;
	}
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	CHECK_INT(lost, ==, 0);
}

/* A board file as someone else left it: never used, so a server always looks. */
static void check_unused(const char *what)
{
	struct sockaddr_in a = v4(port_a), b = v4(port_b);

	check_context("%s", what);
	uls_offer_reset(dir);
	CHECK_INT(uls_offer_waiting(SA(b)), ==, 1);
	uls_offer_made(SA(a)); /* nothing to count on */
	CHECK_INT(uls_offer_waiting(SA(b)), ==, 1);
}

static void test_bad_files(void)
{
	struct uls_offer_board *m;
	int fd;

	fresh();
	fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
	CHECK(fd >= 0);
	CHECK_INT(fchmod(fd, 0620), ==, 0);
	close(fd);
	check_unused("group may write");

	fresh();
	CHECK_INT(symlink("/dev/null", path), ==, 0);
	check_unused("a symbolic link");

	fresh();
	CHECK_INT(mkdir(path, 0700), ==, 0);
	check_unused("a directory");
	CHECK_INT(rmdir(path), ==, 0);

	fresh();
	uls_offer_made(SA(((struct sockaddr_in){.sin_family = AF_INET})));
	m = peek();
	m->magic = 0x1234;
	check_unused("another magic");
	m->magic = ULS_OFFER_MAGIC;
	m->version = ULS_OFFER_VERSION + 1;
	check_unused("another version");
	m->version = ULS_OFFER_VERSION;
	m->uid = (uint32_t)uls_uid() + 1;
	check_unused("another user's header");

	if (geteuid() == 0) {
		fresh();
		fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
		CHECK(fd >= 0);
		CHECK_INT(fchown(fd, 65534, 65534), ==, 0);
		close(fd);
		check_unused("owned by nobody");
	}
}

static void test_shrunk(void)
{
	struct sockaddr_in a = v4(port_a), b = v4(port_b);

	check_context("shrunk");
	fresh();
	uls_offer_made(SA(a));
	CHECK_INT(uls_offer_waiting(SA(b)), ==, 0);
	/* Another process of the user shrinks it: the guard cuts the mapping at the next
	 * access, and from then on the server looks every time. */
	CHECK_INT(truncate(path, 0), ==, 0);
	CHECK_INT(uls_offer_waiting(SA(b)), ==, 1);
	CHECK_INT(uls_offer_waiting(SA(b)), ==, 1);
	uls_offer_made(SA(a));
	uls_offer_done(SA(a));
}

static void test_removed(void)
{
	struct sockaddr_in a = v4(port_a), b = v4(port_b);
	pid_t pid;
	int status, waited = 0;

	check_context("removed");
	fresh();
	uls_offer_made(SA(a));
	CHECK_INT(uls_offer_waiting(SA(a)), ==, 1);
	/* Removed (logind's RemoveIPC, an rm): another process makes it again and offers. */
	CHECK_INT(unlink(path), ==, 0);
	pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		uls_offer_reset(dir);
		uls_offer_made(SA(b));
		_exit(0);
	}
	CHECK_INT(waitpid(pid, &status, 0), ==, pid);
	CHECK_INT(status, ==, 0);
	/* This process finds the new file within about a second, and its offers there. */
	while (!uls_offer_waiting(SA(b)) && waited < 3000) {
		usleep(50000);
		waited += 50;
	}
	CHECK_INT(uls_offer_waiting(SA(b)), ==, 1);
	CHECK_INT(uls_offer_waiting(SA(a)), ==, 0);
}

static void test_trust(void)
{
	struct sockaddr_in b = v4(port_b);

	check_context("trust");
	fresh();
	CHECK_INT(uls_offer_waiting(SA(b)), ==, 0);
	uls_cfg.ntrusted = 1;
	uls_cfg.trusted[0] = uls_uid();
	CHECK_INT(uls_offer_waiting(SA(b)), ==, 0); /* only itself */
	uls_cfg.trusted[0] = uls_uid() + 1;
	CHECK_INT(uls_offer_waiting(SA(b)), ==, 1);
	uls_cfg.ntrusted = 0;
}

int main(void)
{
	uls_libc_init();
	uls_config_load();
	CHECK_INT(uls_guard_install(sigaction), ==, 0);
	snprintf(dir, sizeof(dir), "/tmp/uls-offers.XXXXXX");
	CHECK(mkdtemp(dir) != NULL);
	snprintf(path, sizeof(path), "%s/ulsock-offers.%u", dir, (unsigned)uls_uid());
	for (port_b = port_a + 1; uls_offer_slot_index(port_b) == uls_offer_slot_index(port_a);)
		port_b++;

	test_race();
	test_counts();
	test_other_process();
	test_fade();
	test_bad_files();
	test_shrunk();
	test_removed();
	test_trust();

	unlink(path);
	rmdir(dir);
	return CHECK_PASS;
}
